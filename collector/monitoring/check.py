"""One quality check over stored scores: the gates of a window (per slice with `by`) and, when asked,
the regression comparisons against a baseline, with the verdict and exit code `ragpulse check`
gives. The command and the MCP tools (`check_quality`, `find_regressions`) run it alike over any
`rows(sql)` function: a database file, or a running server's `/api/sql`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from collector.monitoring.gates import Gate, GateReport, GateResult, Query, check_gates, check_gates_by
from collector.monitoring.regression import Baseline, Comparison, RegressionSettings, compare
from collector.schema.scope import Scope
from collector.schema.windows import Window
from collector.store.reads.slices import slice_values

EXIT_PASS, EXIT_FAIL, EXIT_INSUFFICIENT = 0, 1, 2
VERDICTS = {EXIT_PASS: "pass", EXIT_FAIL: "fail", EXIT_INSUFFICIENT: "insufficient"}
# A gate's status as the exit code it asks for (agreement gates, checked beside the others).
AGREEMENT_CODES = {status: code for code, status in VERDICTS.items()}


def worst_code(*codes: int) -> int:
    """The exit code of several checks together: a failure first, then too little data."""
    for code in (EXIT_FAIL, EXIT_INSUFFICIENT):
        if code in codes:
            return code
    return EXIT_PASS


@dataclass(frozen=True)
class CheckRequest:
    """What to check: `gates` over `window` and `scope` (each value of `by` apart), and, with a
    `baseline`, the regressions against it."""

    gates: Sequence[Gate]
    window: Window
    scope: Scope
    min_samples: int
    confidence: float = 0.95
    by: str | None = None
    baseline: Baseline | None = None
    regression: RegressionSettings | None = None


@dataclass(frozen=True)
class Outcome:
    """What one check found: a gate report per slice (one without `by`), the regression
    comparisons (None without a baseline) and the exit code."""

    reports: list[GateReport]
    scope: Scope
    by: str | None
    comparisons: list[Comparison] | None
    baseline: Baseline | None
    code: int

    @property
    def verdict(self) -> str:
        """`pass`, `fail` or `insufficient`."""
        return VERDICTS[self.code]


def run_check(query: Query, request: CheckRequest) -> Outcome:
    """Evaluate the request's gates, and its regression comparisons when it has a baseline."""
    gates, window, scope, by = request.gates, request.window, request.scope, request.by
    samples, confidence = request.min_samples, request.confidence
    reports = check_gates_by(query, gates, window, scope, by, samples, confidence) if by and gates else []
    # Without `by` (or a gate), or with nothing in the window to split: the whole scope's report.
    reports = reports or [_gate_report(query, gates, window, scope, samples, confidence)]
    comparisons = None
    if request.baseline is not None:
        settings = request.regression or RegressionSettings(min_samples=samples)
        comparisons = compare_by(query, window, request.baseline, scope, by, settings)
    code = exit_code([r for report in reports for r in report.results], comparisons)
    return Outcome(reports, scope, by, comparisons, request.baseline, code)


def _gate_report(
    query: Query, gates: Sequence[Gate], window: Window, scope: Scope, samples: int, confidence: float
) -> GateReport:
    if not gates:
        return GateReport(window, scope)
    return check_gates(query, gates, window, scope, samples, confidence)


def compare_by(
    query: Query,
    window: Window,
    baseline: Baseline,
    scope: Scope,
    by: str | None,
    settings: RegressionSettings,
) -> list[Comparison]:
    """The regression comparisons of the scope, or of each value of `by` (each slice's comparisons
    tested and corrected on their own, and labelled with their slice)."""
    if by is None:
        return compare(query, window, baseline, scope, settings)
    found = []
    for value in slice_values(query, window, scope, by):
        sliced = scope.with_slice(by, value)
        for comparison in compare(query, window, baseline, sliced, settings):
            comparison.slice = sliced.slice_label
            found.append(comparison)
    return found


def failing_slices(reports: list[GateReport]) -> list[str]:
    """The slices (`category=refunds`) with a failing gate."""
    return [r.scope.slice_label or "" for r in reports if any(g.status == "fail" for g in r.results)]


def exit_code(results: list[GateResult], comparisons: list[Comparison] | None) -> int:
    """1 when a gate fails or a score regressed; else 2 when a gate lacks data or no comparison had
    enough on both sides; else 0."""
    if any(r.status == "fail" for r in results) or any(c.status == "regressed" for c in comparisons or []):
        return EXIT_FAIL
    if any(r.status == "insufficient" for r in results):
        return EXIT_INSUFFICIENT
    if comparisons is not None and not any(c.status == "ok" for c in comparisons):
        return EXIT_INSUFFICIENT
    return EXIT_PASS


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    """The outcome as `ragpulse check --json` prints it (documented in docs/monitoring.md)."""
    reports, scope, by, comparisons = outcome.reports, outcome.scope, outcome.by, outcome.comparisons
    window, code = reports[0].window, outcome.code
    found: dict[str, Any] = {
        "status": VERDICTS[code],
        "exit_code": code,
        "window": window.describe(),
        "service": scope.service,
        "probe": scope.probe,
        "slice": scope.slice_label,
    }
    if by is None:
        found["gates"] = [r.as_dict() for r in reports[0].results]
    else:
        found["by"] = by
        found["slices"] = [
            {"slice": r.scope.slice_label, "gates": [g.as_dict() for g in r.results]} for r in reports
        ]
        found["failing_slices"] = failing_slices(reports)
    regression = None
    if comparisons is not None and outcome.baseline is not None:
        regression = {
            "baseline": outcome.baseline.describe(window),
            "comparisons": [c.as_dict() for c in comparisons],
        }
    return found | {"regression": regression}
