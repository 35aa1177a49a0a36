"""OTLP/HTTP receiver: `POST /v1/traces` and `POST /v1/logs` with protobuf or OTLP/JSON bodies,
gzip or deflate. Both go through the same checks; `/v1/logs` keeps the span events it carries.

Follows the OTLP/HTTP spec: the response is encoded like the request; an undecodable body is 400
with a google.rpc.Status; an oversized one 413; an unsupported media type 415; a store that is
behind 503 with Retry-After, which standard exporters honour.
"""

from __future__ import annotations

import functools
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from collector.otlp.json_request import UndecodableBody, parse_json_logs_request, parse_json_request
from collector.pipeline import ExportOutcome, IngestPipeline, Overloaded, Stopped
from collector.receivers.config import ReceiversConfig
from collector.receivers.responses import logs_response, trace_response
from collector.receivers.retry import http_retry_after
from collector.store.health import first_line, store_error_reason
from collector.telemetry import Metrics

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_PROTOBUF_TYPES = {PROTOBUF, "application/protobuf"}


class BodyTooLarge(ValueError):
    pass


class UnsupportedEncoding(ValueError):
    pass


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refusing (without reading it all) anything over `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body of {declared} bytes exceeds the {limit} byte limit")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body exceeds the {limit} byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """Undo Content-Encoding; stops at `limit` decompressed bytes, so a gzip bomb costs nothing."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        wbits = 16 + zlib.MAX_WBITS
    elif encoding == "deflate":
        wbits = zlib.MAX_WBITS if body[:1] == b"\x78" else -zlib.MAX_WBITS
    else:
        raise UnsupportedEncoding(f"unsupported Content-Encoding {encoding!r} (use gzip or deflate)")
    decompressor = zlib.decompressobj(wbits)
    try:
        data = decompressor.decompress(body, limit + 1)
    except zlib.error as exc:
        raise UndecodableBody(f"body is not valid {encoding}: {exc}") from None
    if len(data) > limit or decompressor.unconsumed_tail:
        raise BodyTooLarge(f"decompressed body exceeds the {limit} byte limit")
    if not decompressor.eof:
        raise UndecodableBody(f"body is not valid {encoding}: the compressed stream is truncated")
    return data


def _encode(message: Message, as_json: bool) -> tuple[bytes, str]:
    if as_json:
        return json_format.MessageToJson(message, indent=None).encode(), JSON
    return message.SerializeToString(), PROTOBUF


def status_response(
    http_status: int, code: int, message: str, as_json: bool, headers: dict[str, str] | None = None
) -> Response:
    """An OTLP/HTTP error: a google.rpc.Status in the request's encoding."""
    body, media_type = _encode(status_pb2.Status(code=code, message=message), as_json)
    return Response(body, status_code=http_status, media_type=media_type, headers=headers)


@dataclass(frozen=True)
class _Signal:
    """What differs between `/v1/traces` and `/v1/logs`: the messages and the pipeline entry."""

    request_type: Any  # the generated protobuf request class (FromString)
    parse_json: Callable[[bytes], Any]
    export: Callable[[Any, str, int, list[str]], Awaitable[ExportOutcome]]
    response: Callable[[ExportOutcome], Message]


class OtlpHttpReceiver:
    """The `/v1/traces` and `/v1/logs` routes; mounted in the service's one HTTP app next to the API."""

    PROTOCOL_PROTOBUF = "http/protobuf"
    PROTOCOL_JSON = "http/json"

    def __init__(self, config: ReceiversConfig, pipeline: IngestPipeline, metrics: Metrics) -> None:
        self._config = config
        self._pipeline = pipeline
        self._metrics = metrics
        self._traces = _Signal(ExportTraceServiceRequest, parse_json_request, pipeline.export, trace_response)
        self._logs = _Signal(
            ExportLogsServiceRequest, parse_json_logs_request, pipeline.export_logs, logs_response
        )

    def routes(self) -> list[Route]:
        return [
            Route("/v1/traces", self.export, methods=["POST"]),
            Route("/v1/logs", self.export_logs, methods=["POST"]),
        ]

    async def export(self, request: Request) -> Response:
        """`POST /v1/traces`."""
        return await self._export(request, self._traces)

    async def export_logs(self, request: Request) -> Response:
        """`POST /v1/logs`: the span events among the records are stored, the rest ignored."""
        return await self._export(request, self._logs)

    async def _export(self, request: Request, signal: _Signal) -> Response:
        started = time.perf_counter()
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        as_json = media_type == JSON
        # One label per encoding, whatever the outcome; an unknown media type counts as protobuf,
        # OTLP/HTTP's default encoding.
        protocol = self.PROTOCOL_JSON if as_json else self.PROTOCOL_PROTOBUF
        refuse = functools.partial(self._refuse, protocol)
        if media_type not in _PROTOBUF_TYPES and not as_json:
            return refuse(
                415,
                code_pb2.INVALID_ARGUMENT,
                f"unsupported Content-Type {media_type or '(none)'!r}; use {PROTOBUF} or {JSON}",
                as_json=True,
                outcome="unsupported",
            )
        limit = self._config.max_request_bytes
        try:
            body = await read_body(request, limit)
            body = decompress(body, request.headers.get("content-encoding", ""), limit)
            if as_json:
                # json_format is pure Python: parse off the event loop so other requests keep flowing.
                parsed = await run_in_threadpool(signal.parse_json, body)
                message, rejected, errors = parsed.request, parsed.rejected, parsed.errors
            else:
                message, rejected, errors = signal.request_type.FromString(body), 0, []
        except BodyTooLarge as exc:
            return refuse(413, code_pb2.RESOURCE_EXHAUSTED, str(exc), as_json, "too_large")
        except UnsupportedEncoding as exc:
            return refuse(415, code_pb2.INVALID_ARGUMENT, str(exc), as_json, "unsupported")
        except UndecodableBody as exc:
            return refuse(400, code_pb2.INVALID_ARGUMENT, str(exc), as_json, "invalid")
        except DecodeError as exc:
            return refuse(
                400,
                code_pb2.INVALID_ARGUMENT,
                f"body is not a valid protobuf {signal.request_type.__name__}: {exc}",
                as_json,
                "invalid",
            )
        try:
            outcome = await signal.export(message, protocol, rejected, errors)
        except (Overloaded, Stopped) as exc:
            return refuse(
                503,
                code_pb2.UNAVAILABLE,
                str(exc),
                as_json,
                "retry",
                {"Retry-After": http_retry_after(self._config.retry_after)},
            )
        except Exception as exc:  # store failure: nothing acknowledged, the client may retry
            return refuse(
                503,
                code_pb2.UNAVAILABLE,
                f"the store cannot write: {store_error_reason(exc) or first_line(exc)}",
                as_json,
                "error",
                {"Retry-After": http_retry_after(self._config.retry_after)},
            )
        self._metrics.requests.labels(protocol, "partial" if outcome.rejected else "ok").inc()
        self._metrics.export_seconds.labels(protocol).observe(time.perf_counter() - started)
        body, media_type = _encode(signal.response(outcome), as_json)
        return Response(body, status_code=200, media_type=media_type)

    def _refuse(
        self,
        protocol: str,
        http_status: int,
        code: int,
        message: str,
        as_json: bool,
        outcome: str,
        headers: dict[str, str] | None = None,
    ) -> Response:
        self._metrics.requests.labels(protocol, outcome).inc()
        return status_response(http_status, code, message, as_json, headers)
