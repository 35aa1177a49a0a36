#!/usr/bin/env python3
"""Mapping benchmark: traces read as RAG requests per second by `semconv.map_trace` alone, in one
thread, on bench/load_generator.py's OpenInference traces (4 spans each). Decoding and turning
Arrow rows into span records are done before the clock starts; only mapping is timed, in CPU
seconds of the thread (so the figure is per core and other load on the machine does not skew it).

    .venv/bin/python bench/mapping.py                  # 20,000 traces, median of 3 passes
    .venv/bin/python bench/mapping.py --profile        # cProfile's top entries instead
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

from load_generator import build

from collector.otlp.batch import decode_request
from collector.store.span_records import records_by_trace, span_records
from semconv import SpanRecord, map_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    traces: list[list[SpanRecord]] = []
    for i in range(args.traces // 100):
        batch = decode_request(build(100, i))
        traces.extend(records_by_trace(span_records(batch.spans, batch.events)).values())

    def run() -> float:
        # CPU time of this thread, so other processes on the two cores do not skew the figure.
        started = time.thread_time()
        for spans in traces:
            map_trace(spans)
        return time.thread_time() - started

    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(run)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return
    passes = [run() for _ in range(args.repeat)]
    per_second = [len(traces) / p for p in passes]
    median = statistics.median(per_second)
    print(
        f"mapped {len(traces)} traces x {args.repeat}: median {median:,.0f} traces/s "
        f"({1e6 / median:.0f} µs per trace; passes {', '.join(f'{p:,.0f}' for p in per_second)})"
    )


if __name__ == "__main__":
    main()
