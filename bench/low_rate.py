#!/usr/bin/env python3
"""The service's CPU when idle and at a low rate: `ragpulse serve` on a fresh DuckDB file, nothing
sent for 30 s, then one trace of the load generator (4 spans) per OTLP/gRPC export, `--rate` exports
a second for `--seconds`. Prints the CPU seconds of the service and its mapping workers in each
phase (from /proc, nothing polls the service meanwhile), and by thread name.

    .venv/bin/python bench/low_rate.py [--rate 10] [--seconds 60]
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile
import time
from pathlib import Path

from ingest import cpu_seconds, grpc_sender, start_server
from load_generator import build

IDLE_SECONDS = 30


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of a process's threads, summed by thread name."""
    out: dict[str, float] = collections.defaultdict(float)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # the thread ended
        out[name] += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def children(pid: int) -> list[int]:
    """The process ids whose parent is `pid` (the mapping workers)."""
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "stat").read_text().rpartition(")")[2].split()[1] == str(pid):
                    kids.append(int(entry.name))
            except OSError:
                continue
    return kids


def group_cpu(pid: int) -> float:
    return cpu_seconds(pid) + sum(cpu_seconds(kid) for kid in children(pid))


def report(label: str, seconds: float, cpu: float, before: dict[str, float], after: dict[str, float]) -> None:
    threads = ", ".join(
        f"{name} {after[name] - before.get(name, 0.0):.2f}"
        for name in after
        if after[name] - before.get(name, 0.0) >= 0.05
    )
    print(
        f"{label}: service and workers {cpu:.2f} CPU s ({cpu / seconds:.3f} core); service threads: {threads}"
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
        cpu, threads = group_cpu(proc.pid), thread_cpu(proc.pid)
        time.sleep(IDLE_SECONDS)
        report(
            f"idle for {IDLE_SECONDS} s",
            IDLE_SECONDS,
            group_cpu(proc.pid) - cpu,
            threads,
            thread_cpu(proc.pid),
        )
        send = grpc_sender(grpc_port)
        requests = [build(1, i) for i in range(int(args.rate * args.seconds))]
        cpu, threads, started = group_cpu(proc.pid), thread_cpu(proc.pid), time.time()
        for i, request in enumerate(requests):
            time.sleep(max(0.0, started + i / args.rate - time.time()))
            send(request)
        time.sleep(max(0.0, started + args.seconds - time.time()))
        label = f"{args.rate:g} traces a second for {args.seconds:g} s"
        report(label, args.seconds, group_cpu(proc.pid) - cpu, threads, thread_cpu(proc.pid))
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
