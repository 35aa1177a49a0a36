"""`ragpulse datasets load`: golden cases into the store."""

from __future__ import annotations

from pathlib import Path

import click

from collector.api_client import ApiClient
from collector.cli.common import config_option, key_option, target, user_errors, writable
from collector.datasets import cases_table, read_cases
from collector.store import open_store


@click.group()
def datasets() -> None:
    """Golden cases: question -> expected document ids / expected answer."""


@datasets.command("load")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@config_option
@key_option
@click.option("--server", help="URL of a running ragpulse (its HTTP port).")
@click.option("--db", type=click.Path(dir_okay=False), help="DuckDB file (store.path).")
@click.pass_context
@user_errors
def load_cases(
    ctx: click.Context, file: Path, config_path: str | None, server: str | None, db: str | None
) -> None:
    """Load golden cases from YAML (`cases: [...]`) or JSONL; replaces cases with the same id.

    Traces match a case by `rag.case.id`, else by normalized question, when they are assembled.
    """
    cases = read_cases(file)
    config, url = target(ctx, config_path, server, db)
    if url:
        with ApiClient(url, timeout=60) as api:
            api.load_cases([c.model_dump(by_alias=False) for c in cases], str(file))
        where = url
    else:
        with writable(config):
            store = open_store(config.store)
        with store:
            store.write_cases(cases_table(cases, str(file)))
        where = config.store.location
    click.echo(f"loaded {len(cases)} case(s) from {file} into {where}")
