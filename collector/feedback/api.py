"""People in the loop, over HTTP (docs/feedback.md):

- `POST /api/feedback`: what users (or the app on their behalf) thought of answers. The body is one
  item or a list of them (`items.py`); each is stored as a `feedback` row and, once its trace is
  assembled, as a `scores` row with `evaluator = 'human'`. The answer is `{"stored": n,
  "attached": m, "waiting": n - m}`: the waiting ones are attached when their trace arrives. A
  request is stored whole or not at all: a bad item is a 400 naming its field, a store that cannot
  write a 503. It needs a key with the `ingest` or the `feedback` scope.
- `POST /api/annotations`: a reviewer's verdict on one of ragpulse's scores (`annotations.py`); the
  stored row, or 404 when the trace has no such score. The `annotate` scope.
- `GET /api/agreement?since=30d&until=&service=&sample=random|all`: agreement of each evaluator with
  the verdicts (`agreement.py`). With `feedback=NAME` (e.g. `thumbs`): instead, the AUC of each score
  against the users' feedback of that name given in the window (`agreement.feedback_report`; 400 on
  an empty name). The `read` scope.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from collector.api import OrjsonResponse
from collector.feedback.agreement import SAMPLES, agreement_report, feedback_report
from collector.feedback.annotations import annotation_table, parse_annotation
from collector.feedback.items import FeedbackError, feedback_table, last_of_each_id, parse_feedback
from collector.schema.windows import Window, parse_duration, parse_time, utc_now
from collector.store.base import FeedbackBook, StoreError
from collector.store.health import first_line, store_error_reason
from collector.store.reads import Query
from collector.telemetry import Metrics

DEFAULT_SINCE = "30d"  # agreement's window when none is given


class FeedbackApi:
    """The routes of people in the loop, over the store's `FeedbackBook` and read-only SQL."""

    def __init__(self, store: FeedbackBook, metrics: Metrics, read_rows: Query) -> None:
        self._store = store
        self._metrics = metrics
        self._read_rows = read_rows

    def routes(self) -> list[Route]:
        return [
            Route("/api/feedback", self.feedback, methods=["POST"]),
            Route("/api/annotations", self.annotate, methods=["POST"]),
            Route("/api/agreement", self.agreement, methods=["GET"]),
        ]

    async def feedback(self, request: Request) -> Response:
        """Store feedback items; see the module docstring."""
        try:
            items = parse_feedback(orjson.loads(await request.body()))
        except orjson.JSONDecodeError:
            return self._refuse(
                'the body must be JSON: {"trace_id": ..., "name": ..., "value": ...} or a list'
            )
        except FeedbackError as exc:
            return self._refuse(str(exc))
        rows = last_of_each_id(feedback_table(items, time.time_ns() // 1000))
        try:
            attached = await self._written(self._store.write_feedback, rows)
        except _Unwritable as exc:
            return exc.response
        self._metrics.feedback_items.labels("attached").inc(attached)
        self._metrics.feedback_items.labels("waiting").inc(rows.num_rows - attached)
        return OrjsonResponse(
            {"stored": rows.num_rows, "attached": attached, "waiting": rows.num_rows - attached}
        )

    async def annotate(self, request: Request) -> Response:
        """Store a reviewer's verdict on a score; see the module docstring."""
        try:
            item = parse_annotation(orjson.loads(await request.body()))
        except orjson.JSONDecodeError:
            return _bad('the body must be JSON: {"trace_id": ..., "name": ..., "human_status": "pass"}')
        except FeedbackError as exc:
            return _bad(str(exc))
        try:
            stored = await self._written(
                self._store.write_annotation, annotation_table(item, time.time_ns() // 1000)
            )
        except _Unwritable as exc:
            return exc.response
        if stored is None:
            message = f"trace {item.trace_id} has no score {item.name} of ragpulse's to annotate"
            return OrjsonResponse({"error": message}, status_code=404)
        return OrjsonResponse(stored)

    async def agreement(self, request: Request) -> Response:
        """Agreement of each evaluator with people's verdicts; see the module docstring."""
        params = request.query_params
        sample = params.get("sample", "random")
        if sample not in SAMPLES:
            return _bad(f"sample must be one of {', '.join(SAMPLES)}")
        try:
            end = parse_time(params["until"]) if params.get("until") else utc_now()
            window = Window.ending(end, parse_duration(params.get("since") or DEFAULT_SINCE))
        except (ValueError, OverflowError) as exc:
            return _bad(f"since / until: {exc}")
        service = params.get("service") or None
        if "feedback" in params:
            name = params["feedback"].strip()
            if not name:
                return _bad("feedback: give the name of the feedback (thumbs, rating, ...)")
            found = await run_in_threadpool(feedback_report, self._read_rows, window, service, name)
            return OrjsonResponse(found)
        report = await run_in_threadpool(agreement_report, self._read_rows, window, service, sample)
        return OrjsonResponse(report)

    async def _written(self, write: Callable[[Any], Any], rows: Any) -> Any:
        """`write(rows)` in a thread; a store that cannot write raises `_Unwritable` (a 503)."""
        try:
            return await run_in_threadpool(write, rows)
        except Exception as exc:
            if not (isinstance(exc, StoreError) or self._store.health.absorb(exc, "feedback")):
                raise
            reason = store_error_reason(exc) or first_line(exc)
            message = f"the store cannot write now ({reason}); nothing was stored, send it again"
            raise _Unwritable(OrjsonResponse({"error": message}, status_code=503)) from None

    def _refuse(self, message: str) -> Response:
        self._metrics.feedback_items.labels("refused").inc()
        return _bad(message)


class _Unwritable(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


def _bad(message: str) -> Response:
    return OrjsonResponse({"error": message}, status_code=400)
