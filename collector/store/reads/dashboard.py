"""The dashboard's reads (`collector/dashboard/data.py` runs them): the overview, the trace list, one
trace, alerts and canary runs.

Each builder returns one SELECT over the same tables SQL users see; values from the request are
validated or quoted here, never pasted raw.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from collector.schema.scope import Scope, check_dimension
from collector.schema.windows import Window
from collector.store.reads.predicates import scope_sql, sql_string, window_sql
from collector.store.reads.slices import slice_values_sql

SortKey = Literal["start_time", "duration_ms", "worst"]
SORT_KEYS: tuple[SortKey, ...] = ("start_time", "duration_ms", "worst")
# Text shown per trace in the list (the whole text is in the trace view).
PREVIEW_CHARS = 240


# Over summed `score_aggregates` rows: the figures `ragpulse check` gates on (the mean over scores
# with a value, the pass and error rates over scores that applied).
_FIGURES = (
    "sum(sum) / nullif(sum(n_pass) + sum(n_fail), 0) AS mean, "
    "sum(n_pass) / nullif(sum(n) - sum(n_skipped), 0) AS pass_rate, "
    "sum(n_error) / nullif(sum(n) - sum(n_skipped), 0) AS error_rate"
)


def _split(by: str | None) -> str:
    """The column a split by a dimension adds (as `slice`)."""
    return "" if by is None else f'"{check_dimension(by)}" AS slice, '


def score_summary_sql(window: Window, scope: Scope, by: str | None = None) -> str:
    """Per score name (and value of `by`) over the window: counts, mean of values, pass and error rates."""
    return (
        f"SELECT name, {_split(by)}sum(n) AS n, sum(n_pass) AS n_pass, sum(n_fail) AS n_fail, "
        f"sum(n_error) AS n_error, sum(n_skipped) AS n_skipped, {_FIGURES} "
        f"FROM score_aggregates WHERE {window_sql(window)} AND {scope_sql(scope)} "
        f"GROUP BY ALL ORDER BY name{'' if by is None else ', n DESC, slice NULLS LAST'}"
    )


def score_series_sql(window: Window, scope: Scope, step: int, by: str | None = None) -> str:
    """Per chart bucket and score name (and value of `by`): mean, pass rate, error rate, count."""
    return (
        f"SELECT time_bucket(INTERVAL {step} SECOND, bucket) AS t, name, {_split(by)}sum(n) AS n, {_FIGURES} "
        f"FROM score_aggregates WHERE {window_sql(window)} AND {scope_sql(scope)} "
        f"GROUP BY ALL ORDER BY t, name{'' if by is None else ', slice NULLS LAST'}"
    )


def dimension_values_sql(window: Window, scope: Scope, dimension: str) -> str:
    """The values a dimension took in the window (most scores first): the dashboard's choices."""
    return slice_values_sql(window, scope, dimension)


# Over a set of `traces` rows: how many, how many failed, their latency (total, retrieval, generation),
# and their tool calls and failed tool calls (agents).
_TRAFFIC = (
    "count(*) AS traces, count(*) FILTER (status = 'error') AS errors, "
    "quantile_cont(duration_ms, 0.5) AS p50_ms, quantile_cont(duration_ms, 0.95) AS p95_ms, "
    "avg(retrieval_ms) AS retrieval_ms, avg(generation_ms) AS generation_ms, "
    "coalesce(sum(tool_calls), 0) AS tool_calls, coalesce(sum(tool_errors), 0) AS tool_errors"
)


def traffic_series_sql(window: Window, scope: Scope, step: int) -> str:
    """Per chart bucket: traces, errors, and latency (total, retrieval, generation)."""
    return (
        f"SELECT time_bucket(INTERVAL {step} SECOND, start_time) AS t, {_TRAFFIC} "
        f"FROM traces WHERE {window_sql(window, 'start_time')} AND {scope_sql(scope)} "
        "GROUP BY ALL ORDER BY t"
    )


def totals_sql(window: Window, scope: Scope) -> str:
    """The window's traces in the scope together: count, errors, latency."""
    return f"SELECT {_TRAFFIC} FROM traces WHERE {window_sql(window, 'start_time')} AND {scope_sql(scope)}"


def services_sql(window: Window, scope: Scope) -> str:
    """Per service over the window (the scope's probe and slices): traces, errors, latency, tokens."""
    return (
        f"SELECT service_name, {_TRAFFIC}, "
        "sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens "
        f"FROM traces WHERE {window_sql(window, 'start_time')} AND {scope_sql(replace(scope, service=None))} "
        "GROUP BY ALL ORDER BY traces DESC"
    )


def judge_usage_sql(window: Window, scope: Scope) -> str:
    """Judge calls (a judge score each), their errors, tokens and latency over the window."""
    return (
        "SELECT count(*) AS calls, count(*) FILTER (status = 'error') AS errors, "
        "coalesce(sum(judge_input_tokens), 0) AS input_tokens, "
        "coalesce(sum(judge_output_tokens), 0) AS output_tokens, avg(latency_ms) AS mean_latency_ms "
        f"FROM scores WHERE evaluator = 'judge' AND {window_sql(window)} AND {scope_sql(scope)}"
    )


FIRING_ALERTS_SQL = (
    "SELECT alert, service_name, severity, score, condition, value, n, started_at, evaluated_at "
    "FROM alerts WHERE state = 'firing' ORDER BY started_at"
)


@dataclass(frozen=True)
class TraceFilter:
    """The trace list's filters, sort and page."""

    window: Window
    service: str | None = None
    probe: str | None = None  # a probe's traces (None: the app's own)
    slices: tuple[tuple[str, str | None], ...] = ()  # (dimension, value): None, traces without one
    status: str | None = None  # traces.status: ok | error
    score: str | None = None  # with `below`: traces whose score `score` is below the value
    below: float | None = None
    failing: str | None = None  # traces with this score failed or errored
    text: str | None = None  # in the question or the answer, any case
    sort: SortKey = "start_time"
    descending: bool = True
    limit: int = 50
    offset: int = 0

    @property
    def filters_scores(self) -> bool:
        return (self.score is not None and self.below is not None) or self.failing is not None

    def where(self) -> str:
        scores_in_window = f"SELECT trace_id FROM scores WHERE {window_sql(self.window.whole_minutes())}"
        clauses = [window_sql(self.window, "t.start_time")]
        if self.service is not None:
            clauses.append(f"t.service_name = {sql_string(self.service)}")
        # As every view: the app's own traffic, or one probe's (never the two mixed).
        clauses.append("t.probe IS NULL" if self.probe is None else f"t.probe = {sql_string(self.probe)}")
        for dimension, value in self.slices:
            column = f't."{check_dimension(dimension)}"'
            clauses.append(f"{column} IS NULL" if value is None else f"{column} = {sql_string(value)}")
        if self.status is not None:
            clauses.append(f"t.status = {sql_string(self.status)}")
        if self.score is not None and self.below is not None:
            clauses.append(
                f"t.trace_id IN ({scores_in_window} AND name = {sql_string(self.score)} "
                f"AND value < {float(self.below)!r})"
            )
        if self.failing is not None:
            clauses.append(
                f"t.trace_id IN ({scores_in_window} AND name = {sql_string(self.failing)} "
                "AND status IN ('fail', 'error'))"
            )
        if self.text:
            needle = sql_string(self.text.lower())
            clauses.append(f"(contains(lower(t.question), {needle}) OR contains(lower(t.answer), {needle}))")
        return " AND ".join(clauses)


def trace_page_sql(f: TraceFilter) -> str:
    """One page of the filtered traces, with each one's lowest score value (`worst`) and the names
    of its failed or errored scores (by the lowest score: ties broken by the number of failed
    scores, then by trace id). With a filter on scores (`filters_scores`), each row also
    carries `total`, the number of traces the filters match: one pass over the filtered traces gives
    both. Only the page's traces are looked up in `scores`, except when sorting by the lowest score,
    which needs it for every trace in the window."""
    direction = "DESC" if f.descending else "ASC"
    in_window = window_sql(f.window.whole_minutes(), "s.bucket")
    # With a filter on scores, counting apart would run that filter twice: count in the same pass.
    total = "count(*) OVER () AS total, " if f.filters_scores else ""
    columns = (
        f"{total}"
        "t.trace_id, t.service_name, t.start_time, t.duration_ms, t.status, t.convention, "
        f"left(t.question, {PREVIEW_CHARS}) AS question, left(t.answer, {PREVIEW_CHARS}) AS answer, "
        "t.sample_decision, t.judge_status, t.input_tokens, t.output_tokens, t.step_count"
    )
    if f.sort == "worst":
        # Ties on the lowest value (many traces have a 0) go to the trace with more failed scores
        # first when listing worst first, fewer when best first.
        opposite = "ASC" if f.descending else "DESC"
        page = (
            f"SELECT {columns}, w.worst, w.n_failing FROM traces t LEFT JOIN (SELECT s.trace_id, "
            "min(s.value) AS worst, count(*) FILTER (s.status IN ('fail', 'error')) AS n_failing "
            f"FROM scores s WHERE {in_window} GROUP BY s.trace_id) w USING (trace_id) WHERE {f.where()} "
            f"ORDER BY w.worst {direction} NULLS LAST, w.n_failing {opposite} NULLS LAST, t.trace_id"
        )
        order = f"page.worst {direction} NULLS LAST, page.n_failing {opposite} NULLS LAST"
    else:
        page = (
            f"SELECT {columns} FROM traces t WHERE {f.where()} "
            f"ORDER BY t.{f.sort} {direction} NULLS LAST, t.trace_id"
        )
        order = f"page.{f.sort} {direction} NULLS LAST"
    worst = "" if f.sort == "worst" else ", min(s.value) AS worst"
    extra = " EXCLUDE (n_failing)" if f.sort == "worst" else ", per_trace.worst"
    return f"""
WITH page AS ({page} LIMIT {int(f.limit)} OFFSET {int(f.offset)}),
per_trace AS (
    SELECT s.trace_id{worst},
        list(s.name ORDER BY s.name) FILTER (s.status IN ('fail', 'error')) AS failing
    FROM scores s WHERE {in_window} AND s.trace_id IN (SELECT trace_id FROM page)
    GROUP BY s.trace_id
)
SELECT page.*{extra}, coalesce(per_trace.failing, []) AS failing
FROM page LEFT JOIN per_trace USING (trace_id)
ORDER BY {order}, page.trace_id
"""


def trace_count_sql(f: TraceFilter) -> str:
    return f"SELECT count(*) AS total FROM traces t WHERE {f.where()}"


def trace_sql(trace_id: str) -> str:
    return f"SELECT * FROM traces WHERE trace_id = {sql_string(trace_id)}"


def steps_sql(trace_id: str) -> str:
    return (
        "SELECT span_id, parent_span_id, position, kind, name, model, provider, query, input, output, "
        "start_time, end_time, duration_ms, input_tokens, output_tokens, status, tool_name, result_size "
        f"FROM steps WHERE trace_id = {sql_string(trace_id)} ORDER BY position"
    )


def documents_sql(trace_id: str) -> str:
    """The trace's documents in step order (an agent's retrieval rounds as they happened)."""
    return (
        "SELECT d.span_id, d.stage, d.rank, d.doc_id, d.content, d.score FROM documents d "
        "LEFT JOIN steps s ON s.trace_id = d.trace_id AND s.span_id = d.span_id "
        f"WHERE d.trace_id = {sql_string(trace_id)} ORDER BY s.position, d.span_id, d.stage, d.rank"
    )


def scores_sql(trace_id: str) -> str:
    return (
        "SELECT span_id, name, value, status, threshold, label, explanation, items, evaluator, "
        "judge_provider, judge_model, prompt_version, config_hash, judge_input_tokens, judge_output_tokens, "
        "latency_ms, "
        f"created_at FROM scores WHERE trace_id = {sql_string(trace_id)} ORDER BY name"
    )


def spans_sql(trace_id: str) -> str:
    return (
        "SELECT span_id, parent_span_id, name, kind, start_time, end_time, duration_ms, status_code "
        f"FROM spans WHERE trace_id = {sql_string(trace_id)} ORDER BY start_time, span_id"
    )


ALERTS_SQL = "SELECT * FROM alerts ORDER BY state DESC, alert, service_name"
ALERT_EVENTS_SQL = (
    "SELECT time, alert, service_name, state, repeat, severity, score, value, n, message "
    "FROM alert_events ORDER BY time DESC LIMIT 200"
)
CANARY_RUNS_SQL = (
    "SELECT run_id, started_at, finished_at, judge_model, status, pairs, correct, errors, accuracy, "
    "pass_share, shift, verdicts FROM canary_runs ORDER BY started_at DESC LIMIT 100"
)
