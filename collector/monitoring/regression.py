"""Regression detection without hand-set thresholds: is a recent window worse than a baseline?

For every (service, score name) with enough scores on both sides, two one-sided tests:
- **values**: Mann-Whitney U on the score values (no assumption on their distribution: scores pile
  up at 0 and 1), the effect being the difference of the means;
- **pass rate**: the two-proportion z-test (Fisher's exact test when a cell is small), the effect
  being the difference of the pass rates (errors count as not passing).

A comparison is a regression when it is significant after Holm's correction over every test of
the run (so the chance of any false alarm in a run is at most `alpha`) **and** the drop is at least
`min_effect`. Both tests are computed in one SQL query over `scores` (values must be ranked, which
aggregates cannot do): ranks come from counts per distinct value, so the query's work grows with
the rows in the two windows, not with their product.

The baseline is the same window shifted back (the previous day, the same hours last week), in
whole minutes and never sharing one with the recent window (`Window.before`), or the traces of a
pinned `service.version` (a good deploy), compared with the window's traces of other versions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from collector.monitoring.stats import holm, mann_whitney_drop_p, proportion_drop_p
from collector.schema.scope import Scope
from collector.schema.windows import Window
from collector.store.reads import Query
from collector.store.reads.monitoring import comparison_sql

Metric = Literal["mean", "pass_rate"]
ComparisonStatus = Literal["regressed", "ok", "insufficient"]


@dataclass(frozen=True)
class Baseline:
    """A shifted window (`shift` seconds earlier) or a pinned `service.version`; with a pinned
    version, the recent side is the window's traces of `recent_version`, or of every other version."""

    shift: float | None = None
    version: str | None = None
    recent_version: str | None = None

    def describe(self, recent: Window) -> str:
        if self.version is not None:
            against = f"service.version {self.recent_version}" if self.recent_version else "other versions"
            return f"service.version {self.version} (the window's {against})"
        assert self.shift is not None
        before = recent.before(self.shift)
        return f"{before.start:%Y-%m-%d %H:%M} to {before.end:%Y-%m-%d %H:%M} UTC"


@dataclass(frozen=True)
class RegressionSettings:
    alpha: float = 0.05
    min_effect: float = 0.05
    min_samples: int = 20


@dataclass
class Comparison:
    service: str | None
    score: str
    metric: Metric
    baseline: float | None
    recent: float | None
    n_baseline: int
    n_recent: int
    p_value: float | None = None
    status: ComparisonStatus = "insufficient"
    slice: str | None = None  # `check --by`: the slice compared (`category=refunds`)

    @property
    def effect(self) -> float | None:
        if self.baseline is None or self.recent is None:
            return None
        return self.recent - self.baseline

    def as_dict(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "score": self.score,
            "metric": self.metric,
            "baseline": self.baseline,
            "recent": self.recent,
            "effect": self.effect,
            "n_baseline": self.n_baseline,
            "n_recent": self.n_recent,
            "p_value": self.p_value,
            "status": self.status,
            "slice": self.slice,
        }


def compare(
    query: Query,
    recent: Window,
    baseline: Baseline,
    scope: Scope,
    settings: RegressionSettings,
    names: Sequence[str] | None = None,
) -> list[Comparison]:
    """Every comparison of the run (per service and score, within the scope), tested and corrected
    (`detect`)."""
    rows = query(
        comparison_sql(recent, scope, names, baseline.shift, baseline.version, baseline.recent_version)
    )
    return detect(rows, settings)


def detect(rows: Sequence[dict[str, Any]], settings: RegressionSettings) -> list[Comparison]:
    """Comparisons from `comparison_sql` rows: the tests, Holm's correction over all of them, and
    the minimum effect."""
    comparisons = []
    for row in rows:
        comparisons.extend(_comparisons(row, settings.min_samples))
    tested = [c for c in comparisons if c.p_value is not None]
    rejected = holm([c.p_value for c in tested if c.p_value is not None], settings.alpha)
    for comparison, significant in zip(tested, rejected, strict=True):
        effect = comparison.effect
        dropped = effect is not None and effect <= -settings.min_effect + 1e-12
        comparison.status = "regressed" if significant and dropped else "ok"
    return comparisons


def _comparisons(row: dict[str, Any], min_samples: int) -> list[Comparison]:
    service, name = row["service_name"], row["name"]
    n_recent, n_base = int(row["n_recent"] or 0), int(row["n_base"] or 0)
    values = Comparison(
        service,
        name,
        "mean",
        row["sum_base"] / n_base if n_base else None,
        row["sum_recent"] / n_recent if n_recent else None,
        n_base,
        n_recent,
    )
    if min(n_recent, n_base) >= min_samples:
        values.p_value = mann_whitney_drop_p(n_recent, n_base, row["rank_sum_recent"], row["tie_term"])
    applied_recent, applied_base = int(row["applied_recent"]), int(row["applied_base"])
    pass_recent, pass_base = int(row["pass_recent"]), int(row["pass_base"])
    rates = Comparison(
        service,
        name,
        "pass_rate",
        pass_base / applied_base if applied_base else None,
        pass_recent / applied_recent if applied_recent else None,
        applied_base,
        applied_recent,
    )
    if min(applied_recent, applied_base) >= min_samples:
        rates.p_value = proportion_drop_p(pass_recent, applied_recent, pass_base, applied_base)
    return [values, rates]
