"""The `ragpulse` command line: one module per command (group), output shared in `output`.

User mistakes (bad config, unreadable file, invalid SQL, server unreachable) end with one line on
stderr and a non-zero exit, never a traceback (`common.user_errors`).
"""

from __future__ import annotations

import click

from collector.cli.calibrate import calibrate
from collector.cli.check import check
from collector.cli.common import config_option
from collector.cli.datasets import datasets
from collector.cli.demo import demo
from collector.cli.eval import eval_suite
from collector.cli.replay import replay
from collector.cli.serve import serve
from collector.cli.sql import sql


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@config_option
@click.pass_context
def main(ctx: click.Context, config_path: str | None) -> None:
    """ragpulse: OTLP in, RAG quality scores out, everything in DuckDB."""
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path


for command in (serve, sql, replay, datasets, demo, eval_suite, calibrate, check):
    main.add_command(command)

__all__ = ["main"]
