"""`ragpulse probes list|show`: the runs of the scheduled probes (`probes:`), read from the database
file or a running server, like `ragpulse check`."""

from __future__ import annotations

import sys
from typing import Any

import click
import orjson

from collector.cli.common import config_option, key_option, sql_runner, target, user_errors
from collector.cli.output import print_table
from collector.probes.report import LATEST, SET_UP, UnknownRun, list_runs, probe_report

TABLE_WIDTH = 130


def _source_options(func: Any) -> Any:
    func = click.option("--server", help="URL of a running ragpulse (its HTTP port).")(func)
    func = click.option("--db", type=click.Path(dir_okay=False), help="DuckDB file (default: store.path).")(
        func
    )
    return key_option(config_option(func))


@click.group()
def probes() -> None:
    """Runs of the scheduled probes: golden questions sent to the app, their traces scored."""


@probes.command("list")
@_source_options
@click.option("--probe", help="Only the runs of this probe.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True, help="Runs shown.")
@click.option("--json", "as_json", is_flag=True, help="One JSON array on stdout instead of a table.")
@click.pass_context
@user_errors
def list_command(
    ctx: click.Context,
    config_path: str | None,
    db: str | None,
    server: str | None,
    probe: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Recent probe runs, newest first: what was sent, answered, received."""
    config, url = target(ctx, config_path, server, db)
    with sql_runner(config, url) as run:
        runs = list_runs(lambda sql: run(sql, config.sql.max_rows)[0], probe, limit)
    if as_json:
        sys.stdout.write(orjson.dumps(runs).decode() + "\n")
        return
    if not runs:
        click.echo("no probe runs" + (f" of probe {probe!r}" if probe else f"; {SET_UP}"))
        return
    rows = [
        [
            r["run_id"],
            r["probe"],
            _time(r["started_at"]),
            r["status"],
            _count(r["cases"]),
            _count(r["answered"]),
            _count(r["errors"]),
            _count(r["traces_received"]),
            _count(r["missing_traces"]),
        ]
        for r in runs
    ]
    headers = ["run", "probe", "started (UTC)", "status", "cases", "answered", "errors", "traces", "missing"]
    print_table(headers, rows, width=TABLE_WIDTH)


@probes.command("show")
@click.argument("run_id", default=LATEST, required=False)
@_source_options
@click.option("--probe", help="With `latest` (the default): the newest run of this probe.")
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON object on stdout.")
@click.pass_context
@user_errors
def show_command(
    ctx: click.Context,
    run_id: str,
    config_path: str | None,
    db: str | None,
    server: str | None,
    probe: str | None,
    as_json: bool,
) -> None:
    """One probe run (RUN_ID, or `latest`): its counts, then each case with its HTTP status, latency,
    whether its trace arrived, and its scores. Exit 1 when there is no such run."""
    config, url = target(ctx, config_path, server, db)
    with sql_runner(config, url) as run:
        try:
            report = probe_report(lambda sql: run(sql, config.sql.max_rows)[0], run_id, probe)
        except UnknownRun as exc:
            raise click.ClickException(str(exc)) from None
    if as_json:
        sys.stdout.write(orjson.dumps(report).decode() + "\n")
        return
    _print(report)


def _time(value: Any) -> str:
    return "-" if value is None else str(value).replace("T", " ")[:19]


def _count(value: Any) -> str:
    return "-" if value is None else str(value)


def _number(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{float(value):.{digits}f}"


def _arrived(case: dict[str, Any]) -> str:
    if case.get("received"):
        return "yes" if case.get("matched_by") != "question" else "yes (by question)"
    return "no" if case.get("outcome") == "answered" else "-"


def _scores(scores: dict[str, dict[str, Any]]) -> str:
    """One line per score that applied (skipped ones, without a reference or an answer, left out)."""
    return "\n".join(
        f"{name} {s['status']} {_number(s['value'], 2)}"
        for name, s in sorted(scores.items())
        if s["status"] != "skipped"
    )


def _print(report: dict[str, Any]) -> None:
    run = report["run"]
    click.echo(
        f"probe run {run['run_id']} of {run['probe']}: {run['status']}, "
        f"started {_time(run['started_at'])}, finished {_time(run['finished_at'])} (UTC)"
    )
    if run.get("error"):
        click.echo(f"error: {run['error']}")
    counts = ["cases", "answered", "errors", "traces_received", "missing_traces"]
    print_table([c.replace("_", " ") for c in counts], [[_count(run[c]) for c in counts]], width=TABLE_WIDTH)
    summary: dict[str, dict[str, Any]] = run.get("summary") or {}
    if summary:
        rows = [
            [
                name,
                str(s["n"]),
                _number(s["mean"]),
                _number(s["pass_rate"]),
                str(s["n_error"]),
            ]
            for name, s in sorted(summary.items())
        ]
        print_table(["score", "n", "mean", "pass rate", "errors"], rows, width=TABLE_WIDTH)
    if report["cases"]:
        rows = [
            [
                case["case_id"],
                _count(case.get("http_status")) + (f" ({case['error']})" if case.get("error") else ""),
                _number(case.get("latency_ms"), 0),
                _arrived(case),
                _scores(case["scores"]),
            ]
            for case in report["cases"]
        ]
        print_table(["case", "http", "latency ms", "trace arrived", "scores"], rows, width=TABLE_WIDTH)
