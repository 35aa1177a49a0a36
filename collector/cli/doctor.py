"""`ragpulse doctor`: flags what in the configuration is unsafe beside production."""

from __future__ import annotations

import sys
from dataclasses import asdict

import click
import orjson
from rich.console import Console
from rich.table import Table

from collector.cli.common import config_option, load, user_errors
from collector.doctor import examine

_STYLES = {"ok": "green", "warn": "yellow", "unsafe": "bold red"}


@click.command()
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print the findings as a JSON array.")
@click.pass_context
@user_errors
def doctor(ctx: click.Context, config_path: str | None, as_json: bool) -> None:
    """Check the configuration for an unsafe setup: a network address without keys or TLS,
    redaction off, no retention. Exit 0 when nothing is flagged, 1 otherwise."""
    findings = examine(load(ctx, config_path))
    if as_json:
        sys.stdout.write(orjson.dumps([asdict(f) for f in findings]).decode() + "\n")
    else:
        table = Table("check", "level", "finding", "fix")
        for f in findings:
            table.add_row(f.check, f"[{_STYLES[f.level]}]{f.level}[/]", f.detail, f.fix)
        Console().print(table)
    flagged = [f for f in findings if f.level != "ok"]
    if flagged and not as_json:
        unsafe = sum(f.level == "unsafe" for f in flagged)
        click.echo(f"{len(flagged)} finding(s) to fix, {unsafe} unsafe now.", err=True)
    ctx.exit(1 if flagged else 0)
