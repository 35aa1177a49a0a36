"""`ragpulse serve`: the service."""

from __future__ import annotations

import asyncio
import logging

import click

from collector.cli.common import apply_listen_options, config_option, listen_options, load, user_errors
from collector.service import Service
from collector.store import StoreError, StoreLocked

# Loggers of libraries that log each HTTP request at INFO (`httpx2` is the httpx `openai` 3 carries),
# and the MCP SDK's session manager, whose start and stop lines would open and close ragpulse's log.
QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "mcp.server.streamable_http_manager")


@click.command()
@config_option
@click.option("--db", type=click.Path(dir_okay=False), help="DuckDB file (store.path).")
@listen_options
@click.option("--forward-to", help="Also forward every received span to this OTLP endpoint.")
@click.pass_context
@user_errors
def serve(
    ctx: click.Context,
    config_path: str | None,
    db: str | None,
    host: str | None,
    grpc_port: int | None,
    http_port: int | None,
    forward_to: str | None,
) -> None:
    """Run the service: OTLP receivers, the store and the API."""
    config = load(ctx, config_path)
    apply_listen_options(config, host, grpc_port, http_port)
    try:
        if db:
            config.store.path = db
        if forward_to:
            config.exporters.otlp.endpoint = forward_to
            config.exporters.forward_spans = True
    except ValueError as exc:
        raise click.BadParameter(str(exc).splitlines()[-1]) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The HTTP clients (the judge's `openai`, webhooks) log every request at INFO: a line per judge
    # call. Their warnings and errors still show; ragpulse logs what failed, once.
    for noisy in QUIET_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    service = Service(config)
    try:
        asyncio.run(service.run())
    except StoreLocked as exc:
        raise StoreError(f"{exc}; is another `ragpulse serve` running on it?") from None
