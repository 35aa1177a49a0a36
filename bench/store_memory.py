#!/usr/bin/env python3
"""Store memory: the resident memory of a process that only writes the service's rows into a
DuckDB store, block after block, as the tables grow (no receivers, no assembler, no Python objects
kept): how much of a long-running service's memory growth is DuckDB's own, with the data.

bench/load_generator.py's traces are mapped and scored once (as a mapping worker would), then
written again and again through the store's write path (`append_spans`, `write_traces`) with the
service's store settings (automatic checkpoints included), in rounds of 500 traces. After each
block it prints the process's anonymous memory (RssAnon), DuckDB's buffer pool (`duckdb_memory()`)
and the file's size. The store is on /dev/shm (memory, not disk) unless `--dir` says otherwise.

    .venv/bin/python bench/store_memory.py --blocks 120     # 600,000 traces, 5,000 a block
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from store_writes import anon_mib, rounds

from collector.process_memory import use_system_allocator
from collector.store.config import StoreConfig
from collector.store.duckdb_store import DuckDBStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=120)
    parser.add_argument("--traces", type=int, default=5_000, help="traces a block")
    parser.add_argument("--dir", default="/dev/shm", help="where the store's file goes")
    args = parser.parse_args()
    use_system_allocator()  # as the service
    work = rounds(args.traces)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        path = Path(folder) / "memory.duckdb"
        store = DuckDBStore(path, StoreConfig())
        print(f"baseline: RssAnon {anon_mib()} MiB (rows built)")
        anon = []
        for block in range(args.blocks):
            for spans, events, tables in work:
                store.append_spans(spans, events)
                store.write_traces(tables, [])
            pool = store.query("SELECT sum(memory_usage_bytes) >> 20 AS mib FROM duckdb_memory()", 1, 60)
            anon.append(anon_mib())
            print(
                f"block {block}: {(block + 1) * args.traces} traces, RssAnon {anon[-1]} MiB, DuckDB buffer "
                f"pool {pool.rows[0][0]} MiB, file {path.stat().st_size >> 20} MiB",
                flush=True,
            )
        store.close()
    tenth = max(1, args.blocks // 10)
    medians = [statistics.median(anon[i : i + tenth]) for i in range(0, len(anon), tenth)]
    print("RssAnon median per tenth of the run (MiB): " + " ".join(f"{m:.0f}" for m in medians))


if __name__ == "__main__":
    main()
