"""What the dashboard shows, computed from read-only SQL: the overview, a page of traces, one trace,
regressions, alerts.

`DashboardData` runs over any `rows(sql)` function: the store's read-only query in `serve` (the JSON
API), a database file opened read-only or a running server's `/api/sql` in `ragpulse report`. So the
web page and the report show the same figures, and both see only what SQL sees. Parameters arrive as
strings (a query string) and are validated here; a bad one raises `BadParameter` naming it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from collector.config import Config
from collector.dashboard.charts import bucket_seconds, bucket_starts
from collector.feedback.annotations import ANONYMOUS
from collector.monitoring.regression import Baseline, RegressionSettings, compare
from collector.probes import report as probe_report
from collector.schema.scope import Scope, parse_slices
from collector.schema.windows import Window, check_window, parse_duration, parse_time, utc_now
from collector.store.reads import Query
from collector.store.reads import dashboard as reads
from collector.store.reads import review as review_reads
from collector.store.reads import sessions as session_reads
from collector.store.reads.dashboard import SORT_KEYS, TraceFilter
from collector.store.reads.sessions import SESSION_SORTS, SESSION_STATUSES, SessionFilter
from collector.store.schema_sql import DEFAULT_IDLE_TIMEOUT

# The most traces one page lists.
MAX_PAGE = 500
# The longest session id, service name or user id a request may name.
MAX_KEY_CHARS = 1000
# The review queues (docs/feedback.md), and how near its threshold a value is borderline.
QUEUES = ("random", "contested")
BORDERLINE_MARGIN = 0.1
Params = Mapping[str, str]


class BadParameter(ValueError):
    """A query parameter that cannot be used; the message names it."""


class UnknownSession(LookupError):
    """No session of that id (under that service)."""


@dataclass(frozen=True)
class JudgePrices:
    """What the judge's tokens cost, in US dollars per million tokens (None: unknown, no cost shown)."""

    input_per_million: float | None = None
    output_per_million: float | None = None

    def cost(self, input_tokens: int, output_tokens: int) -> float | None:
        if self.input_per_million is None and self.output_per_million is None:
            return None
        return (
            input_tokens * (self.input_per_million or 0.0) + output_tokens * (self.output_per_million or 0.0)
        ) / 1e6


class DashboardData:
    """The dashboard's answers, each a JSON-ready dict (shapes in docs/api.md)."""

    def __init__(
        self,
        rows: Query,
        prices: JudgePrices | None = None,
        regression: RegressionSettings | None = None,
        dimensions: Sequence[str] = (),
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    ) -> None:
        self._rows = rows
        self._idle_timeout = idle_timeout  # `sessions.idle_timeout`: when a session has ended
        self._dimensions = tuple(dimensions)  # `monitoring.dimensions`: what `by` and `slice` may name
        self._prices = prices or JudgePrices()
        self._regression = regression or RegressionSettings()

    def overview(self, params: Params) -> dict[str, Any]:
        """Per-score summary and trends, traffic and latency, services, judge usage, firing alerts."""
        window = window_of(params)
        scope = scope_of(params, self._dimensions)
        by = _dimension(params, "by", self._dimensions)
        step = bucket_seconds(window)
        (totals,) = self._rows(reads.totals_sql(window, scope))
        (judge,) = self._rows(reads.judge_usage_sql(window, scope))
        judge["cost_usd"] = self._prices.cost(int(judge["input_tokens"]), int(judge["output_tokens"]))
        found = {
            "window": window.describe(),
            "service": scope.service,
            "probe": scope.probe,
            "slice": scope.slice_label,
            "by": by,
            "dimensions": {
                name: [r["value"] for r in self._rows(reads.dimension_values_sql(window, scope, name))]
                for name in self._dimensions
            },
            "bucket_seconds": step,
            "buckets": bucket_starts(window, step),
            "totals": totals,
            "scores": self._rows(reads.score_summary_sql(window, scope)),
            "score_series": self._rows(reads.score_series_sql(window, scope, step)),
            "traffic": self._rows(reads.traffic_series_sql(window, scope, step)),
            "services": self._rows(reads.services_sql(window, scope)),
            "judge": judge,
            "firing_alerts": self._rows(reads.FIRING_ALERTS_SQL),
        }
        if by is not None:
            found["slice_scores"] = self._rows(reads.score_summary_sql(window, scope, by))
            found["slice_series"] = self._rows(reads.score_series_sql(window, scope, step, by))
        return found

    def regressions(self, params: Params) -> dict[str, Any]:
        """Each service's scores in the window against the window just before it (or `baseline`
        earlier), with the tests and thresholds of `ragpulse check --regression`."""
        window = window_of(params)
        # By default the minutes just before the window's (its covered length back); a baseline
        # given is checked against `since` as asked, as `check --baseline` is against `--since`.
        shift = _duration(params, "baseline", window.seconds)
        if shift < _since(params):
            raise BadParameter("baseline: at least the window's length (the two windows must not overlap)")
        baseline = Baseline(shift=shift)
        scope = scope_of(params, self._dimensions)
        comparisons = compare(self._rows, window, baseline, scope, self._regression)
        return {
            "window": window.describe(),
            "baseline": window.before(shift).describe(),
            "comparisons": [c.as_dict() for c in comparisons],
        }

    def traces(self, params: Params) -> dict[str, Any]:
        """One page of traces, filtered and sorted, with the number the filters match."""
        f = trace_filter(params, self._dimensions)
        traces = self._rows(reads.trace_page_sql(f))
        total = _counted(traces) if f.filters_scores else None
        if total is None:  # cheap without a filter on scores, and the only way past the last page
            total = self._rows(reads.trace_count_sql(f))[0]["total"]
        return {
            "window": f.window.describe(),
            "total": total,
            "limit": f.limit,
            "offset": f.offset,
            "traces": traces,
        }

    def trace(self, trace_id: str, annotations: bool = False) -> dict[str, Any] | None:
        """One trace with its spans, steps, documents and scores (and, with `annotations`, people's
        verdicts on them: the dashboard's, not a shared report's); None when it is not assembled."""
        trace_id = trace_id.lower()
        if not (0 < len(trace_id) <= 64 and all(c in "0123456789abcdef" for c in trace_id)):
            raise BadParameter("trace_id: a hex trace id")
        found = self._rows(reads.trace_sql(trace_id))
        if not found:
            return None
        trace = found[0]
        documents = self._rows(reads.documents_sql(trace_id))
        detail: dict[str, Any] = {
            "trace": trace,
            "spans": self._rows(reads.spans_sql(trace_id)),
            "steps": self._rows(reads.steps_sql(trace_id)),
            "documents": mark_expected(documents, trace.get("expected_documents")),
            "scores": self._rows(reads.scores_sql(trace_id)),
        }
        if annotations:
            detail["annotations"] = self._rows(review_reads.trace_annotations_sql(trace_id))
        return detail

    def sessions(self, params: Params) -> dict[str, Any]:
        """One page of sessions (the `sessions` view), filtered and sorted, with the number the
        filters match."""
        f = session_filter(params, self._idle_timeout)
        sessions = self._rows(session_reads.session_page_sql(f))
        total = _counted(sessions)
        if total is None:  # past the last page, or none: counted apart
            total = self._rows(session_reads.session_count_sql(f))[0]["total"]
        return {
            "window": f.window.describe(),
            "total": total,
            "limit": f.limit,
            "offset": f.offset,
            "sessions": sessions,
        }

    def session(self, session_id: str, params: Params) -> dict[str, Any]:
        """One session's row and its turns in order, each with its scores. `service` picks the
        session when its id exists under several services; `UnknownSession` when there is none."""
        if not 0 < len(session_id) <= MAX_KEY_CHARS:
            raise BadParameter(f"session_id: 1 to {MAX_KEY_CHARS} characters")
        service = _key_text("service", params.get("service") or None)
        found = self._rows(session_reads.session_sql(session_id, service, self._idle_timeout))
        if not found:
            under = "" if service is None else f" under service {service}"
            raise UnknownSession(f"no session {session_id}{under}")
        if len(found) > 1:
            services = ", ".join(str(r["service_name"]) for r in found)
            raise BadParameter(f"service: session {session_id} exists under several services ({services})")
        (row,) = found
        service_name = row["service_name"]
        scores: dict[str, list[dict[str, Any]]] = {}
        for score in self._rows(session_reads.turn_scores_sql(session_id, service_name)):
            scores.setdefault(score.pop("trace_id"), []).append(score)
        turns = self._rows(session_reads.turns_sql(session_id, service_name))
        for number, turn in enumerate(turns, 1):
            turn["turn"] = number
            turn["scores"] = scores.get(turn["trace_id"], [])
        return {"session": row, "turns": turns}

    def review(self, params: Params) -> dict[str, Any]:
        """The traces a reviewer labels next for one score, from the `random` or the `contested`
        queue (`store/reads/review.py`), with the score names that can be reviewed in the window."""
        window = window_of(params)
        service = params.get("service") or None
        queue = params.get("queue") or "random"
        if queue not in QUEUES:
            raise BadParameter(f"queue: one of {', '.join(QUEUES)}")
        author = (params.get("author") or ANONYMOUS).strip() or ANONYMOUS
        if len(author) > 200:
            raise BadParameter("author: at most 200 characters")
        limit = _integer(params, "limit", 20, 1, MAX_PAGE)
        names = self._rows(review_reads.reviewable_names_sql(window, service))
        name = params.get("name") or (names[0]["name"] if names else None)
        traces: list[dict[str, Any]] = []
        if name is not None:
            if queue == "random":
                sql = review_reads.random_queue_sql(name, window, service, author, limit)
            else:
                margin = BORDERLINE_MARGIN
                sql = review_reads.contested_queue_sql(name, window, service, author, limit, margin)
            traces = self._rows(sql)
        remaining = int(traces[0]["remaining"]) if traces else 0
        for trace in traces:
            del trace["remaining"]
        return {
            "window": window.describe(),
            "name": name,
            "queue": queue,
            "author": author,
            "names": names,
            "feedback_names": [
                r["name"] for r in self._rows(review_reads.feedback_names_sql(window, service))
            ],
            "remaining": remaining,
            "traces": traces,
        }

    def alerts(self) -> dict[str, Any]:
        """Alert states, their latest events, and judge canary runs."""
        return {
            "alerts": self._rows(reads.ALERTS_SQL),
            "events": self._rows(reads.ALERT_EVENTS_SQL),
            "canary_runs": self._rows(reads.CANARY_RUNS_SQL),
        }

    def probe_runs(self, params: Params) -> dict[str, Any]:
        """Recent probe runs, newest first (`probe`: of one probe; `limit`, default 20)."""
        probe = params.get("probe") or None
        limit = _integer(params, "limit", 20, 1, MAX_PAGE)
        return {"probe": probe, "runs": probe_report.list_runs(self._rows, probe, limit)}

    def probe_run(self, run_id: str, params: Params) -> dict[str, Any]:
        """One probe run and its cases (`latest`: the newest, of `probe` when given); `UnknownRun`
        when there is none."""
        if not 0 < len(run_id) <= 64:
            raise BadParameter("run_id: a probe run id, or latest")
        return probe_report.probe_report(self._rows, run_id, params.get("probe") or None)


def window_of(params: Params) -> Window:
    """The whole minutes covering `[until - since, until)` (`since` default 24h, at least a minute;
    `until` default now): `Window.covering`, the rule `check` and alerts follow too, so the overview,
    the trace list and the regressions count what they do."""
    seconds = _since(params)
    until = params.get("until")
    try:
        end = parse_time(until) if until else utc_now().replace(microsecond=0)
    except ValueError as exc:
        raise BadParameter(f"until: {exc}") from None
    try:
        return Window.covering(end, seconds)
    except OverflowError:
        raise BadParameter("since and until: the window falls outside the calendar") from None


def _since(params: Params) -> float:
    """The window's length asked for, in seconds (at least a minute, as `check --since`)."""
    seconds = _duration(params, "since", 86400.0)
    try:
        return check_window(seconds)
    except ValueError as exc:
        raise BadParameter(f"since: {exc}") from None


def _dimension(params: Params, key: str, dimensions: Sequence[str]) -> str | None:
    name = params.get(key) or None
    if name is not None and name not in dimensions:
        raise BadParameter(f"{key}: not a declared dimension ({', '.join(dimensions) or 'none declared'})")
    return name


def scope_of(params: Params, dimensions: Sequence[str]) -> Scope:
    """The scores and traces a view counts: `service`, `probe` (default: the app's own traffic),
    `slice` (`DIMENSION=VALUE`)."""
    where: dict[str, str | None] = {}
    if params.get("slice"):
        try:
            where = parse_slices([params["slice"]])
        except ValueError as exc:
            raise BadParameter(f"slice: {exc}") from None
        unknown = sorted(set(where) - set(dimensions))
        if unknown:
            raise BadParameter(f"slice: not a declared dimension: {', '.join(unknown)}")
    return Scope.of(params.get("service") or None, params.get("probe") or None, where)


def trace_filter(params: Params, dimensions: Sequence[str] = ()) -> TraceFilter:
    """The trace list's filters, sort and page from the parameters."""
    scope = scope_of(params, dimensions)
    sort = params.get("sort", "start_time")
    if sort not in SORT_KEYS:
        raise BadParameter(f"sort: one of {', '.join(SORT_KEYS)}")
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise BadParameter("order: asc or desc")
    below = _number(params, "below")
    if (below is None) != (not params.get("score")):
        raise BadParameter("score and below go together: score=NAME&below=VALUE")
    return TraceFilter(
        window=window_of(params),
        service=scope.service,
        probe=scope.probe,
        slices=scope.slices,
        status=params.get("status") or None,
        score=params.get("score") or None,
        below=below,
        failing=params.get("failing") or None,
        text=params.get("q") or None,
        sort=sort,
        descending=order == "desc",
        limit=_integer(params, "limit", 50, 1, MAX_PAGE),
        offset=_integer(params, "offset", 0, 0, 10**9),
    )


def _counted(page: list[dict[str, Any]]) -> int | None:
    """The `total` a page's query counted on each of its rows (taken off them); None on an empty
    page, which has no row to carry it."""
    if not page:
        return None
    total = int(page[0]["total"])
    for row in page:
        del row["total"]
    return total


def session_filter(params: Params, idle_timeout: float = DEFAULT_IDLE_TIMEOUT) -> SessionFilter:
    """The session list's filters, sort and page from the parameters."""
    sort = params.get("sort") or "worst"
    if sort not in SESSION_SORTS:
        raise BadParameter(f"sort: one of {', '.join(SESSION_SORTS)}")
    order = params.get("order") or "desc"
    if order not in ("asc", "desc"):
        raise BadParameter("order: asc or desc")
    status = params.get("status") or None
    if status is not None and status not in SESSION_STATUSES:
        raise BadParameter(f"status: one of {', '.join(SESSION_STATUSES)}")
    return SessionFilter(
        window=window_of(params),
        idle_timeout=idle_timeout,
        service=_key_text("service", params.get("service") or None),
        status=status,
        user=_key_text("user", params.get("user") or None),
        sort=sort,
        descending=order == "desc",
        limit=_integer(params, "limit", 50, 1, MAX_PAGE),
        offset=_integer(params, "offset", 0, 0, 10**9),
    )


def _key_text(name: str, value: str | None) -> str | None:
    """A session id, service or user from a request: at most `MAX_KEY_CHARS` characters."""
    if value is not None and len(value) > MAX_KEY_CHARS:
        raise BadParameter(f"{name}: at most {MAX_KEY_CHARS} characters")
    return value


def _duration(params: Params, name: str, default: float) -> float:
    raw = params.get(name)
    if not raw:
        return default
    try:
        return parse_duration(raw)
    except ValueError as exc:
        raise BadParameter(f"{name}: {exc}") from None


def _number(params: Params, name: str) -> float | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise BadParameter(f"{name}: a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise BadParameter(f"{name}: a finite number, got {raw!r}")
    return value


def _integer(params: Params, name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadParameter(f"{name}: an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise BadParameter(f"{name}: between {low} and {high}, got {value}")
    return value


def dashboard_data(rows: Query, config: Config) -> DashboardData:
    """The dashboard over `rows`, with the judge's prices and the regression settings of `config`."""
    judge, monitoring = config.judge, config.monitoring
    return DashboardData(
        rows,
        JudgePrices(judge.input_cost_per_million, judge.output_cost_per_million),
        RegressionSettings(monitoring.alpha, monitoring.min_effect, monitoring.min_samples),
        [d.name for d in monitoring.dimensions],
        config.sessions.idle_timeout,
    )


def mark_expected(documents: list[dict[str, Any]], expected: list[str] | None) -> list[dict[str, Any]]:
    """Each document with `expected`: whether its id is one the trace expected (None: no expectation)."""
    wanted = None if expected is None else set(expected)
    return [{**d, "expected": None if wanted is None else d["doc_id"] in wanted} for d in documents]
