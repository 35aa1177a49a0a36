"""`ragpulse mcp`: ragpulse to an MCP client (a coding agent, an IDE, a desktop assistant) over stdio,
reading a database file or a running server. `ragpulse serve` serves the same tools over streamable
HTTP at `/mcp`."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from collector.cli.common import config_option, key_option, sql_runner, target, user_errors
from collector.store.reads import SqlRunner
from collector.store.sql import SqlConfig, user_sql


@click.command()
@config_option
@key_option
@click.option("--db", type=click.Path(dir_okay=False), help="DuckDB file (default: store.path).")
@click.option("--server", help="URL of a running ragpulse (its HTTP port), e.g. http://127.0.0.1:4318.")
@click.pass_context
@user_errors
def mcp(ctx: click.Context, config_path: str | None, db: str | None, server: str | None) -> None:
    """Serve the MCP tools over stdio (for an MCP client to start): through the running server that
    holds the file, else on the file, read-only."""
    # stdout carries the protocol: every log line goes to stderr (set before the SDK's own setup).
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    config, url = target(ctx, config_path, server, db)
    from collector.mcp.server import build_server
    from collector.mcp.tools import Tools

    with sql_runner(config, url) as run:
        build_server(Tools(_as_user(run, config.sql), config)).run()


def _as_user(run: SqlRunner, sql: SqlConfig) -> SqlRunner:
    """On a file, the tools' queries held as a user's (`sql.max_bytes`, `sql.memory_limit`), on the
    thread each tool call runs on; a server holds them to its own limits."""

    def limited(query: str, max_rows: int) -> tuple[list[dict[str, Any]], bool]:
        with user_sql(sql):
            return run(query, max_rows)

    return limited
