#!/usr/bin/env python3
"""What one read of a result to Arrow allocates: jemalloc's `thread.allocated` before and after
repeated reads of 50, 5,000 and 500,000 rows of a 4-column table, with DuckDB's default batch of
1,000,000 rows (capacity reserved per column whatever the result's size) and with smaller batches
(the store reads 10,000 rows a batch: `collector/store/duckdb_rows.arrow_table`); `fetchall()` beside.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 .venv/bin/python bench/arrow_reserve.py
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable

import duckdb
from serve_memory import typed_mallctl  # bench/, beside this script


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
        "CREATE TABLE t AS SELECT i, 'text ' || i AS a, 'more ' || i AS b, i * 1.5 AS c "
        "FROM range(600000) r(i)"
    )
    for rows, times in ((50, 300), (5_000, 100), (500_000, 5)):
        query = f"SELECT i, a, b, c FROM t WHERE i < {rows}"
        reads: dict[str, Callable[[], object]] = {
            "to_arrow_table()": lambda query=query: con.execute(query).to_arrow_table(),
            **{
                f"to_arrow_table({size})": lambda size=size, query=query: con.execute(query).to_arrow_table(
                    size
                )
                for size in (1_024, 10_000, 100_000)
            },
            "fetchall()": lambda query=query: con.execute(query).fetchall(),
        }
        for label, read in reads.items():
            before, started = thread_allocated(), time.perf_counter()
            for _ in range(times):
                read()
            per_read = (thread_allocated() - before) / times / 2**20
            ms = (time.perf_counter() - started) / times * 1e3
            print(f"{rows:>7} rows, {label}: {ms:.2f} ms, {per_read:.1f} MiB allocated per read")


if __name__ == "__main__":
    main()
