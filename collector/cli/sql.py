"""`ragpulse sql`: one read-only query, through the running server or on the file."""

from __future__ import annotations

from typing import Any

import click

from collector.api_client import ApiClient
from collector.cli.common import config_option, load, user_errors
from collector.cli.output import print_records
from collector.service import running_server_url
from collector.store import StoreConfig, StoreError, StoreLocked, open_store


@click.command()
@click.argument("query")
@config_option
@click.option("--db", type=click.Path(dir_okay=False), help="DuckDB file (default: store.path).")
@click.option("--server", help="URL of a running ragpulse (its HTTP port), e.g. http://127.0.0.1:4318.")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
)
@click.option(
    "--max-rows", type=click.IntRange(min=1), default=None, help="Row limit (default: sql.max_rows)."
)
@click.pass_context
@user_errors
def sql(
    ctx: click.Context,
    query: str,
    config_path: str | None,
    db: str | None,
    server: str | None,
    output_format: str,
    max_rows: int | None,
) -> None:
    """Run one read-only SQL query: through the running server that holds the file, else on the file."""
    config = load(ctx, config_path)
    limit = max_rows or config.sql.max_rows
    store_config = config.store.model_copy(update={"path": db}) if db else config.store
    url = server or running_server_url(store_config.path)
    if url:
        with ApiClient(url) as api:
            records, truncated = api.query(query, limit)
    else:
        records, truncated = _query_file(store_config, query, limit, config.sql.timeout)
    print_records(records, output_format)
    if truncated:
        click.echo(f"(stopped at {limit} rows; raise --max-rows or add LIMIT)", err=True)


def _query_file(
    config: StoreConfig, query: str, max_rows: int, timeout: float
) -> tuple[list[dict[str, Any]], bool]:
    try:
        store = open_store(config, read_only=True)
    except StoreLocked:
        raise StoreError(
            f"{config.path} is held by another process and no running ragpulse advertises it; "
            "pass --server URL"
        ) from None
    with store:
        result = store.query(query, max_rows, timeout)
    return result.records(), result.truncated
