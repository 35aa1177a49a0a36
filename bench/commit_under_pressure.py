#!/usr/bin/env python3
"""Commits under DuckDB's memory limit: is every acknowledged commit still there after a reopen?

What the store's threads do, small: a writer commits batches of 400 rows and counts a batch as
acknowledged when its COMMIT returned; another thread commits wide inserts and updates; a third
reads them with an aggregate. DuckDB runs with automatic checkpoints and a `memory_limit` that the
three together exceed, so statements and commits fail for memory. Each run stops at the first fatal
error (DuckDB invalidates the database) or after `--seconds`, then the file is opened again and
every acknowledged batch is looked up.

    .venv/bin/python bench/commit_under_pressure.py --runs 5 --memory-limit 40MB

Measured with DuckDB 1.5.5 (bench/README.md, "Soak"): acknowledged batches missing after the reopen,
and "Corrupted in-memory column ... misaligned count" from a checkpoint after a failed append. The
service therefore sizes `store.memory_limit` so that it is not reached in normal operation.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import duckdb

BATCH = 400
WIDE = "x" * 4000


def committed(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """`sql` in its own transaction, rolled back when it or its COMMIT fails."""
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(sql)
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise


class Run:
    """One run on a fresh file: the three threads, then the check after a reopen."""

    def __init__(self, path: Path, memory_limit: str, seconds: float) -> None:
        self.path, self.seconds = path, seconds
        config = {
            "memory_limit": memory_limit,
            "threads": 1,
            "checkpoint_threshold": "64MiB",
            "max_vacuum_tasks": 0,  # as the service's automatic checkpoints
        }
        self.con = duckdb.connect(str(path), config=config)
        self.con.execute("CREATE TABLE acked (id BIGINT, body VARCHAR)")
        self.con.execute("CREATE TABLE wide (id BIGINT, grp BIGINT, body VARCHAR)")
        self.acked: list[int] = []
        self.errors: Counter[str] = Counter()
        self.fatal: str | None = None
        self.stopping = threading.Event()

    def _loop(self, name: str, step: Callable[[duckdb.DuckDBPyConnection, int], None]) -> None:
        con = self.con.cursor()
        n = 0
        while not self.stopping.is_set():
            try:
                step(con, n)
            except duckdb.Error as exc:
                self.errors[f"{name}: {str(exc).splitlines()[0][:90]}"] += 1
                if isinstance(exc, duckdb.FatalException) or "invalidated" in str(exc):
                    self.fatal = self.fatal or f"{name}: {str(exc).splitlines()[0][:240]}"
                    self.stopping.set()
            n += 1

    def _write(self, con: duckdb.DuckDBPyConnection, n: int) -> None:
        committed(
            con, f"INSERT INTO acked SELECT {n * BATCH} + i, repeat('y', 500) || i FROM range({BATCH}) r(i)"
        )
        self.acked.append(n)
        time.sleep(0.005)

    def _churn(self, con: duckdb.DuckDBPyConnection, n: int) -> None:
        committed(con, f"INSERT INTO wide SELECT i, {n}, '{WIDE}' || i FROM range(3000) r(i)")
        committed(con, f"UPDATE wide SET body = body || 'u' WHERE grp = {max(0, n - 5)}")

    def _read(self, con: duckdb.DuckDBPyConnection, n: int) -> None:
        con.execute(
            "SELECT grp, string_agg(body, ',') FROM wide GROUP BY grp ORDER BY grp DESC LIMIT 3"
        ).fetchall()

    def go(self) -> dict[str, object]:
        threads = [
            threading.Thread(target=self._loop, args=(name, step))
            for name, step in (("writer", self._write), ("churn", self._churn), ("reader", self._read))
        ]
        for thread in threads:
            thread.start()
        self.stopping.wait(self.seconds)
        self.stopping.set()
        for thread in threads:
            thread.join()
        with contextlib.suppress(duckdb.Error):
            self.con.close()
        reopened = duckdb.connect(str(self.path))
        stored = dict(reopened.execute(f"SELECT id // {BATCH}, count(*) FROM acked GROUP BY 1").fetchall())
        reopened.close()
        return {
            "acked": len(self.acked),
            "lost": [b for b in self.acked if b not in stored],
            "partial": [b for b in self.acked if stored.get(b, BATCH) != BATCH],
            "errors": dict(self.errors),
            "fatal": self.fatal,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=60, help="the longest a run lasts")
    parser.add_argument("--memory-limit", default="40MB")
    args = parser.parse_args()
    print(f"DuckDB {duckdb.__version__}, memory_limit {args.memory_limit}")
    lost_runs = 0
    for number in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory() as folder:
            result = Run(Path(folder) / "pressure.duckdb", args.memory_limit, args.seconds).go()
        lost_runs += bool(result["lost"] or result["partial"])
        print(f"run {number}: {result}", flush=True)
    print(f"runs that lost or cut an acknowledged batch: {lost_runs} of {args.runs}")


if __name__ == "__main__":
    main()
