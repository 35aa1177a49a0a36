#!/usr/bin/env python3
"""`ragpulse rescore` on a large store: deterministic scores given again to `--traces` stored traces
(default 1,000,000), in traces per second, with the process's peak memory.

The store is generated here (and kept for re-runs with `--db`): stored spans and the rows the
service makes of them. A template of `--templates` RAG traces (bench/load_generator.py's
OpenInference traces, 4 spans each, decoded as the OTLP receiver decodes them) is replicated with
fresh trace ids, span ids and times, vectorised in Arrow, spread over the last `--days` days in time
order, over 3 services, and appended with `DuckDBStore.append_spans`; each chunk is then mapped and
scored by the service's own job (`run_map_job` with the default evaluators, in 2 processes) and
written with `DuckDBStore.write_traces`, so every trace has its 13 default deterministic scores, its
steps and documents, and `score_aggregates` is kept as `serve` keeps it. The build's time is printed.

Then `ragpulse rescore --db F --since <the whole store> --json` runs as a subprocess (the installed
entry point, a config with `assembler.workers: 2` and no `evaluators:`): every default score, then
`--evaluator faithfulness` alone. Each run's wall time, traces/s, scores written and replaced (from
its JSON), peak RSS (the rescore process, and the sum of it and its workers, sampled every 0.2 s) and
the load average before it are printed, then a check that `score_aggregates` still counts `scores`.
`--memory-limit` sets the runs' `store.memory_limit`; `--time-limit S` interrupts a run after S
seconds (as Ctrl-C does) and reports its rate to its last stored batch, from its `rescore_runs` row.
Each run moves the rows it replaces to `score_history`: copy a kept store to compare runs alike.

    .venv/bin/python bench/rescore.py                                        # 1,000,000 traces
    .venv/bin/python bench/rescore.py --traces 100000 --db /tmp/rescore-100k.duckdb
    .venv/bin/python bench/rescore.py --db /tmp/rescore-1m.duckdb --memory-limit 1GB  # the store kept
    .venv/bin/python bench/rescore.py --build-only --traces 20000 --db /tmp/rescore-20k.duckdb
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load_generator import build  # noqa: E402

from collector.otlp.batch import decode_request  # noqa: E402
from collector.processors.config import SamplingConfig  # noqa: E402
from collector.processors.mapping_job import MapJob, Scoring, run_map_job  # noqa: E402
from collector.processors.scoring import ScoringSetup  # noqa: E402
from collector.schema.trace_rows import TraceTables  # noqa: E402
from collector.store.duckdb_store import DuckDBStore  # noqa: E402

SERVICES = ["shop-bot", "support-bot", "search-bot"]
CHUNK = 20_000  # traces per mapping job and per write
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
_NS = 1_000_000_000


# ---------------------------------------------------------------- the stored spans


class Template:
    """`traces` decoded load-generator traces, their span rows grouped by trace, with what the
    replicas change held as numbers (span ids, times relative to the trace's first span)."""

    def __init__(self, traces: int) -> None:
        spans = pa.concat_tables(
            [decode_request(build(min(100, traces - i), 7 + i)).spans for i in range(0, traces, 100)]
        )
        ids = pc.unique(spans["trace_id"])
        index = pc.index_in(spans["trace_id"], value_set=ids).to_numpy()
        order = np.argsort(index, kind="stable")
        self.spans = spans.take(pa.array(order))
        trace_of = index[order]
        self.traces = len(ids)
        self.counts = np.bincount(trace_of, minlength=self.traces)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]])
        start_ns = _ns(self.spans["start_time"])
        end_ns = _ns(self.spans["end_time"])
        first = np.minimum.reduceat(start_ns, self.starts)
        last = np.maximum.reduceat(end_ns, self.starts)
        self.start_offset = start_ns - first[trace_of]
        self.end_offset = end_ns - first[trace_of]
        self.trace_length = last - first  # per template trace
        self.span_id = _u64(self.spans["span_id"])
        parent = self.spans["parent_span_id"]
        self.has_parent = pc.is_valid(parent).to_numpy(zero_copy_only=False)
        self.parent_id = _u64(pc.fill_null(parent, "0000000000000000"))
        self.events_schema = decode_request(build(1, 0)).events.schema

    def replicate(self, first: int, n: int, total: int, days: float, now_ns: int) -> pa.Table:
        """The span rows of traces `first` .. `first + n` of `total`: trace i copies template trace
        i % traces with fresh ids; the traces start in time order over the `days` before `now_ns`
        (each a random moment within its share of the window), service i % 3."""
        rng = np.random.default_rng(first + 1)
        number = np.arange(first, first + n, dtype=np.int64)
        template = number % self.traces
        width = days * 86400 * _NS
        begins = now_ns - width + (width * (number + rng.random(n)) / total).astype(np.int64)
        begins = np.sort(begins)  # arrival order
        trace_keys = rng.integers(0, 2**63, size=(n, 2), dtype=np.int64, endpoint=False).view(np.uint64)
        span_keys = rng.integers(0, 2**63, size=n, dtype=np.int64).view(np.uint64)
        services = number % len(SERVICES)
        # Row r of the chunk: span `rows[r]` of the template, trace `owner[r]` of the chunk.
        counts = self.counts[template]
        owner = np.repeat(np.arange(n), counts)
        within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        rows = self.starts[template][owner] + within
        columns = {name: self.spans[name].take(pa.array(rows)) for name in self.spans.column_names}
        start = begins[owner] + self.start_offset[rows]
        end = begins[owner] + self.end_offset[rows]
        received = begins[owner] + self.trace_length[template][owner] + 50_000_000
        columns["trace_id"] = _hex(trace_keys[:, 0], trace_keys[:, 1]).take(pa.array(owner))
        columns["span_id"] = _hex(self.span_id[rows] ^ span_keys[owner])
        columns["parent_span_id"] = pc.if_else(
            pa.array(self.has_parent[rows]),
            _hex(self.parent_id[rows] ^ span_keys[owner]),
            pa.scalar(None, pa.string()),
        )
        columns["start_time"] = pa.array(start, pa.timestamp("ns"))
        columns["end_time"] = pa.array(end, pa.timestamp("ns"))
        columns["received_at"] = pa.array(received, pa.timestamp("ns"))
        names = pa.array(SERVICES, pa.string())
        resources = pa.array([json.dumps({"service.name": s}, separators=(",", ":")) for s in SERVICES])
        columns["service_name"] = names.take(pa.array(services[owner]))
        columns["resource_attributes"] = resources.take(pa.array(services[owner]))
        table = pa.table(columns)
        return table.cast(self.spans.schema)

    def no_events(self) -> pa.Table:
        return self.events_schema.empty_table()


def _ns(column: pa.ChunkedArray) -> np.ndarray:
    return column.cast(pa.int64()).to_numpy()


def _u64(column: pa.ChunkedArray) -> np.ndarray:
    """16-hex-digit ids as unsigned 64-bit numbers (the template only: a few thousand rows)."""
    return np.array([int(v, 16) for v in column.to_pylist()], np.uint64)


def _hex(*words: np.ndarray) -> pa.Array:
    """Lower-case hex of 64-bit words, concatenated per row, as a string array, without a Python
    loop over the rows."""
    raw = np.stack([w.astype(">u8").view(np.uint8).reshape(-1, 8) for w in words], axis=1).reshape(
        len(words[0]), -1
    )
    digits = np.empty((raw.shape[0], raw.shape[1] * 2), np.uint8)
    digits[:, 0::2] = _HEX[raw >> 4]
    digits[:, 1::2] = _HEX[raw & 15]
    width = digits.shape[1]
    offsets = pa.array(np.arange(0, (raw.shape[0] + 1) * width, width, dtype=np.int32))
    return pa.StringArray.from_buffers(raw.shape[0], offsets.buffers()[1], pa.py_buffer(digits.tobytes()))


# ---------------------------------------------------------------- the rows the service makes


_template: Template | None = None
_scoring: Scoring | None = None


def _init(templates: int) -> None:
    global _template, _scoring
    _template = Template(templates)
    _scoring = Scoring.of(ScoringSetup.from_entries(None, SamplingConfig(), False, False))


def _map_chunk(first: int, n: int, total: int, days: float, now_ns: int) -> TraceTables:
    """The traces, steps, documents and scores rows of one chunk, as the assembler's mapping job
    makes them (the chunk's spans generated again here: the same seed gives the same rows)."""
    assert _template is not None
    spans = _template.replicate(first, n, total, days, now_ns)
    traces = {t: ("complete", 1) for t in pc.unique(spans["trace_id"]).to_pylist()}
    gc.disable()  # as the mapping worker does while a job runs
    try:
        job = MapJob(spans, _template.no_events(), traces, time.time_ns() // 1000, 0)
        return run_map_job(job, _scoring).tables
    finally:
        gc.enable()


def generate(db: Path, traces: int, days: float, templates: int, workers: int) -> None:
    started = time.perf_counter()
    now_ns = time.time_ns()
    template = Template(templates)
    chunks = [(first, min(CHUNK, traces - first)) for first in range(0, traces, CHUNK)]
    # The pool before the store: its processes are forked without DuckDB's connection.
    with (
        ProcessPoolExecutor(workers, initializer=_init, initargs=(templates,)) as pool,
        DuckDBStore(db) as store,
    ):
        futures = [pool.submit(_map_chunk, first, n, traces, days, now_ns) for first, n in chunks]
        phases = {"spans": 0.0, "traces": 0.0, "waiting": 0.0}
        for (first, n), future in zip(chunks, futures, strict=True):
            begun = time.perf_counter()
            spans = template.replicate(first, n, traces, days, now_ns)
            store.append_spans(spans, template.no_events())
            phases["spans"] += time.perf_counter() - begun
            begun = time.perf_counter()
            tables = future.result()
            phases["waiting"] += time.perf_counter() - begun
            begun = time.perf_counter()
            store.write_traces(tables, [])
            phases["traces"] += time.perf_counter() - begun
            done = first + n
            elapsed = time.perf_counter() - started
            print(
                f"  {done:,} traces stored ({elapsed:.0f} s, {done / elapsed:,.0f} traces/s; main: spans "
                f"{phases['spans']:.0f} s, waiting {phases['waiting']:.0f} s, rows {phases['traces']:.0f} s)",
                flush=True,
            )
        store.checkpoint()
    print(f"built {traces:,} traces in {time.perf_counter() - started:.0f} s", flush=True)


# ---------------------------------------------------------------- the runs


def store_facts(db: Path) -> dict[str, Any]:
    with DuckDBStore(db, read_only=True) as store:
        oldest, traces, sampled = store.query(
            "SELECT min(start_time), count(*), count(*) FILTER (WHERE sample_decision IN "
            "('judge', 'deterministic') AND judge_status IS DISTINCT FROM 'pending') FROM traces",
            1,
            600,
        ).rows[0]
        scores, spans = store.query(
            "SELECT (SELECT count(*) FROM scores), (SELECT count(*) FROM received_spans)", 1, 600
        ).rows[0]
        history = store.query("SELECT count(*) FROM score_history", 1, 600).rows[0][0]
    return {
        "oldest": oldest,
        "traces": traces,
        "rescored": sampled,
        "scores": scores,
        "spans": spans,
        "history": history,
    }


def rescore(
    db: Path, config: Path, since: str, evaluators: list[str], limit: float | None = None
) -> dict[str, Any]:
    """One `ragpulse rescore --json` run, timed, its memory sampled. Past `limit` seconds it is
    interrupted (as Ctrl-C would: the batches stored stay) and its rate read from its run's row."""
    command = [str(ROOT / ".venv/bin/ragpulse"), "rescore", "--db", str(db), "--config", str(config)]
    command += ["--since", since, "--json"]
    for name in evaluators:
        command += ["--evaluator", name]
    load = os.getloadavg()
    at = datetime.now(UTC).strftime("%H:%M:%S")
    begun = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=config.parent)
    peak_main = peak_sum = 0
    interrupted = False
    while process.poll() is None:
        rss = _tree_rss(process.pid)
        if rss:
            peak_main = max(peak_main, rss[0])
            peak_sum = max(peak_sum, sum(rss))
        if limit is not None and not interrupted and time.perf_counter() - begun > limit:
            process.send_signal(signal.SIGINT)
            interrupted = True
        time.sleep(0.2)
    out, err = process.communicate()
    wall = time.perf_counter() - begun
    if interrupted:
        answer = last_run(db)
        # From the run's start to its last stored batch (the batch interrupted is rolled back).
        rate = answer["traces_done"] / (answer["updated_at"] - answer["started_at"]).total_seconds()
    elif process.returncode != 0:
        raise SystemExit(f"rescore failed ({process.returncode}): {err.decode()[-3000:]}")
    else:
        answer = json.loads(out.decode().strip().splitlines()[-1])
        rate = answer["traces_done"] / wall
    return {
        "evaluators": ", ".join(evaluators) or "all (13)",
        "wall_s": wall,
        "interrupted": interrupted,
        "traces": answer["traces_done"],
        "traces_per_s": rate,
        "scores_written": answer["scores_written"],
        "scores_replaced": answer["scores_replaced"],
        "peak_rss_mib": peak_main / 2**20,
        "peak_rss_with_workers_mib": peak_sum / 2**20,
        "load_before": load,
        "started_utc": at,
        "status": answer["status"],
    }


def last_run(db: Path) -> dict[str, Any]:
    """The latest rescore run's row (an interrupted run's progress)."""
    with DuckDBStore(db, read_only=True) as store:
        result = store.query(
            "SELECT run_id, status, traces_total, traces_done, scores_written, scores_replaced, "
            "started_at, updated_at FROM rescore_runs ORDER BY started_at DESC LIMIT 1",
            1,
            60,
        )
    return dict(zip(result.columns, result.rows[0], strict=True))


def _tree_rss(pid: int) -> list[int]:
    """RSS in bytes of `pid` (first) and of its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        try:
            with open(f"/proc/{current}/statm") as f:
                found.append(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
        except OSError:
            if current == pid:
                return []
            continue
        todo += children.get(current, [])
    return found


def check_aggregates(db: Path) -> str:
    """`score_aggregates` against a recount of `scores` per score name (n, passes, fails, sum)."""
    with DuckDBStore(db, read_only=True) as store:
        rows = store.query(
            """
            WITH a AS (SELECT name, sum(n) AS n, sum(n_pass) AS p, sum(n_fail) AS f, round(sum(sum), 3) AS s
                       FROM score_aggregates GROUP BY name),
                 c AS (SELECT name, count(*) AS n, count(*) FILTER (status = 'pass') AS p,
                              count(*) FILTER (status = 'fail') AS f, round(sum(value), 3) AS s
                       FROM scores GROUP BY name)
            SELECT coalesce(a.name, c.name), a.n, c.n,
                   a.p = c.p AND a.f = c.f AND a.s IS NOT DISTINCT FROM c.s
            FROM a FULL JOIN c ON a.name = c.name ORDER BY 1
            """,
            100,
            600,
        ).rows
    wrong = [r for r in rows if r[1] != r[2] or not r[3]]
    total = sum(r[2] or 0 for r in rows)
    if wrong:
        return f"MISMATCH in {len(wrong)} of {len(rows)} names: {wrong}"
    return f"ok: {len(rows)} names, {total:,} scores, the aggregates equal a recount"


def describe(since: str, evaluators: list[str], result: dict[str, Any]) -> str:
    names = "".join(f" --evaluator {e}" for e in evaluators)
    cut = " (interrupted: the rate is to its last stored batch)" if result["interrupted"] else ""
    load = " ".join(f"{x:.2f}" for x in result["load_before"])
    return (
        f"rescore --since {since}{names}: {result['traces']:,} traces in {result['wall_s']:.1f} s{cut}, "
        f"{result['traces_per_s']:,.0f} traces/s; {result['scores_written']:,} scores written, "
        f"{result['scores_replaced']:,} replaced; peak RSS {result['peak_rss_mib']:,.0f} MiB "
        f"({result['peak_rss_with_workers_mib']:,.0f} with workers); at {result['started_utc']} UTC, "
        f"load before {load}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--days", type=float, default=7)
    parser.add_argument("--db", type=Path, help="store to build, or reuse if it exists")
    parser.add_argument("--templates", type=int, default=1000, help="distinct template traces")
    parser.add_argument("--build-workers", type=int, default=2, help="processes mapping the build")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each row")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--only-all", action="store_true", help="skip the --evaluator faithfulness row")
    parser.add_argument("--json", action="store_true", help="the results as JSON too")
    parser.add_argument("--memory-limit", help="store.memory_limit of the runs (default: the default, 256MB)")
    parser.add_argument(
        "--time-limit",
        type=float,
        help="interrupt a run after this many seconds and report its rate so far (from its run's row)",
    )
    args = parser.parse_args()
    db = args.db or Path(tempfile.gettempdir()) / f"ragpulse-rescore-{args.traces}.duckdb"
    if db.exists():
        print(f"reusing {db}", flush=True)
    else:
        generate(db, args.traces, args.days, args.templates, args.build_workers)
    facts = store_facts(db)
    print(
        f"store: {facts['traces']:,} traces ({facts['rescored']:,} in a rescore's scope), {facts['spans']:,} "
        f"spans, {facts['scores']:,} scores, {facts['history']:,} in score_history; "
        f"{db.stat().st_size / 2**30:.2f} GiB",
        flush=True,
    )
    if args.build_only:
        return
    # A window covering the whole store (whole hours, an hour to spare).
    age = datetime.now(UTC).replace(tzinfo=None) - facts["oldest"]
    since = f"{int(age.total_seconds() // 3600) + 2}h"
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        config = Path(workdir) / "ragpulse.yaml"
        text = "assembler:\n  workers: 2\n"
        if args.memory_limit:
            text += f"store:\n  memory_limit: {args.memory_limit}\n"
        config.write_text(text)
        rows = [[]] if args.only_all else [[], ["faithfulness"]]
        for evaluators in rows:
            for _ in range(args.repeat):
                result = rescore(db, config, since, evaluators, args.time_limit)
                results.append(result)
                print(describe(since, evaluators, result), flush=True)
    print(check_aggregates(db))
    print()
    print("| scores given again | runs | wall time | traces / s | scores written / replaced | peak RSS |")
    print("|---|---|---|---|---|---|")
    for label in dict.fromkeys(r["evaluators"] for r in results):
        mine = [r for r in results if r["evaluators"] == label]
        wall = statistics.median(r["wall_s"] for r in mine)
        rate = statistics.median(r["traces_per_s"] for r in mine)
        rss = statistics.median(r["peak_rss_mib"] for r in mine)
        both = statistics.median(r["peak_rss_with_workers_mib"] for r in mine)
        cut = " (interrupted)" if any(r["interrupted"] for r in mine) else ""
        print(
            f"| {label} | {len(mine)}{cut} | {wall:,.1f} s | {rate:,.0f} | {mine[-1]['scores_written']:,} / "
            f"{mine[-1]['scores_replaced']:,} | {rss:,.0f} MiB ({both:,.0f} with workers) |"
        )
    if args.json:
        print(json.dumps(results, default=str, indent=1))


if __name__ == "__main__":
    main()
