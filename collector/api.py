"""The HTTP API next to the OTLP/HTTP receiver: health, Prometheus metrics and read-only SQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from collector.datasets import DatasetError, cases_table, parse_cases
from collector.processors.assembler import TraceAssembler
from collector.sql import TRUNCATED_HEADER, QueryError, SqlConfig
from collector.store.base import Store
from collector.telemetry import Metrics


class OrjsonResponse(JSONResponse):
    """JSON answers of every API route, encoded with orjson (times, NaN as null)."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class Api:
    """Routes: GET /healthz, GET /metrics, POST /api/sql, POST /api/cases."""

    def __init__(
        self,
        store: Store,
        metrics: Metrics,
        sql: SqlConfig,
        assembler: TraceAssembler | None = None,
        health: Callable[[], dict[str, object]] | None = None,
    ) -> None:
        self._store = store
        self._health = health or (lambda: {"status": "ok"})
        self._metrics = metrics
        self._sql = sql
        self._assembler = assembler

    def routes(self) -> list[Route]:
        return [
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/api/sql", self.sql, methods=["POST"]),
            Route("/api/cases", self.load_cases, methods=["POST"]),
        ]

    async def healthz(self, request: Request) -> Response:
        """200 while the service serves; the body adds details (the judge's pre-run check)."""
        return OrjsonResponse(self._health())

    async def metrics(self, request: Request) -> Response:
        return Response(self._metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def sql(self, request: Request) -> Response:
        try:
            payload = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return self._error('body must be JSON: {"query": "SELECT ..."}')
        query = payload.get("query") if isinstance(payload, dict) else None
        if not isinstance(query, str) or not query.strip():
            return self._error('body must be JSON: {"query": "SELECT ..."}')
        max_rows = payload.get("max_rows", self._sql.max_rows)
        if not isinstance(max_rows, int) or max_rows <= 0:
            return self._error("max_rows must be a positive integer")
        max_rows = min(max_rows, self._sql.max_rows)
        try:
            records, truncated = await run_in_threadpool(self._run, query, max_rows)
        except QueryError as exc:
            return self._error(str(exc))
        self._metrics.sql_queries.labels("ok").inc()
        headers = {TRUNCATED_HEADER: "true"} if truncated else None
        return OrjsonResponse(records, headers=headers)

    def _run(self, query: str, max_rows: int) -> tuple[list[dict[str, Any]], bool]:
        result = self._store.query(query, max_rows, self._sql.timeout)
        return result.records(), result.truncated

    async def load_cases(self, request: Request) -> Response:
        """Insert or replace golden cases: body `{"source": "...", "cases": [{id, question, ...}]}`."""
        try:
            payload = orjson.loads(await request.body())
            cases = parse_cases(payload.get("cases"), str(payload.get("source", "api")))
        except (orjson.JSONDecodeError, AttributeError):
            return OrjsonResponse({"error": 'body must be JSON: {"cases": [...]}'}, status_code=400)
        except DatasetError as exc:
            return OrjsonResponse({"error": str(exc)}, status_code=400)
        await run_in_threadpool(self._write_cases, cases_table(cases, str(payload.get("source", "api"))))
        return OrjsonResponse({"loaded": len(cases)})

    def _write_cases(self, table: Any) -> None:
        self._store.write_cases(table)
        if self._assembler is not None:
            self._assembler.refresh_cases()

    def _error(self, message: str) -> Response:
        self._metrics.sql_queries.labels("error").inc()
        return OrjsonResponse({"error": message}, status_code=400)
