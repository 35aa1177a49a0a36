"""Monitoring's reads: the score counts gates and alerts weigh, the two windows a regression
compares, a probe's latest finished run."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from collector.schema.scope import Scope
from collector.schema.windows import Window
from collector.store.reads.predicates import scope_sql, sql_string, window_sql


def counts_sql(window: Window, scope: Scope, names: Iterable[str] | None = None) -> str:
    """Counts per score name over the window and scope, from `score_aggregates` (a row per minute,
    service, name, probe and slice, so a day is about 1,440 rows per name and slice, whatever the
    traffic)."""
    where = [window_sql(window), scope_sql(scope)]
    if names is not None:
        where.append("name IN (" + ", ".join(sql_string(n) for n in sorted(set(names))) + ")")
    return (
        "SELECT name, sum(n) AS n, sum(n_pass) AS n_pass, sum(n_fail) AS n_fail, "
        "sum(n_error) AS n_error, sum(n_skipped) AS n_skipped, "
        "coalesce(sum(sum), 0) AS total, coalesce(sum(sum_sq), 0) AS total_sq "
        "FROM score_aggregates WHERE " + " AND ".join(where) + " GROUP BY name ORDER BY name"
    )


def _version_traces(version: str, negate: bool = False) -> str:
    """Trace ids whose root span's resource has (or, negated, has not) this `service.version`."""
    compare = "IS DISTINCT FROM" if negate else "="
    return (
        # The stored rows, not the `spans` view: a copy of a root names the same trace, and the
        # view's search for copies would cost more than the question.
        "SELECT DISTINCT trace_id FROM received_spans WHERE parent_span_id IS NULL AND "
        f"json_extract_string(resource_attributes, '$.\"service.version\"') {compare} {sql_string(version)}"
    )


def comparison_sql(
    recent: Window,
    scope: Scope,
    names: Sequence[str] | None,
    shift: float | None = None,
    version: str | None = None,
    recent_version: str | None = None,
) -> str:
    """Per (service, score name): both windows' counts, pass counts, value sums, and the recent
    values' rank sum and tie term in the pooled values (Mann-Whitney). The baseline is the same
    window `shift` seconds earlier, or the traces of service `version` (then the recent side is
    those of `recent_version`, or of every other version, in the window)."""
    if version is not None:
        recent_traces = (
            _version_traces(recent_version)
            if recent_version is not None
            else _version_traces(version, negate=True)
        )
        in_recent = f"({window_sql(recent)} AND trace_id IN ({recent_traces}))"
        in_baseline = f"trace_id IN ({_version_traces(version)})"
    else:
        assert shift is not None
        in_recent = window_sql(recent)
        in_baseline = window_sql(recent.before(shift))
    where = [f"({in_recent} OR {in_baseline})", "status <> 'skipped'", scope_sql(scope)]
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


def latest_probe_run_sql(probe: str) -> str:
    """The probe's latest finished run: its cases, answers, errors and traces never seen."""
    return (
        "SELECT run_id, cases, answered, errors, missing_traces FROM probe_runs "
        f"WHERE probe = {sql_string(probe)} AND status = 'done' ORDER BY finished_at DESC LIMIT 1"
    )
