"""`ragpulse demo`: the guided first run."""

from __future__ import annotations

from pathlib import Path

import click

from collector.cli.common import (
    apply_listen_options,
    config_option,
    listen_options,
    load,
    program_name,
    user_errors,
)


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
    help="Then keep serving the demo database (dashboard at http://127.0.0.1:4318/) until Ctrl-C; "
    "--host, --grpc-port and --http-port say where.",
)
@listen_options
@click.pass_context
@user_errors
def demo(
    ctx: click.Context,
    config_path: str | None,
    db: Path,
    timeout: float,
    keep_serving: bool,
    host: str | None,
    grpc_port: int | None,
    http_port: int | None,
) -> None:
    """The guided first run: collector + example RAG app in three modes, a summary and SQL to try."""
    # Imported here: the demo pulls in the example app and the OTel SDK exporters.
    from collector.demo import DemoError, check_serve_ports, run_demo, serve_demo

    given = [
        name
        for name, value in (("--host", host), ("--grpc-port", grpc_port), ("--http-port", http_port))
        if value is not None
    ]
    if given and not keep_serving:
        raise click.UsageError(f"{', '.join(given)}: only with --serve (the demo itself uses free ports)")
    config = load(ctx, config_path)
    apply_listen_options(config, host, grpc_port, http_port)
    try:
        if keep_serving:  # before the demo runs, not after it
            check_serve_ports(config)
        run_demo(config, db, timeout=timeout, program=program_name())
    except DemoError as exc:
        raise click.ClickException(str(exc)) from None
    if keep_serving:
        serve_demo(config, db)
