"""MCP over streamable HTTP at `/mcp` on the service's HTTP port, as a component: its session
manager runs from `start` to `stop` on the service's event loop. The API keys guard it as they guard
`/api/*` (the `read` scope: `collector/auth/http.py`), and its SQL goes through the same guard and
limits as `POST /api/sql`."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from starlette.routing import Route

from collector.config import Config
from collector.lifecycle import Component
from collector.mcp.server import build_server
from collector.mcp.tools import Tools
from collector.store.base import SqlReads
from collector.store.reads import SqlRunner
from collector.store.sql import QueryError, SqlConfig, user_sql

PATH = "/mcp"


class McpEndpoint(Component):
    """The `/mcp` route and the MCP sessions behind it."""

    name = "mcp"

    def __init__(self, store: SqlReads, config: Config) -> None:
        self._server: MCPServer = build_server(Tools(user_queries(store, config.sql), config))
        # Stateless, JSON answers: any replica behind a load balancer answers any request, and a
        # call's answer is one HTTP response (no stream held open per session).
        self._server.streamable_http_app(streamable_http_path=PATH, stateless_http=True, json_response=True)
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def route(self) -> Route:
        return Route(PATH, endpoint=StreamableHTTPASGIApp(self._server.session_manager))

    async def start(self) -> None:
        started = asyncio.Event()
        self._task = asyncio.create_task(self._run(started))
        waiting = asyncio.create_task(started.wait())
        await asyncio.wait({self._task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if self._task.done():  # failed to start: say why
            waiting.cancel()
            self._task.result()

    async def _run(self, started: asyncio.Event) -> None:
        # The session manager's task group is entered and left in this one task (anyio's rule).
        async with self._server.session_manager.run():
            started.set()
            await self._stopping.wait()

    async def stop(self, deadline: float | None = None) -> None:
        self._stopping.set()
        if self._task is not None:
            await self._task


def user_queries(store: SqlReads, sql: SqlConfig) -> SqlRunner:
    """The tools' SQL on the service's store, held as `POST /api/sql` holds a user's: the read-only
    guard, `sql.max_rows`, `sql.timeout`, `sql.max_bytes`, `sql.memory_limit`, and at most
    `sql.max_concurrent` at once (a call past them waits up to `sql.timeout` for a turn)."""
    turns = threading.BoundedSemaphore(sql.max_concurrent)

    def run(query: str, max_rows: int) -> tuple[list[dict[str, Any]], bool]:
        if not turns.acquire(timeout=sql.timeout):
            raise QueryError(
                f"{sql.max_concurrent} queries are running (sql.max_concurrent); try again later"
            )
        try:
            with user_sql(sql):
                result = store.query(query, min(max_rows, sql.max_rows), sql.timeout)
        finally:
            turns.release()
        return result.records(), result.truncated

    return run
