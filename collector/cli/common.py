"""What every command shares: the `--config` option, the config with `--db` applied, the server
to go through, and turning user mistakes into one line on stderr (never a traceback)."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

from collector.api_client import KEY_ENV, ApiClient, ApiError
from collector.config import Config, ConfigError, load_config
from collector.datasets import DatasetError
from collector.replay import ReplayError
from collector.server_file import running_server_url
from collector.store import StoreError, StoreLocked, open_store
from collector.store.reads import SqlRunner
from collector.store.sql import QueryError
from evaluators.embeddings import EmbeddingError
from evaluators.suite import SuiteError

F = TypeVar("F", bound=Callable[..., Any])

# Mistakes a user can make (and fix): each ends the command with its message, exit status 1. The
# judge's own errors are caught by the commands that use a judge (`judge_errors`), so that the
# other commands start without importing the judge client.
USER_ERRORS = (
    SuiteError,
    ConfigError,
    StoreError,
    QueryError,
    ReplayError,
    DatasetError,
    ApiError,
    EmbeddingError,
    OSError,
)


def user_errors(func: F) -> F:
    """Report `USER_ERRORS` as one line (click's `Error: ...`) instead of a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except USER_ERRORS as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def judge_errors() -> Iterator[None]:
    """A judge that cannot be set up or fails its pre-run check ends the command with one line."""
    from collector.judge_setup import JudgeSetupError
    from evaluators.judge import JudgeCheckError

    try:
        yield
    except (JudgeSetupError, JudgeCheckError) as exc:
        raise click.ClickException(str(exc)) from None


def config_option(func: F) -> F:
    """`--config` is accepted before or after the subcommand; the later one wins."""
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        default=None,
        help="Config file (default: ./ragpulse.yaml when present).",
    )(func)


def _use_key(_ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value:
        # Every client of a server in this process (`collector.api_client`) sends it from here.
        os.environ[KEY_ENV] = value


def key_option(func: F) -> F:
    """`--key` (or $RAGPULSE_KEY): the API key sent to a server that requires one; accepted before
    or after the subcommand."""
    return click.option(
        "--key",
        envvar=KEY_ENV,
        expose_value=False,
        callback=_use_key,
        help=f"API key for a server that requires one (default: ${KEY_ENV}).",
    )(func)


def listen_options(func: F) -> F:
    """`--host`, `--grpc-port`, `--http-port`: where a service listens (`receivers.*`); applied to
    the config by `apply_listen_options`."""
    options = (
        click.option("--host", help="Address to listen on (receivers.host)."),
        click.option("--grpc-port", type=int, help="OTLP/gRPC port (receivers.grpc_port, default 4317)."),
        click.option(
            "--http-port", type=int, help="OTLP/HTTP and API port (receivers.http_port, default 4318)."
        ),
    )
    for option in reversed(options):
        func = option(func)
    return func


def apply_listen_options(
    config: Config, host: str | None, grpc_port: int | None, http_port: int | None
) -> None:
    """The listen options given on the command line, over the config's (a bad value: one line)."""
    try:
        if host:
            config.receivers.host = host
        if grpc_port is not None:
            config.receivers.grpc_port = grpc_port
        if http_port is not None:
            config.receivers.http_port = http_port
    except ValueError as exc:
        raise click.BadParameter(str(exc).splitlines()[-1]) from None


def program_name(argv0: str | None = None) -> str:
    """This command as a user would type it again: `ragpulse` when that name on PATH is this
    program, else the path it was started by (`.venv/bin/ragpulse` after `make install`, which
    puts it on no PATH)."""
    started = argv0 if argv0 is not None else sys.argv[0]
    on_path = shutil.which("ragpulse")
    if not started or os.path.basename(started) != "ragpulse" or not os.path.isfile(started):
        return "ragpulse"  # started otherwise (`python -m`, a test runner): the documented name
    if on_path and os.path.samefile(on_path, started):
        return "ragpulse"
    relative = os.path.relpath(os.path.abspath(started))
    return os.path.abspath(started) if relative.startswith("..") else relative


def load(ctx: click.Context, config_path: str | None) -> Config:
    """The config file named after the subcommand, else before it, else ./ragpulse.yaml."""
    return load_config(config_path or ctx.obj.get("config_path"))


def target(
    ctx: click.Context, config_path: str | None, server: str | None, db: str | None
) -> tuple[Config, str | None]:
    """The config (with `--db` applied) and the URL of the server to go through, if any: `--server`,
    or the running server that holds the database file."""
    config = load(ctx, config_path)
    if server and db:
        raise click.UsageError("give --server or --db, not both")
    if db:
        config.store.path = db
    if config.store.backend == "ducklake":  # any process reads the lake itself
        return config, server
    return config, server or running_server_url(config.store.path)


@contextlib.contextmanager
def writable(config: Config) -> Iterator[None]:
    """Opening the database for writing: a file held by another process is a one-line error."""
    try:
        yield
    except StoreLocked:
        raise StoreError(f"{config.store.path} is held by another process; pass --server URL") from None


@contextlib.contextmanager
def sql_runner(config: Config, url: str | None) -> Iterator[SqlRunner]:
    """Read-only SQL through the running server at `url`, else on the database file opened
    read-only (`config.store`), with `sql.timeout`. Both give the same rows for the same query."""
    if url:
        with ApiClient(url) as api:
            yield api.query
        return
    try:
        store = open_store(config.store, read_only=True)
    except StoreLocked:
        raise StoreError(
            f"{config.store.path} is held by another process and no running ragpulse advertises it; "
            "pass --server URL"
        ) from None
    with store:

        def run(query: str, max_rows: int) -> tuple[list[dict[str, Any]], bool]:
            result = store.query(query, max_rows, config.sql.timeout)
            return result.records(), result.truncated

        yield run
