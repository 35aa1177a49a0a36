"""What every command shares: the `--config` option, the config with `--db` applied, the server
to go through, and turning user mistakes into one line on stderr (never a traceback)."""

from __future__ import annotations

import contextlib
import functools
import os
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
