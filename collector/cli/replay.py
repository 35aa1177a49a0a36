"""`ragpulse replay`: captured OTLP traffic back into ragpulse."""

from __future__ import annotations

from pathlib import Path

import click

from collector.cli.common import config_option, key_option, target, user_errors, writable
from collector.replay import ReplayError, replay_to_server, replay_to_store


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@config_option
@key_option
@click.option("--server", help="URL of a running ragpulse to send to (its HTTP port).")
@click.option("--db", type=click.Path(dir_okay=False), help="Write straight into this DuckDB file.")
@click.pass_context
@user_errors
def replay(
    ctx: click.Context, files: tuple[Path, ...], config_path: str | None, server: str | None, db: str | None
) -> None:
    """Load captured OTLP traffic (.json, .jsonl, protobuf; optionally .gz)."""
    for path in files:
        if not path.is_file():
            raise ReplayError(f"no such file: {path}")
    config, url = target(ctx, config_path, server, db)
    if url:
        report = replay_to_server(list(files), url)
        where = url
    else:
        with writable(config):
            report = replay_to_store(list(files), config)
        where = config.store.location
    assembled = f", {report.traces} trace(s) assembled" if report.traces is not None else ""
    click.echo(
        f"replayed {report.requests} request(s) into {where}: "
        f"{report.accepted} span(s) stored, {report.rejected} rejected{assembled}"
    )
    for message in report.errors:
        click.echo(f"  rejected: {message}", err=True)
