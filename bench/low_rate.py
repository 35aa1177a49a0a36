#!/usr/bin/env python3
"""The service's CPU when idle and at a low rate: `ragpulse serve` on a fresh DuckDB file, nothing
sent for 30 s, then one trace of the load generator (4 spans) per OTLP/gRPC export, `--rate` exports
a second for `--seconds`. Prints the CPU seconds of the service and of its mapping workers in each
phase (from /proc; nothing polls the service meanwhile).

    .venv/bin/python bench/low_rate.py [--rate 10] [--seconds 60]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ingest import children, cpu_seconds, grpc_sender, start_server
from load_generator import build

IDLE_SECONDS = 30


def cpu(pid: int) -> tuple[float, float]:
    """CPU seconds so far of the service and of its mapping workers."""
    return cpu_seconds(pid), sum(cpu_seconds(child) for child in children(pid))


def report(label: str, seconds: float, before: tuple[float, float], after: tuple[float, float]) -> None:
    service, workers = (a - b for a, b in zip(after, before, strict=True))
    print(
        f"{label}: service {service:.2f} CPU s, mapping workers {workers:.2f} "
        f"({(service + workers) / seconds:.3f} core together)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=10, help="exports (one trace each) a second")
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="ragpulse-bench-"))
    proc, grpc_port, _ = start_server(workdir / "bench.duckdb", [], {}, workdir / "serve.log")
    try:
        time.sleep(5)  # start-up done
        before = cpu(proc.pid)
        time.sleep(IDLE_SECONDS)
        report(f"idle for {IDLE_SECONDS} s", IDLE_SECONDS, before, cpu(proc.pid))
        send = grpc_sender(grpc_port)
        requests = [build(1, i) for i in range(int(args.rate * args.seconds))]
        before, started = cpu(proc.pid), time.time()
        for i, request in enumerate(requests):
            time.sleep(max(0.0, started + i / args.rate - time.time()))
            send(request)
        time.sleep(max(0.0, started + args.seconds - time.time()))
        report(f"{args.rate:g} traces a second for {args.seconds:g} s", args.seconds, before, cpu(proc.pid))
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
