"""Tests' MCP sessions, opened with the official SDK's own client: streamable HTTP on a service's
`/mcp`, or stdio to `ragpulse mcp` as an MCP client starts it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from tests.support.helpers import RAGPULSE, clean_env

T = TypeVar("T")


def over_http(url: str, use: Callable[[ClientSession], Awaitable[T]], key: str | None = None) -> T:
    """Open an MCP session on `url`'s `/mcp` with the SDK's streamable-HTTP client and run `use`."""

    async def run() -> T:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await use(session)

    return anyio.run(run)


def over_stdio(args: list[str], cwd: Path, use: Callable[[ClientSession], Awaitable[T]]) -> T:
    """Start `ragpulse mcp ARGS` as an MCP client does (stdio) and run `use` in its session."""
    params = StdioServerParameters(command=str(RAGPULSE), args=["mcp", *args], cwd=str(cwd), env=clean_env())

    async def run() -> T:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await use(session)

    return anyio.run(run)


def text(result: CallToolResult) -> str:
    first = result.content[0]
    assert first.type == "text"
    return first.text


def content(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    return result.structured_content
