"""`ragpulse doctor`: flags what in the configuration is unsafe beside production.

Exit status: 0 when nothing is unsafe (warnings are advice: shown, not failed on, unless `--strict`),
1 when the configuration cannot be read or an option is bad (every command's one-line error), 3 when
a finding is `unsafe` (with `--strict`, also when one is `warn`)."""

from __future__ import annotations

import sys
from dataclasses import asdict

import click
import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from collector.cli.common import config_option, load, user_errors
from collector.doctor import Finding, examine

_STYLES = {"ok": "green", "warn": "yellow", "unsafe": "bold red"}
# The exit status when findings fail the run: 1 is every command's input error, 2 `check`'s too little data.
FLAGGED_EXIT = 3


@click.command()
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print the findings as a JSON array.")
@click.option("--strict", is_flag=True, help="Fail (exit 3) on warnings too, not only on unsafe findings.")
@click.pass_context
@user_errors
def doctor(ctx: click.Context, config_path: str | None, as_json: bool, strict: bool) -> None:
    """Check the configuration for an unsafe setup: a network address without keys or TLS,
    redaction off, no retention. Exit 0 when nothing is unsafe (warnings shown), 3 when something
    is (--strict: or a warning), 1 when the configuration cannot be read."""
    findings = examine(load(ctx, config_path))
    if as_json:
        sys.stdout.write(orjson.dumps([asdict(f) for f in findings]).decode() + "\n")
    else:
        Console().print(findings_table(findings))
    unsafe = sum(f.level == "unsafe" for f in findings)
    warnings = sum(f.level == "warn" for f in findings)
    if not as_json and (unsafe or warnings):
        click.echo(summary(unsafe, warnings, strict), err=True)
    ctx.exit(FLAGGED_EXIT if unsafe or (strict and warnings) else 0)


def findings_table(findings: list[Finding]) -> Table:
    """Three columns that fit 80: the check, its level, and the finding with its fix under it (as
    plain text: a fix such as `redaction.presets: [email, ...]` is not markup)."""
    table = Table("check", "level", "finding")
    for f in findings:
        finding = Text(f.detail, overflow="fold")
        if f.fix:
            finding.append("\nfix: ", style="bold")
            finding.append(f.fix)
        table.add_row(f.check, Text(f.level, style=_STYLES[f.level]), finding)
    return table


def summary(unsafe: int, warnings: int, strict: bool) -> str:
    """The line under the table: what was found and what it means for the exit status."""
    if unsafe:
        return f"{unsafe} unsafe now, {warnings} warning(s): fix the unsafe ones before serving (exit 3)."
    if strict:
        return f"{warnings} warning(s), nothing unsafe now; --strict fails on warnings (exit 3)."
    return (
        f"{warnings} warning(s) worth fixing before production, nothing unsafe now "
        "(exit 0; --strict fails on them)."
    )
