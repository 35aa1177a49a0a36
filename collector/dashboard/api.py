"""The dashboard's read-only JSON API (GET only; documented in docs/api.md):

- `GET /api/overview?since=24h&until=&service=`: per-score summary and trends, traffic and latency,
  services, judge usage, firing alerts;
- `GET /api/regressions?since=&until=&service=&baseline=`: scores against the window before;
- `GET /api/traces?since=&until=&service=&status=&score=&below=&failing=&q=&sort=&order=&limit=&offset=`:
  one page of traces, filtered and sorted on the server, with the total;
- `GET /api/traces/{trace_id}`: one trace with its spans, steps, documents, scores and people's
  verdicts on them;
- `GET /api/sessions?since=&until=&service=&status=&user=&sort=&order=&limit=&offset=`: one page of
  sessions (docs/sessions.md), worst first by default, with the total;
- `GET /api/sessions/{session_id}?service=`: one session with its turns in order and their scores;
- `GET /api/review?name=&queue=random|contested&since=&service=&author=&limit=`: the traces a
  reviewer labels next for one score (docs/feedback.md, "The review queues");
- `GET /api/alerts`: alert states, their latest events, and judge canary runs;
- `GET /api/probes?probe=&limit=`: recent probe runs, newest first;
- `GET /api/probes/{run_id}`: one probe run (`latest`: the newest, of `?probe=`) with each case's
  result, trace and scores.

Every query goes through the store's read-only SQL guard, like `POST /api/sql`: the API sees the
data SQL sees and can change none of it. A bad parameter is a 400 with `{"error": ...}`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from collector.api import OrjsonResponse
from collector.dashboard.data import BadParameter, DashboardData, Params, UnknownSession
from collector.probes.report import UnknownRun
from collector.store.sql import QueryError

Answer = tuple[dict[str, Any], int]


class DashboardApi:
    def __init__(self, data: DashboardData) -> None:
        self._data = data

    def routes(self) -> list[Route]:
        return [
            Route("/api/overview", self._endpoint(self._overview), methods=["GET"]),
            Route("/api/regressions", self._endpoint(self._regressions), methods=["GET"]),
            Route("/api/traces", self._endpoint(self._traces), methods=["GET"]),
            Route("/api/traces/{trace_id}", self._endpoint(self._trace), methods=["GET"]),
            Route("/api/sessions", self._endpoint(self._sessions), methods=["GET"]),
            # `path`: a session id may hold a slash (the app chooses its ids).
            Route("/api/sessions/{session_id:path}", self._endpoint(self._session), methods=["GET"]),
            Route("/api/review", self._endpoint(self._review), methods=["GET"]),
            Route("/api/alerts", self._endpoint(self._alerts), methods=["GET"]),
            Route("/api/probes", self._endpoint(self._probes), methods=["GET"]),
            Route("/api/probes/{run_id}", self._endpoint(self._probe_run), methods=["GET"]),
        ]

    def _endpoint(self, handler: Callable[[Request], Answer]) -> Callable[[Request], Any]:
        async def answer(request: Request) -> Response:
            if any("\x00" in value for value in request.query_params.values()):
                return OrjsonResponse({"error": "a parameter holds a NUL character"}, status_code=400)
            try:
                body, status = await run_in_threadpool(handler, request)
            except BadParameter as exc:
                return OrjsonResponse({"error": str(exc)}, status_code=400)
            except QueryError as exc:
                return OrjsonResponse({"error": str(exc)}, status_code=500)
            return OrjsonResponse(body, status_code=status)

        return answer

    def _overview(self, request: Request) -> Answer:
        return self._data.overview(_params(request)), 200

    def _regressions(self, request: Request) -> Answer:
        return self._data.regressions(_params(request)), 200

    def _traces(self, request: Request) -> Answer:
        return self._data.traces(_params(request)), 200

    def _trace(self, request: Request) -> Answer:
        trace_id = request.path_params["trace_id"]
        found = self._data.trace(trace_id, annotations=True)
        if found is None:
            return {"error": f"no assembled trace {trace_id.lower()}"}, 404
        return found, 200

    def _sessions(self, request: Request) -> Answer:
        return self._data.sessions(_params(request)), 200

    def _session(self, request: Request) -> Answer:
        try:
            return self._data.session(request.path_params["session_id"], _params(request)), 200
        except UnknownSession as exc:
            return {"error": str(exc)}, 404

    def _review(self, request: Request) -> Answer:
        return self._data.review(_params(request)), 200

    def _alerts(self, request: Request) -> Answer:
        return self._data.alerts(), 200

    def _probes(self, request: Request) -> Answer:
        return self._data.probe_runs(_params(request)), 200

    def _probe_run(self, request: Request) -> Answer:
        run_id = request.path_params["run_id"]
        try:
            return self._data.probe_run(run_id, _params(request)), 200
        except UnknownRun as exc:
            return {"error": str(exc)}, 404


def _params(request: Request) -> Params:
    return request.query_params
