"""The HTTP API next to the OTLP/HTTP receiver: health, Prometheus metrics and read-only SQL."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
import pyarrow as pa
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from collector.datasets import DatasetError, cases_table, parse_cases
from collector.processors.assembly.assembler import TraceAssembler
from collector.store.base import ApiStore
from collector.store.sql import ARROW_STREAM, TRUNCATED_HEADER, QueryError, SqlConfig, user_sql
from collector.telemetry import Metrics


class OrjsonResponse(JSONResponse):
    """JSON answers of every API route, encoded with orjson (times, NaN as null)."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def arrow_stream(table: pa.Table) -> pa.Buffer:
    """`table` as an Arrow IPC stream (schema, then its record batches)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


class Api:
    """Routes: GET /healthz (and /healthz/live, /healthz/ready), GET /metrics, POST /api/sql,
    POST /api/cases."""

    def __init__(
        self,
        store: ApiStore,
        metrics: Metrics,
        sql: SqlConfig,
        assembler: TraceAssembler | None = None,
        health: Callable[[], dict[str, object]] | None = None,
        ready: Callable[[], tuple[bool, dict[str, object]]] | None = None,
    ) -> None:
        self._store = store
        self._health = health or (lambda: {"status": "ok"})
        self._ready = ready or (lambda: (True, {"status": "ready"}))
        self._metrics = metrics
        self._sql = sql
        # Turns for user queries (sql.max_concurrent); more wait, in the event loop.
        self._sql_turns = asyncio.Semaphore(sql.max_concurrent)
        self._assembler = assembler

    def routes(self) -> list[Route]:
        return [
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/healthz/live", self.healthz, methods=["GET"]),
            Route("/healthz/ready", self.readyz, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/api/sql", self.sql, methods=["POST"]),
            Route("/api/cases", self.load_cases, methods=["POST"]),
        ]

    async def healthz(self, request: Request) -> Response:
        """Liveness (`/healthz`, `/healthz/live`): 200 while the process serves, whatever the store
        or the judge; the body tells their state."""
        return OrjsonResponse(self._health())

    async def readyz(self, request: Request) -> Response:
        """Readiness (`/healthz/ready`): 200 while exports can be stored, 503 with the reason when
        not (the store cannot write: a full disk, a read-only file system, a lost catalog)."""
        ready, body = self._ready()
        return OrjsonResponse(body, status_code=200 if ready else 503)

    async def metrics(self, request: Request) -> Response:
        return Response(self._metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def sql(self, request: Request) -> Response:
        """One read-only query: a JSON array of row objects, within the `sql:` limits."""
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
        # Waiting for a turn happens here, in the event loop: a queue of queries holds no thread of
        # the pool that the OTLP/HTTP receiver and the dashboard use too.
        try:
            async with asyncio.timeout(self._sql.timeout):
                await self._sql_turns.acquire()
        except TimeoutError:
            return self._error(
                f"{self._sql.max_concurrent} queries are running (sql.max_concurrent); try again later",
                status_code=503,
            )
        arrow = ARROW_STREAM in request.headers.get("accept", "")
        try:
            body, truncated = await run_in_threadpool(self._run, query, max_rows, arrow)
        except QueryError as exc:
            return self._error(str(exc))
        finally:
            self._sql_turns.release()
        self._metrics.sql_queries.labels("ok").inc()
        headers = {TRUNCATED_HEADER: "true"} if truncated else None
        # A view of the answer built while streaming: sent as it is, not copied once more.
        media_type = ARROW_STREAM if arrow else "application/json"
        return Response(memoryview(body), media_type=media_type, headers=headers)

    def _run(self, query: str, max_rows: int, arrow: bool) -> tuple[bytes | bytearray | pa.Buffer, bool]:
        # A user's query: held to sql.max_bytes and sql.memory_limit, its JSON built as it streams,
        # or its Arrow record batches as one IPC stream.
        with user_sql(self._sql, arrow=arrow):
            result = self._store.query(query, max_rows, self._sql.timeout)
        if arrow and result.arrow is not None:
            return arrow_stream(result.arrow), result.truncated
        return result.to_json(), result.truncated

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

    def _error(self, message: str, status_code: int = 400) -> Response:
        self._metrics.sql_queries.labels("error").inc()
        return OrjsonResponse({"error": message}, status_code=status_code)
