"""`ragpulse demo`: the guided first run."""

from __future__ import annotations

from pathlib import Path

import click

from collector.cli.common import config_option, load, user_errors


@click.command()
@config_option
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    default="ragpulse-demo.duckdb",
    show_default=True,
    help="Demo database file; a previous demo file there is replaced.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=30.0,
    show_default=True,
    help="Seconds to wait for the traces to be assembled.",
)
@click.option(
    "--serve",
    "keep_serving",
    is_flag=True,
    help="Then keep serving the demo database (dashboard at http://127.0.0.1:4318/) until Ctrl-C.",
)
@click.pass_context
@user_errors
def demo(ctx: click.Context, config_path: str | None, db: Path, timeout: float, keep_serving: bool) -> None:
    """The guided first run: collector + example RAG app in three modes, a summary and SQL to try."""
    # Imported here: the demo pulls in the example app and the OTel SDK exporters.
    from collector.demo import DemoError, run_demo, serve_demo

    config = load(ctx, config_path)
    try:
        run_demo(config, db, timeout=timeout)
    except DemoError as exc:
        raise click.ClickException(str(exc)) from None
    if keep_serving:
        serve_demo(config, db)
