#!/usr/bin/env python3
"""Assembly benchmark: traces mapped and written per second by the trace assembler, without the
network in the way. Batches decoded from bench/load_generator.py's requests are committed to a
fresh DuckDB file and handed to the assembler as the span writer would.

    .venv/bin/python bench/assembly.py                   # 20k traces, worker process
    .venv/bin/python bench/assembly.py --workers 0       # map in the assembler thread
    .venv/bin/python bench/assembly.py --scoring         # and score: the default deterministic set
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from load_generator import build

from collector.otlp.batch import decode_request
from collector.processors.assembly.assembler import TraceAssembler
from collector.processors.config import AssemblerConfig, SamplingConfig
from collector.processors.scoring import ScoringSetup
from collector.store.duckdb_store import DuckDBStore
from collector.telemetry import Metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100, help="traces per batch (4 spans each)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--scoring", action="store_true", help="score too (the default evaluators)")
    args = parser.parse_args()
    scoring = ScoringSetup.from_entries(None, SamplingConfig(), False, False) if args.scoring else None

    batches = [decode_request(build(args.batch, i)) for i in range(args.traces // args.batch)]
    with tempfile.TemporaryDirectory() as workdir:
        store = DuckDBStore(Path(workdir) / "bench.duckdb")
        for batch in batches:
            store.append_spans(batch.spans, batch.events)
        metrics = Metrics()
        config = AssemblerConfig(decision_wait=0.01, poll_interval=0.01, batch_wait=0, workers=args.workers)
        assembler = TraceAssembler(store, config, metrics, scoring=scoring)
        # Warm the worker process up (spawn and imports) before the clock starts.
        assembler.run_round([])
        time.sleep(0.05)
        started = time.perf_counter()
        for batch in batches:
            assembler.run_round([batch])
        time.sleep(0.02)
        while assembler.in_flight:
            assembler.run_round([])
        assembler.run_round([])
        elapsed = time.perf_counter() - started
        count = store.query("SELECT count(*) FROM traces", 1, 60).rows[0]
        assembler.stop()
        store.close()
    n = count[0] if count else 0
    print(
        f"assembled {n} traces ({n * 4} spans) in {elapsed:.2f} s: {n / elapsed:.0f} traces/s, "
        f"{n * 4 / elapsed:.0f} spans/s (workers={args.workers}, scoring={args.scoring})"
    )


if __name__ == "__main__":
    main()
