"""`ragpulse check`: quality gates and regression detection over stored scores, for CI and deploys.

Exit status: 0 every gate holds (and no regression), 1 a gate fails or a score regressed, 2 too
little data to decide (a gate below `min_samples`, or `--regression` with nothing comparable).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import click
import orjson

from collector.api_client import ApiError
from collector.cli.common import config_option, key_option, sql_runner, target, user_errors
from collector.cli.output import print_table
from collector.feedback.agreement import AgreementGate, agreement_report, check_agreement
from collector.monitoring.check import (
    AGREEMENT_CODES,
    VERDICTS,
    CheckRequest,
    Outcome,
    failing_slices,
    outcome_json,
    run_check,
    worst_code,
)
from collector.monitoring.gates import Gate, GateKind
from collector.monitoring.regression import Baseline, RegressionSettings
from collector.schema.scope import Scope, check_dimension, parse_slices
from collector.schema.windows import Window, parse_duration, parse_time, parse_window, utc_now
from collector.store.sql import QueryError

# Wide enough for score names and services without folding, in a terminal or a CI log.
TABLE_WIDTH = 130


def _duration(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _window(_ctx: click.Context, _param: click.Parameter, value: str) -> float:
    try:
        return parse_window(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _gates(kind: GateKind, values: tuple[str, ...]) -> list[Gate]:
    try:
        return [Gate.parse(kind, value) for value in values]
    except ValueError as exc:
        option = "--" + kind.replace("_", "-")
        raise click.BadParameter(str(exc), param_hint=option) from None


@click.command()
@config_option
@key_option
@click.option("--db", type=click.Path(dir_okay=False), help="DuckDB file (default: store.path).")
@click.option("--server", help="URL of a running ragpulse (its HTTP port), e.g. http://127.0.0.1:4318.")
@click.option(
    "--since",
    default="1h",
    show_default=True,
    callback=_window,
    help="Window length: 90s, 15m, 1h, 7d (at least 60s; the whole minutes covering it count).",
)
@click.option("--until", "until_text", help="Window end, ISO 8601 (default: now; times are UTC).")
@click.option("--service", help="Only this service (default: every service together).")
@click.option(
    "--by",
    "by",
    metavar="DIMENSION",
    help="Gate (and compare) each value of a slice dimension apart; exit 1 names failing slices.",
)
@click.option(
    "--slice",
    "slices",
    multiple=True,
    metavar="DIMENSION=VALUE",
    help="Only scores of this slice (repeatable; VALUE (none): traces without a value).",
)
@click.option("--probe", help="A probe's traffic (probes:) instead of the app's own.")
@click.option(
    "--min", "min_means", multiple=True, metavar="NAME=VALUE", help="Mean of the score at least VALUE."
)
@click.option(
    "--min-pass-rate", "min_pass_rates", multiple=True, metavar="NAME=VALUE", help="Pass rate at least VALUE."
)
@click.option(
    "--max-error-rate",
    "max_error_rates",
    multiple=True,
    metavar="[NAME=]VALUE",
    help="Error rate at most VALUE (of one score, or of every score together).",
)
@click.option(
    "--min-samples",
    type=click.IntRange(min=1),
    help="Scores needed to decide (default: monitoring.min_samples).",
)
@click.option(
    "--regression", is_flag=True, help="Also compare the window with a baseline, per service and score."
)
@click.option(
    "--baseline",
    "baseline_shift",
    default="1d",
    show_default=True,
    callback=_duration,
    help="Baseline: the same window this long before (1d: the previous day, 7d: the same hours last week).",
)
@click.option("--baseline-version", help="Baseline: the traces of this service.version (a good deploy).")
@click.option(
    "--version",
    "recent_version",
    help="With --baseline-version: compare the window's traces of this version only.",
)
@click.option(
    "--min-effect",
    type=click.FloatRange(0, 1),
    help="Smallest drop flagged (default: monitoring.min_effect).",
)
@click.option(
    "--alpha",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="False-alarm rate of a run (default: monitoring.alpha).",
)
@click.option(
    "--min-agreement",
    "min_agreements",
    multiple=True,
    metavar="NAME=VALUE",
    help="Cohen's kappa of the evaluator with reviewers' verdicts (its current judge) at least VALUE.",
)
@click.option(
    "--agreement-since",
    default="30d",
    show_default=True,
    callback=_duration,
    help="With --min-agreement: the verdicts given in this window.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout instead of tables.")
@click.pass_context
@user_errors
def check(
    ctx: click.Context,
    config_path: str | None,
    db: str | None,
    server: str | None,
    since: float,
    until_text: str | None,
    service: str | None,
    by: str | None,
    slices: tuple[str, ...],
    probe: str | None,
    min_means: tuple[str, ...],
    min_pass_rates: tuple[str, ...],
    max_error_rates: tuple[str, ...],
    min_samples: int | None,
    regression: bool,
    baseline_shift: float,
    baseline_version: str | None,
    recent_version: str | None,
    min_effect: float | None,
    alpha: float | None,
    min_agreements: tuple[str, ...],
    agreement_since: float,
    as_json: bool,
) -> None:
    """Quality gates over stored scores (`--min faithfulness=0.9`), and regressions against a baseline
    (`--regression`). Exit 0: all hold; 1: a gate fails or a score regressed; 2: too little data."""
    gates = (
        _gates("min", min_means)
        + _gates("min_pass_rate", min_pass_rates)
        + _gates("max_error_rate", max_error_rates)
    )
    try:
        agreement_gates = [AgreementGate.parse(text) for text in min_agreements]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--min-agreement") from None
    if not gates and not regression and not agreement_gates:
        raise click.UsageError(
            "nothing to check: give --min, --min-pass-rate, --max-error-rate, --min-agreement or --regression"
        )
    try:
        scope = Scope.of(service, probe, parse_slices(slices))
        if by is not None:
            check_dimension(by)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--by / --slice") from None
    config, url = target(ctx, config_path, server, db)
    monitoring = config.monitoring
    try:
        end = parse_time(until_text) if until_text else utc_now()
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--until") from None
    try:
        # The whole minutes covering the window, as alerts and the dashboard take them.
        window = Window.covering(end, since)
    except OverflowError:
        raise click.BadParameter("the window falls outside the calendar", param_hint="--since") from None
    samples = min_samples or monitoring.min_samples
    settings = RegressionSettings(
        alpha=alpha or monitoring.alpha,
        min_effect=monitoring.min_effect if min_effect is None else min_effect,
        min_samples=samples,
    )
    if recent_version and not baseline_version:
        raise click.UsageError("--version compares with --baseline-version; give both")
    if regression and not baseline_version and baseline_shift < since:
        raise click.UsageError("--baseline must be at least --since, so the two windows do not overlap")
    baseline = (
        Baseline(version=baseline_version, recent_version=recent_version)
        if baseline_version
        else Baseline(shift=baseline_shift)
    )
    request = CheckRequest(
        gates=gates,
        window=window,
        scope=scope,
        min_samples=samples,
        confidence=monitoring.confidence,
        by=by,
        baseline=baseline if regression else None,
        regression=settings,
    )
    dimensions = [d for d in (by, *(d for d, _ in scope.slices)) if d is not None]
    with sql_runner(config, url) as run, undeclared_dimension(dimensions):
        rows = lambda sql: run(sql, config.sql.max_rows)[0]  # noqa: E731
        outcome = run_check(rows, request)
        agreement = []
        if agreement_gates:
            report = agreement_report(rows, Window.ending(end, agreement_since), service)
            agreement = check_agreement(report, agreement_gates, samples)
    code = worst_code(outcome.code, *(AGREEMENT_CODES[a["status"]] for a in agreement))
    if as_json:
        found = outcome_json(outcome)
        if agreement_gates:
            found |= {"agreement": agreement, "status": VERDICTS[code], "exit_code": code}
        sys.stdout.write(orjson.dumps(found).decode() + "\n")
    else:
        _print(outcome)
        if agreement:
            _print_agreement(agreement)
    ctx.exit(code)


@contextlib.contextmanager
def undeclared_dimension(dimensions: list[str]) -> Iterator[None]:
    """A slice dimension the store has no column for (not in `monitoring.dimensions` of the config
    that wrote it): said as such, not as the database's binder error."""
    try:
        yield
    except (QueryError, ApiError) as exc:
        missing = [d for d in dimensions if f'column "{d}" not found' in str(exc)]
        if not missing:
            raise
        raise click.BadParameter(
            f"{missing[0]} is not a dimension this store keeps: declare it in monitoring.dimensions "
            "(of the config of the service that stores the traces) to slice by it; see docs/monitoring.md",
            param_hint="--by / --slice",
        ) from None


def _print_agreement(results: list[dict[str, Any]]) -> None:
    rows = [
        [
            r["gate"],
            r.get("model") or "-",
            r.get("prompt_version") or "-",
            _number(r.get("kappa")),
            str(r.get("n", 0)),
            "-" if r.get("kappa_low") is None else f"{r['kappa_low']:.3f}-{r['kappa_high']:.3f}",
            r["status"] + (f" ({r['reason']})" if r["reason"] else ""),
        ]
        for r in results
    ]
    print_table(
        ["agreement gate", "model", "prompt", "kappa", "n", "95% CI", "result"], rows, width=TABLE_WIDTH
    )


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _print(outcome: Outcome) -> None:
    reports, scope, by, comparisons = outcome.reports, outcome.scope, outcome.by, outcome.comparisons
    baseline, window = outcome.baseline, reports[0].window
    where = scope.describe() + (f", each {by} apart" if by else "")
    click.echo(f"window {window.start:%Y-%m-%d %H:%M} to {window.end:%Y-%m-%d %H:%M} UTC, {where}")
    if any(report.results for report in reports):
        sliced = by is not None
        rows = [
            [
                *([report.scope.slice_label or "-"] if sliced else []),
                r.gate.describe(),
                _number(r.value),
                str(r.n),
                "-" if r.interval is None else f"{r.interval.low:.3f}-{r.interval.high:.3f}",
                r.status + (f" ({r.reason})" if r.reason else ""),
            ]
            for report in reports
            for r in report.results
        ]
        headers = [*(["slice"] if sliced else []), "gate", "value", "n", "95% CI", "result"]
        print_table(headers, rows, width=TABLE_WIDTH)
        failing = failing_slices(reports) if sliced else []
        if failing:
            click.echo(f"failing slices: {'; '.join(failing)}")
    if comparisons is not None and baseline is not None:
        against = baseline.describe(window)
        compared = [c for c in comparisons if c.n_baseline]
        if not compared:  # one line, not a row per score saying the same
            click.echo(f"regression: no scores in the baseline ({against}) to compare with")
            click.echo(f"result: {outcome.verdict}")
            return
        click.echo(f"regression: against {against}")
        rows = [
            [
                *([c.slice or "-"] if by else []),
                c.service or "",
                c.score,
                c.metric.replace("_", " "),
                _number(c.baseline),
                _number(c.recent),
                _number(c.effect),
                str(c.n_baseline),
                str(c.n_recent),
                "-" if c.p_value is None else f"{c.p_value:.2g}",
                c.status,
            ]
            for c in compared
        ]
        headers = [
            *(["slice"] if by else []),
            "service",
            "score",
            "figure",
            "baseline",
            "recent",
            "change",
            "n base",
            "n recent",
            "p",
            "result",
        ]
        print_table(headers, rows, width=TABLE_WIDTH)
        missing = sorted(
            {f"{c.score} ({c.service})" if c.service else c.score for c in comparisons if not c.n_baseline}
        )
        if missing:
            click.echo(f"no baseline scores (not compared): {', '.join(missing)}")
    click.echo(f"result: {outcome.verdict}")
