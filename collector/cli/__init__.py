"""The `ragpulse` command line: one module per command (group), output shared in `output`.

User mistakes (bad config, unreadable file, invalid SQL, server unreachable) end with one line on
stderr and exit 1, never a traceback (`common.user_errors`); so do bad options and values, after
click's usage line (`input_errors_exit_1`).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

import click

from collector.cli.common import config_option, key_option

# Command name -> "module:function". A command's module (and what it needs: the service, the judge
# client, ...) loads only when that command runs, so `ragpulse sql` or `check` start quickly.
COMMANDS = {
    "serve": "collector.cli.serve:serve",
    "sql": "collector.cli.sql:sql",
    "replay": "collector.cli.replay:replay",
    "datasets": "collector.cli.datasets:datasets",
    "demo": "collector.cli.demo:demo",
    "eval": "collector.cli.eval:eval_suite",
    "calibrate": "collector.cli.calibrate:calibrate",
    "check": "collector.cli.check:check",
    "report": "collector.cli.report:report",
    "doctor": "collector.cli.doctor:doctor",
    "probes": "collector.cli.probes:probes",
    "mcp": "collector.cli.mcp:mcp",
    "agreement": "collector.cli.agreement:agreement",
    "align": "collector.cli.align:align",
    "rescore": "collector.cli.rescore:rescore",
}


class InputError(click.UsageError):
    """A bad option or value, said as click says it (usage line, then `Error: ...`), exit 1."""

    exit_code = 1


@contextlib.contextmanager
def input_errors_exit_1() -> Iterator[None]:
    """A bad option or value is an input error like any other: exit 1 (click's default is 2, which
    `check` keeps for "too little data", so a CI step can tell a typo from a quiet hour). Bare
    `ragpulse` shows its help and exits 0."""
    try:
        yield
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx is not None else "")
        raise click.exceptions.Exit(0) from None
    except InputError:
        raise
    except click.UsageError as exc:
        raise InputError(exc.format_message(), exc.ctx) from None


class LazyGroup(click.Group):
    """A group whose commands are imported when used (click's documented pattern); usage errors
    exit 1 (`input_errors_exit_1`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        with input_errors_exit_1():
            return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        with input_errors_exit_1():
            return super().invoke(ctx)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return super().get_command(ctx, name)
        module, attribute = COMMANDS[name].split(":")
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@config_option
@key_option
@click.pass_context
def main(ctx: click.Context, config_path: str | None) -> None:
    """ragpulse: OTLP in, RAG quality scores out, everything in DuckDB."""
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path


__all__ = ["main"]
