#!/usr/bin/env python3
"""Peak memory of a `ragpulse serve` process while one query runs through `POST /api/sql`.

One fresh service per query (VmHWM, the peak resident set, is per process), code from TREE (a
checkout: the current one, or `git worktree add /tmp/before HEAD~1` for a before/after pair):

    .venv/bin/python bench/sql_memory.py . "SELECT repeat('x', 100000000) FROM range(20)"

Prints, per query: the HTTP status, the bytes of the answer (streamed, not kept), the time, the
resident set before the query and its peak. bench/README.md ("SQL surface memory") has the table.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_status(pid: int, key: str) -> int:
    """A `/proc/PID/status` size field (VmRSS, VmHWM) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    return 0


def measure(tree: Path, query: str) -> str:
    """Start a service from `tree`, run `query` through /api/sql, and describe what it cost."""
    with tempfile.TemporaryDirectory() as tmp:
        http, grpc = free_port(), free_port()
        config = Path(tmp) / "ragpulse.yaml"
        settings = f"assembler: {{workers: 0}}\nstore: {{path: {tmp}/r.duckdb}}\nsql: {{timeout: 300}}\n"
        config.write_text(settings)
        command = [sys.executable, "-c", "from collector.cli import main; main()", "serve"]
        command += ["--config", str(config), "--http-port", str(http), "--grpc-port", str(grpc)]
        proc = subprocess.Popen(
            command,
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{http}"
        try:
            for _ in range(300):
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            time.sleep(0.5)
            before = proc_status(proc.pid, "VmRSS:")
            started, size = time.monotonic(), 0
            with httpx.stream("POST", f"{url}/api/sql", json={"query": query}, timeout=600) as answer:
                for chunk in answer.iter_bytes():
                    size += len(chunk)
            elapsed = time.monotonic() - started
            peak = proc_status(proc.pid, "VmHWM:")
        finally:
            proc.terminate()
            proc.wait(30)
    return (
        f"{query}: HTTP {answer.status_code}, {size:,} bytes in {elapsed:.1f} s; "
        f"RSS before {before / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tree", type=Path, help="the checkout whose code runs")
    parser.add_argument("queries", nargs="+", help="SQL queries, one service each")
    args = parser.parse_args()
    for query in args.queries:
        print(measure(args.tree.resolve(), query), flush=True)


if __name__ == "__main__":
    main()
