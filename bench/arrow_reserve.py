#!/usr/bin/env python3
"""What one read of a small result to Arrow allocates: jemalloc's `thread.allocated` before and after
300 reads of a 50-row, 4-column result, with `to_arrow_table()` (DuckDB's default batch of 1,000,000
rows: capacity reserved per column), with a batch of 1,024 rows, and with `fetchall()`.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 .venv/bin/python bench/arrow_reserve.py
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable

import duckdb
from serve_memory import typed_mallctl  # bench/, beside this script

READS = 300


def thread_allocated() -> int:
    """Bytes this thread has allocated so far (a preloaded jemalloc's `thread.allocated`)."""
    mallctl = typed_mallctl(ctypes.CDLL(None).mallctl)  # AttributeError without a preloaded jemalloc
    value, size = ctypes.c_uint64(0), ctypes.c_size_t(8)
    mallctl(b"thread.allocated", ctypes.byref(value), ctypes.byref(size), None, 0)
    return value.value


def main() -> None:
    con = duckdb.connect()
    con.execute("SET threads = 1")  # the reads in this thread, where they are counted
    con.execute(
        "CREATE TABLE t AS SELECT i, 'text ' || i AS a, 'more ' || i AS b, i * 1.5 AS c FROM range(100) r(i)"
    )
    query = "SELECT i, a, b, c FROM t WHERE i < 50"
    reads: dict[str, Callable[[], object]] = {
        "to_arrow_table()": lambda: con.execute(query).to_arrow_table(),
        "to_arrow_table(1024)": lambda: con.execute(query).to_arrow_table(1024),
        "fetchall()": lambda: con.execute(query).fetchall(),
    }
    for label, read in reads.items():
        before, started = thread_allocated(), time.perf_counter()
        for _ in range(READS):
            read()
        per_read = (thread_allocated() - before) / READS / 2**20
        ms = (time.perf_counter() - started) / READS * 1e3
        print(f"{label}: {ms:.2f} ms, {per_read:.1f} MiB allocated per read")


if __name__ == "__main__":
    main()
