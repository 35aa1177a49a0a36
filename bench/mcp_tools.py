#!/usr/bin/env python3
"""What an agent or a notebook waits for: MCP tool calls over streamable HTTP at `/mcp`, and
`collector.client.Client.sql` as Arrow against the JSON API, through a running `ragpulse serve`
on the 1-million-trace store of bench/api.py (13 million scores; generated on first use and kept).

- `query_sql` returning 10,000 rows, over MCP (the official SDK's client, one session);
- `get_trace` of a random trace, over MCP: its five reads (trace, spans, steps, documents, scores);
- 1,000,000 rows of `scores` (trace id, name, value, created_at) with `Client.sql` (Arrow IPC)
  and with the JSON API (`/api/sql`, rows parsed by orjson), the server's `sql.max_rows` and
  `sql.max_bytes` raised for it.

Each figure is the median of `--repeat` calls after one warm-up, timed at the client.

    .venv/bin/python bench/mcp_tools.py
    .venv/bin/python bench/mcp_tools.py --db /tmp/api-100k.duckdb --traces 100000
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from api import NAMES, generate, serving  # noqa: E402

from collector.api_client import ApiClient  # noqa: E402
from collector.client import Client  # noqa: E402

MILLION = 1_000_000
SCORES_SQL = "SELECT trace_id, name, value, created_at FROM scores"


def timed(repeat: int, call: Callable[[], Any]) -> tuple[list[float], Any]:
    """One warm-up, then `repeat` timed calls: their seconds and the last answer."""
    answer = call()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        answer = call()
        times.append(time.perf_counter() - started)
    return times, answer


def report(label: str, times: list[float], what: str) -> None:
    print(
        f"{label}: {statistics.median(times) * 1000:.0f} ms median of {len(times)} "
        f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}; {what})",
        flush=True,
    )


def over_mcp(url: str, use: Callable[[ClientSession], Awaitable[None]]) -> None:
    async def run() -> None:
        async with (
            httpx2.AsyncClient(timeout=300) as http,
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await use(session)

    anyio.run(run)


def mcp_figures(url: str, repeat: int, trace_ids: list[str]) -> None:
    async def use(session: ClientSession) -> None:
        async def timed_call(tool: str, arguments: Callable[[], dict[str, Any]]) -> tuple[list[float], Any]:
            result = await session.call_tool(tool, arguments())
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                result = await session.call_tool(tool, arguments())
                times.append(time.perf_counter() - started)
                assert not result.is_error, result
            return times, result

        query = {"query": "SELECT trace_id, service_name, start_time, duration_ms FROM traces LIMIT 10000"}
        times, result = await timed_call("query_sql", lambda: query)
        report("MCP query_sql, 10,000 rows", times, f"{len(result.structured_content['rows']):,} rows")
        rng = random.Random(7)
        times, result = await timed_call("get_trace", lambda: {"trace_id": rng.choice(trace_ids)})
        report("MCP get_trace, a random trace", times, f"{len(result.structured_content['scores'])} scores")

    over_mcp(url, use)


def client_figures(url: str, repeat: int) -> None:
    with Client(url, timeout=600) as client:
        times, table = timed(repeat, lambda: client.sql(SCORES_SQL, max_rows=MILLION))
        report("Client.sql, 1,000,000 rows as Arrow", times, f"{table.num_rows:,} rows")
    with ApiClient(url, timeout=600) as api:
        times, (rows, _) = timed(repeat, lambda: api.query(SCORES_SQL, max_rows=MILLION))
        report("/api/sql JSON, 1,000,000 rows parsed", times, f"{len(rows):,} rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, default=Path("/tmp/ragpulse-api-bench.duckdb"))
    parser.add_argument("--traces", type=int, default=MILLION)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not args.db.exists():
        print(f"generating {args.traces:,} traces ({args.traces * len(NAMES):,} scores) in {args.db}")
        generate(args.db, args.traces, 7.0)
    # Room for the million-row answers; the defaults (10,000 rows, 64 MiB) would refuse them.
    sql = {"max_rows": MILLION, "max_bytes": 2**31, "memory_limit": "4GB", "timeout": 300}
    with serving(args.db, {"sql": sql}) as url:
        with ApiClient(url) as api:
            sample = api.query("SELECT trace_id FROM traces USING SAMPLE 1000 ROWS", 1000)[0]
        mcp_figures(url, args.repeat, [r["trace_id"] for r in sample])
        client_figures(url, args.repeat)


if __name__ == "__main__":
    main()
