"""The dashboard's read-only JSON API (GET only; documented in docs/api.md):

- `GET /api/overview?since=24h&until=&service=`: per-score summary and trends, traffic and latency,
  services, judge usage, firing alerts;
- `GET /api/traces?since=&until=&service=&status=&score=&below=&failing=&q=&sort=&order=&limit=&offset=`:
  one page of traces, filtered and sorted on the server, with the total;
- `GET /api/traces/{trace_id}`: one trace with its spans, steps, documents and scores;
- `GET /api/alerts`: alert states, their latest events, and judge canary runs.

Every query goes through the store's read-only SQL guard, like `POST /api/sql`: the API sees the
data SQL sees and can change none of it. A bad parameter is a 400 with `{"error": ...}`.
"""

from __future__ import annotations

import math
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from collector.api import OrjsonResponse
from collector.dashboard import queries
from collector.dashboard.queries import MAX_PAGE, SORT_KEYS, TraceFilter
from collector.monitoring.windows import Window, parse_duration, parse_time, utc_now
from collector.sql import QueryError, SqlConfig
from collector.store.base import Store


class BadParameter(ValueError):
    """A query parameter that cannot be used; the message names it."""


class DashboardApi:
    def __init__(self, store: Store, sql: SqlConfig) -> None:
        self._store = store
        self._sql = sql

    def routes(self) -> list[Route]:
        return [
            Route("/api/overview", self.overview, methods=["GET"]),
            Route("/api/traces", self.traces, methods=["GET"]),
            Route("/api/traces/{trace_id}", self.trace, methods=["GET"]),
            Route("/api/alerts", self.alerts, methods=["GET"]),
        ]

    # ------------------------------------------------------------------ endpoints

    async def overview(self, request: Request) -> Response:
        return await self._answer(self._overview, request)

    async def traces(self, request: Request) -> Response:
        return await self._answer(self._traces, request)

    async def trace(self, request: Request) -> Response:
        return await self._answer(self._trace, request)

    async def alerts(self, request: Request) -> Response:
        return await self._answer(self._alerts, request)

    async def _answer(self, handler: Any, request: Request) -> Response:
        if any("\x00" in value for value in request.query_params.values()):
            return OrjsonResponse({"error": "a parameter holds a NUL character"}, status_code=400)
        try:
            body, status = await run_in_threadpool(handler, request)
        except BadParameter as exc:
            return OrjsonResponse({"error": str(exc)}, status_code=400)
        except QueryError as exc:
            return OrjsonResponse({"error": str(exc)}, status_code=500)
        return OrjsonResponse(body, status_code=status)

    def _rows(self, sql: str) -> list[dict[str, Any]]:
        return self._store.query(sql, self._sql.max_rows, self._sql.timeout).records()

    def _overview(self, request: Request) -> tuple[dict[str, Any], int]:
        window = _window(request)
        service = request.query_params.get("service") or None
        step = queries.bucket_seconds(window)
        (judge,) = self._rows(queries.judge_usage_sql(window, service))
        return {
            "window": window.describe(),
            "service": service,
            "bucket_seconds": step,
            "scores": self._rows(queries.score_summary_sql(window, service)),
            "score_series": self._rows(queries.score_series_sql(window, service, step)),
            "traffic": self._rows(queries.traffic_series_sql(window, service, step)),
            "services": self._rows(queries.services_sql(window)),
            "judge": judge,
            "firing_alerts": self._rows(queries.FIRING_ALERTS_SQL),
        }, 200

    def _traces(self, request: Request) -> tuple[dict[str, Any], int]:
        params = request.query_params
        sort = params.get("sort", "start_time")
        if sort not in SORT_KEYS:
            raise BadParameter(f"sort: one of {', '.join(SORT_KEYS)}")
        order = params.get("order", "desc")
        if order not in ("asc", "desc"):
            raise BadParameter("order: asc or desc")
        below = _number(params, "below")
        if (below is None) != (not params.get("score")):
            raise BadParameter("score and below go together: score=NAME&below=VALUE")
        f = TraceFilter(
            window=_window(request),
            service=params.get("service") or None,
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
        traces = self._rows(queries.trace_page_sql(f))
        if f.filters_scores and traces:
            total = traces[0]["total"]
            for trace in traces:
                del trace["total"]
        else:  # cheap without a filter on scores, and the only way past the last page
            total = self._rows(queries.trace_count_sql(f))[0]["total"]
        return {
            "window": f.window.describe(),
            "total": total,
            "limit": f.limit,
            "offset": f.offset,
            "traces": traces,
        }, 200

    def _trace(self, request: Request) -> tuple[dict[str, Any], int]:
        trace_id = request.path_params["trace_id"].lower()
        if not (0 < len(trace_id) <= 64 and all(c in "0123456789abcdef" for c in trace_id)):
            raise BadParameter("trace_id: a hex trace id")
        found = self._rows(queries.trace_sql(trace_id))
        if not found:
            return {"error": f"no assembled trace {trace_id}"}, 404
        trace = found[0]
        expected = trace.get("expected_documents")
        scores = self._rows(queries.scores_sql(trace_id))
        return {
            "trace": trace,
            "spans": self._rows(queries.spans_sql(trace_id)),
            "steps": self._rows(queries.steps_sql(trace_id)),
            "documents": queries.mark_expected(self._rows(queries.documents_sql(trace_id)), expected),
            "scores": scores,
        }, 200

    def _alerts(self, request: Request) -> tuple[dict[str, Any], int]:
        return {
            "alerts": self._rows(queries.ALERTS_SQL),
            "events": self._rows(queries.ALERT_EVENTS_SQL),
            "canary_runs": self._rows(queries.CANARY_RUNS_SQL),
        }, 200


def _window(request: Request) -> Window:
    params = request.query_params
    try:
        seconds = parse_duration(params.get("since", "24h"))
    except ValueError as exc:
        raise BadParameter(f"since: {exc}") from None
    until = params.get("until")
    try:
        end = parse_time(until) if until else utc_now()
    except ValueError as exc:
        raise BadParameter(f"until: {exc}") from None
    try:
        return Window.ending(end, seconds)
    except OverflowError:
        raise BadParameter("since and until: the window falls outside the calendar") from None


def _number(params: Any, name: str) -> float | None:
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


def _integer(params: Any, name: str, default: int, low: int, high: int) -> int:
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
