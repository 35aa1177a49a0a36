"""`ragpulse sql`: one read-only query, through the running server or on the file."""

from __future__ import annotations

import click

from collector.api_client import ApiError
from collector.cli.common import config_option, key_option, sql_runner, target, user_errors
from collector.cli.output import print_records
from collector.store.reads import SqlRunner
from collector.store.sql import QueryError, user_sql


@click.command()
@click.argument("query")
@config_option
@key_option
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
    config, url = target(ctx, config_path, server, db)
    limit = max_rows or config.sql.max_rows
    # On the file, the same limits and JSON as through a server (which applies its own `sql:`).
    with sql_runner(config, url) as run, user_sql(config.sql):
        records, truncated = run(query, limit)
        columns = _columns_of(run, query, limit) if not records and output_format != "json" else None
    print_records(records, output_format, columns)
    if truncated:
        click.echo(f"(stopped at {limit} rows; raise --max-rows or add LIMIT)", err=True)


def _columns_of(run: SqlRunner, query: str, limit: int) -> list[str] | None:
    """The columns of a query that returned no row, for the table's header (`DESCRIBE` of it; None
    when it cannot be described, such as a statement that is no SELECT)."""
    try:
        described, _ = run(f"DESCRIBE {query.strip().rstrip(';')}", limit)
    except (QueryError, ApiError):
        return None
    return [str(row["column_name"]) for row in described]
