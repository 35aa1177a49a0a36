"""Quality gates over stored scores: `faithfulness >= 0.9` on the mean, `>= 0.95` on the pass rate,
`<= 0.05` on the error rate, over a time window, from `score_aggregates`.

What each figure counts (scores' statuses: pass, fail, error, skipped):
- the **mean** is over scores with a value (pass and fail: an error or a skipped score has none);
- the **pass rate** and the **error rate** are over scores that applied (all but `skipped`): an
  error never passes, so a judge outage lowers the pass rate instead of hiding behind it.

A gate needs `min_samples` scores behind its figure; with fewer it is `insufficient`, not a pass.
A gate holds when its observed figure meets the threshold; the confidence interval is reported
beside it to show how firm the figure is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from collector.monitoring.stats import Interval, mean_interval, wilson_interval
from collector.schema.scope import Scope
from collector.schema.windows import Window
from collector.store.reads import Query
from collector.store.reads.monitoring import counts_sql
from collector.store.reads.slices import slice_values

GateKind = Literal["min", "min_pass_rate", "max_error_rate"]
GateStatus = Literal["pass", "fail", "insufficient"]
# Float noise only: a mean of exactly the threshold holds.
TOLERANCE = 1e-9

_KIND_LABELS = {"min": "mean", "min_pass_rate": "pass rate", "max_error_rate": "error rate"}


@dataclass(frozen=True)
class Gate:
    kind: GateKind
    score: str | None  # None: every score together (error rate only)
    threshold: float

    @classmethod
    def parse(cls, kind: GateKind, text: str) -> Gate:
        """`name=0.9`, or for the error rate also a bare `0.05` (every score together)."""
        name, sep, raw = text.rpartition("=")
        if not sep and kind != "max_error_rate":
            raise ValueError(f"expected NAME=VALUE, got {text!r}")
        try:
            threshold = float(raw)
        except ValueError:
            raise ValueError(f"not a number in {text!r}") from None
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"a threshold is between 0 and 1, got {text!r}")
        if sep and not name.strip():
            raise ValueError(f"a score name is missing in {text!r}")
        return cls(kind, name.strip() or None, threshold)

    @property
    def figure(self) -> str:
        return _KIND_LABELS[self.kind]

    def describe(self) -> str:
        operator = "<=" if self.kind == "max_error_rate" else ">="
        return f"{self.score or 'all scores'} {self.figure} {operator} {self.threshold:g}"


@dataclass
class Counts:
    """Score counts and value sums of one score name over a window (summed `score_aggregates`)."""

    n: int = 0
    n_pass: int = 0
    n_fail: int = 0
    n_error: int = 0
    n_skipped: int = 0
    total: float = 0.0
    total_sq: float = 0.0

    @property
    def with_value(self) -> int:
        return self.n_pass + self.n_fail

    @property
    def applied(self) -> int:
        return self.n - self.n_skipped

    def add(self, other: Counts) -> None:
        for name in ("n", "n_pass", "n_fail", "n_error", "n_skipped", "total", "total_sq"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class GateResult:
    gate: Gate
    status: GateStatus
    value: float | None
    n: int
    interval: Interval | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "gate": self.gate.describe(),
            "kind": self.gate.kind,
            "score": self.gate.score,
            "threshold": self.gate.threshold,
            "status": self.status,
            "value": self.value,
            "n": self.n,
            "ci_low": None if self.interval is None else self.interval.low,
            "ci_high": None if self.interval is None else self.interval.high,
            "reason": self.reason,
        }


@dataclass
class GateReport:
    window: Window
    scope: Scope
    results: list[GateResult] = field(default_factory=list)


def read_counts(
    query: Query, window: Window, scope: Scope, names: Iterable[str] | None = None
) -> dict[str, Counts]:
    """Counts per score name over the window and scope."""
    counts = {}
    for row in query(counts_sql(window, scope, names)):
        counts[row["name"]] = Counts(
            int(row["n"]),
            int(row["n_pass"]),
            int(row["n_fail"]),
            int(row["n_error"]),
            int(row["n_skipped"]),
            float(row["total"]),
            float(row["total_sq"]),
        )
    return counts


def evaluate(gate: Gate, counts: dict[str, Counts], min_samples: int, confidence: float = 0.95) -> GateResult:
    """One gate's figure, interval and verdict from the window's counts."""
    if gate.score is None:
        chosen = Counts()
        for each in counts.values():
            chosen.add(each)
    else:
        chosen = counts.get(gate.score, Counts())
    if gate.kind == "min":
        n = chosen.with_value
        value = chosen.total / n if n else None
        interval = mean_interval(n, chosen.total, chosen.total_sq, confidence)
    else:
        n = chosen.applied
        hits = chosen.n_pass if gate.kind == "min_pass_rate" else chosen.n_error
        value = hits / n if n else None
        interval = wilson_interval(hits, n, confidence)
    if value is None or n < min_samples:
        reason = f"{n} score(s) in the window, {min_samples} needed"
        return GateResult(gate, "insufficient", value, n, interval, reason)
    if gate.kind == "max_error_rate":
        holds = value <= gate.threshold + TOLERANCE
    else:
        holds = value >= gate.threshold - TOLERANCE
    return GateResult(gate, "pass" if holds else "fail", value, n, interval)


def check_gates(
    query: Query,
    gates: Sequence[Gate],
    window: Window,
    scope: Scope,
    min_samples: int,
    confidence: float = 0.95,
) -> GateReport:
    """Evaluate every gate over one window and scope (one query)."""
    names = None if any(g.score is None for g in gates) else [g.score for g in gates if g.score]
    counts = read_counts(query, window, scope, names)
    results = [evaluate(gate, counts, min_samples, confidence) for gate in gates]
    return GateReport(window, scope, results)


def check_gates_by(
    query: Query,
    gates: Sequence[Gate],
    window: Window,
    scope: Scope,
    dimension: str,
    min_samples: int,
    confidence: float = 0.95,
) -> list[GateReport]:
    """Every gate over each value the dimension took in the window (a report per slice, most scores
    first; none when the window has no scores)."""
    return [
        check_gates(query, gates, window, scope.with_slice(dimension, value), min_samples, confidence)
        for value in slice_values(query, window, scope, dimension)
    ]
