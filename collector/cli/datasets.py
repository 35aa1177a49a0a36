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


@datasets.command("export")
@click.option(
    "--labels",
    "labels_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write people's labelled traces here as a calibration file (`ragpulse calibrate` reads it).",
)
@config_option
@key_option
@click.option("--since", default="30d", show_default=True, help="Labels given in this window: 1h, 7d, 30d.")
@click.option("--service", help="Only this service's traces.")
@click.option("--server", help="URL of a running ragpulse (its HTTP port).")
@click.option("--db", type=click.Path(dir_okay=False), help="DuckDB file (store.path).")
@click.pass_context
@user_errors
def export_labels(
    ctx: click.Context,
    labels_path: Path,
    config_path: str | None,
    since: str,
    service: str | None,
    server: str | None,
    db: str | None,
) -> None:
    """Write the traces people labelled (POST /api/annotations) as a calibration file: a case per
    trace with its question, documents and answer as the judge saw them, and `verdicts` holding the
    people's verdict per score (the majority of several annotators; ties are left out and counted).

    `ragpulse calibrate FILE --judge MODEL` then measures any judge on your own labels.
    """
    from collector.cli.labels import export_labels as export

    config, url = target(ctx, config_path, server, db)
    click.echo(export(config, url, labels_path, since, service))
