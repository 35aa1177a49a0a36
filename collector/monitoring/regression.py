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

from collector.monitoring.gates import Query
from collector.monitoring.scope import Scope
from collector.monitoring.stats import holm, mann_whitney_drop_p, proportion_drop_p
from collector.monitoring.windows import Window, sql_string

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
        return f"{before.start.isoformat(sep=' ')} to {before.end.isoformat(sep=' ')}"


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


def _version_traces(version: str, negate: bool = False) -> str:
    """Trace ids whose root span's resource has (or, negated, has not) this `service.version`."""
    compare = "IS DISTINCT FROM" if negate else "="
    return (
        # The stored rows, not the `spans` view: a copy of a root names the same trace, and the
        # view's search for copies would cost more than the question.
        "SELECT DISTINCT trace_id FROM received_spans WHERE parent_span_id IS NULL AND "
        f"json_extract_string(resource_attributes, '$.\"service.version\"') {compare} {sql_string(version)}"
    )


def comparison_sql(recent: Window, baseline: Baseline, scope: Scope, names: Sequence[str] | None) -> str:
    """Per (service, score name): both windows' counts, pass counts, value sums, and the recent
    values' rank sum and tie term in the pooled values (Mann-Whitney)."""
    if baseline.version is not None:
        recent_traces = (
            _version_traces(baseline.recent_version)
            if baseline.recent_version is not None
            else _version_traces(baseline.version, negate=True)
        )
        in_recent = f"({recent.sql()} AND trace_id IN ({recent_traces}))"
        in_baseline = f"trace_id IN ({_version_traces(baseline.version)})"
    else:
        assert baseline.shift is not None
        in_recent = recent.sql()
        in_baseline = recent.before(baseline.shift).sql()
    where = [f"({in_recent} OR {in_baseline})", "status <> 'skipped'", scope.sql()]
    if names:
        where.append("name IN (" + ", ".join(sql_string(n) for n in sorted(set(names))) + ")")
    return f"""
WITH v AS (
    SELECT service_name, name, value, status, {in_recent} AS recent FROM scores
    WHERE {" AND ".join(where)}
),
rates AS (
    SELECT service_name, name,
        count(*) FILTER (recent) AS applied_recent, count(*) FILTER (NOT recent) AS applied_base,
        count(*) FILTER (recent AND status = 'pass') AS pass_recent,
        count(*) FILTER (NOT recent AND status = 'pass') AS pass_base
    FROM v GROUP BY ALL
),
tied AS (
    SELECT service_name, name, value,
        count(*) FILTER (recent) AS r, count(*) FILTER (NOT recent) AS b
    FROM v WHERE value IS NOT NULL GROUP BY ALL
),
ranked AS (
    SELECT *, sum(r + b) OVER (
        PARTITION BY service_name, name ORDER BY value ROWS UNBOUNDED PRECEDING) - (r + b) AS below
    FROM tied
),
ranks AS (
    SELECT service_name, name, sum(r) AS n_recent, sum(b) AS n_base,
        sum(r * (below + (r + b + 1) / 2.0)) AS rank_sum_recent,
        sum(CAST(r + b AS DOUBLE) ** 3 - (r + b)) AS tie_term,
        sum(r * value) AS sum_recent, sum(b * value) AS sum_base
    FROM ranked GROUP BY ALL
)
SELECT * FROM rates LEFT JOIN ranks USING (service_name, name) ORDER BY service_name, name
"""


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
    rows = query(comparison_sql(recent, baseline, scope, names))
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
