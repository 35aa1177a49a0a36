#!/usr/bin/env python3
"""Store writes: the CPU and memory that writing the service's rows costs, inside DuckDB's buffer
pool and outside it, and what one checkpoint adds on top.

bench/load_generator.py's traces are mapped and scored in this process (as a mapping worker
would), then written through the store's own write path (`append_spans`, `write_traces`) with the
service's store settings, in rounds of 500 traces, with automatic checkpoints off. The process's
anonymous memory (RssAnon) and DuckDB's own account (`duckdb_memory()`: buffer pool and spilled
bytes) are read after the writes; then one CHECKPOINT runs, as the automatic ones do (without
merging row groups: see docs/architecture.md, "Checkpoints"), while a thread samples RssAnon every
10 ms. The rows to write are built first, and their memory is counted in the baseline. With
`--blocks N` the same rows are written N times, a checkpoint after each, and each checkpoint's CPU
is printed: how checkpoints grow with the tables.

    .venv/bin/python bench/store_writes.py                   # 20,000 traces, the defaults
    .venv/bin/python bench/store_writes.py --threads 1       # DuckDB on one thread
    .venv/bin/python bench/store_writes.py --setting "disabled_compression_methods='dictionary'"
    .venv/bin/python bench/store_writes.py --jobs-per-write 2  # two jobs' rows in one write_traces
    .venv/bin/python bench/store_writes.py --traces 10000 --blocks 24   # 24 checkpoints as the tables grow
    .venv/bin/python bench/store_writes.py --traces 10000 --blocks 24 --setting max_vacuum_tasks=100
                                                              # ... merging row groups, DuckDB's default
    .venv/bin/python bench/store_writes.py --aggregate-history 560000   # after a month of aggregates

It prints the CPU seconds of the span appends and of the trace writes apart.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
from load_generator import build

from collector.otlp.batch import decode_request
from collector.processors.config import SamplingConfig
from collector.processors.mapping_job import MapJob, Scoring, run_map_job
from collector.processors.scoring import ScoringSetup
from collector.schema.trace_rows import TraceTables, concat_trace_tables
from collector.store.config import StoreConfig
from collector.store.duckdb_store import DuckDBStore

ROUND = 500  # traces per write, as the assembler's jobs


def anon_mib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) // 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rounds(traces: int) -> list[tuple[pa.Table, pa.Table, TraceTables]]:
    """(spans, events, mapped rows) per round of ROUND traces."""
    scoring = Scoring.of(ScoringSetup.from_entries(None, SamplingConfig(), False, False))
    built = []
    for r in range(traces // ROUND):
        batches = [decode_request(build(100, r * (ROUND // 100) + k)) for k in range(ROUND // 100)]
        spans = pa.concat_tables([b.spans for b in batches])
        events = pa.concat_tables([b.events for b in batches])
        ids = {t: ("complete", 1) for t in spans.column("trace_id").to_pylist()}
        built.append((spans, events, run_map_job(MapJob(spans, events, ids, 0, 0), scoring).tables))
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=None, help="store.threads (default: DuckDB's)")
    parser.add_argument("--memory-limit", default=StoreConfig().memory_limit, help="store.memory_limit")
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a DuckDB setting, as SET GLOBAL NAME = VALUE (repeatable); not a ragpulse key",
    )
    parser.add_argument(
        "--jobs-per-write",
        type=int,
        default=1,
        help="rounds whose rows one write_traces stores (the assembler writes jobs finished together)",
    )
    parser.add_argument(
        "--blocks",
        type=int,
        default=1,
        help="write the rows this many times, a checkpoint after each (the growth with the tables)",
    )
    parser.add_argument(
        "--aggregate-history",
        type=int,
        default=0,
        metavar="ROWS",
        help="score_aggregates rows of earlier minutes in the store before the writes (13 a minute "
        "for one service: 560,000 is about a month)",
    )
    args = parser.parse_args()

    work = rounds(args.traces)
    per = args.jobs_per_write
    writes = [concat_trace_tables([t for _, _, t in work[i : i + per]]) for i in range(0, len(work), per)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "writes.duckdb"
        # Automatic checkpoints off (a threshold of 1 TiB): the one checkpoint is timed apart.
        config = StoreConfig(
            checkpoint_threshold_mb=1 << 20, threads=args.threads, memory_limit=args.memory_limit
        )
        store = DuckDBStore(path, config)
        for setting in args.setting:  # an experiment's DuckDB setting: the store has no key for it
            store._con.execute(f"SET GLOBAL {setting}")
        if args.aggregate_history:
            seed_aggregate_history(store, args.aggregate_history)
        baseline = anon_mib()
        started = cpu_seconds()
        for spans, events, _ in work:
            store.append_spans(spans, events)
        append_cpu = cpu_seconds() - started
        for tables in writes:
            store.write_traces(tables, [])
        write_cpu = cpu_seconds() - started
        after_writes = anon_mib()
        pool, spilled = store.query(
            "SELECT sum(memory_usage_bytes) >> 20, sum(temporary_storage_bytes) >> 20 FROM duckdb_memory()",
            1,
            60,
        ).rows[0]
        wal = os.path.getsize(f"{path}.wal") >> 20

        peak = [after_writes]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], anon_mib())
                time.sleep(0.01)

        sampler = threading.Thread(target=sample)
        sampler.start()
        started, wall = cpu_seconds(), time.perf_counter()
        automatic_checkpoint(store)
        checkpoint_cpu, checkpoint_wall = cpu_seconds() - started, time.perf_counter() - wall
        done.set()
        sampler.join()
        size = path.stat().st_size >> 20
        later = []  # CPU seconds of each later block's checkpoint
        for _ in range(1, args.blocks):
            for spans, events, _ in work:
                store.append_spans(spans, events)
            for tables in writes:
                store.write_traces(tables, [])
            started = cpu_seconds()
            automatic_checkpoint(store)
            later.append(cpu_seconds() - started)
        final_size = path.stat().st_size >> 20
        store.close()

    threads = args.threads or "DuckDB's default"
    print(
        f"{len(work) * ROUND} traces written in rounds of {ROUND} ({per} a write), threads {threads}, "
        f"memory_limit {args.memory_limit}"
        + "".join(f", {setting}" for setting in args.setting)
        + (f", {args.aggregate_history} earlier aggregate rows" if args.aggregate_history else "")
    )
    print(
        f"writes: {write_cpu:.2f} CPU s (span appends {append_cpu:.2f}, trace writes "
        f"{write_cpu - append_cpu:.2f}); write-ahead log {wal} MiB"
    )
    print(
        f"RssAnon: {baseline} MiB before the writes (rows built), {after_writes} MiB after them "
        f"(+{after_writes - baseline}); DuckDB's account: {pool} MiB in its buffer pool, "
        f"{spilled} MiB spilled"
    )
    print(
        f"checkpoint: {checkpoint_cpu:.2f} CPU s ({checkpoint_wall:.2f} s); RssAnon peak {peak[0]} MiB "
        f"(+{peak[0] - after_writes} over the writes); file {size} MiB"
    )
    if later:
        every = [checkpoint_cpu, *later]
        print(
            f"{args.blocks} blocks, a checkpoint after each: {sum(every):.2f} CPU s in all, the largest "
            f"{max(every):.2f}; file {final_size} MiB; each: " + " ".join(f"{c:.2f}" for c in every)
        )


def seed_aggregate_history(store: DuckDBStore, rows: int) -> None:
    """`rows` aggregate rows of the minutes before the writes (13 score names a minute), checkpointed
    as a long-running store's would be: what each write's upsert of `score_aggregates` meets."""
    store._con.execute(
        f"""INSERT INTO score_aggregates BY NAME
        SELECT TIMESTAMP '2026-01-01' + INTERVAL (i // 13) MINUTE AS bucket, 'rag-load' AS service_name,
               'score-' || (i % 13) AS name, 10 AS n, 5 AS n_pass, 5 AS n_fail, 0 AS n_error,
               0 AS n_skipped, 5.0 AS sum, 3.0 AS sum_sq, 0.0 AS min, 1.0 AS max,
               now()::TIMESTAMP AS updated_at
        FROM range({rows}) r(i)"""
    )
    store._con.execute("CHECKPOINT")


def automatic_checkpoint(store: DuckDBStore) -> None:
    """A checkpoint as a commit past `checkpoint_threshold_mb` runs one: on the store's connection,
    with its settings (`store.checkpoint()` is the explicit kind, which also merges row groups)."""
    store._con.execute("CHECKPOINT")


if __name__ == "__main__":
    main()
