"""OTLP/gRPC receiver on grpc.aio: `opentelemetry.proto.collector.trace.v1.TraceService/Export`, and
`opentelemetry.proto.collector.logs.v1.LogsService/Export` for the span events a log export carries."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Sequence
from typing import TypeVar

import grpc
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from collector.lifecycle import Component, remaining
from collector.pipeline import ExportOutcome, IngestPipeline, Overloaded, Stopped
from collector.receivers.config import ReceiversConfig
from collector.receivers.ports import port_taken
from collector.receivers.responses import logs_response, trace_response
from collector.receivers.retry import grpc_retry_metadata
from collector.store.health import first_line, store_error_reason
from collector.telemetry import Metrics

log = logging.getLogger(__name__)
PROTOCOL = "grpc"


async def _committed(
    export: Awaitable[ExportOutcome],
    context: grpc.aio.ServicerContext,
    metrics: Metrics,
    retry_after: float,
    started: float,
) -> ExportOutcome:
    """Await an export's commit; a full queue or a store failure aborts with UNAVAILABLE + RetryInfo."""
    try:
        outcome = await export
    except (Overloaded, Stopped) as exc:
        metrics.requests.labels(PROTOCOL, "retry").inc()
        await context.abort(
            grpc.StatusCode.UNAVAILABLE,
            str(exc),
            trailing_metadata=grpc_retry_metadata(retry_after, str(exc)),
        )
    except Exception as exc:  # a store failure: nothing was acknowledged, the client may retry
        # The store's health logs it (once, then a summary a minute), not every refused export.
        log.debug("export failed", exc_info=True)
        metrics.requests.labels(PROTOCOL, "error").inc()
        await context.abort(
            grpc.StatusCode.UNAVAILABLE,
            f"the store cannot write: {store_error_reason(exc) or first_line(exc)}",
            trailing_metadata=grpc_retry_metadata(retry_after, str(exc)),
        )
    metrics.requests.labels(PROTOCOL, "partial" if outcome.rejected else "ok").inc()
    metrics.export_seconds.labels(PROTOCOL).observe(time.perf_counter() - started)
    return outcome


_Request = TypeVar("_Request", ExportTraceServiceRequest, ExportLogsServiceRequest)


async def _decode(
    message: type[_Request], raw: bytes, context: grpc.aio.ServicerContext, metrics: Metrics
) -> _Request:
    """Decode here, not in grpc: a bad body is INVALID_ARGUMENT, not UNKNOWN plus a logged traceback."""
    try:
        return message.FromString(raw)
    except DecodeError as exc:
        metrics.requests.labels(PROTOCOL, "invalid").inc()
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT, f"request is not a valid {message.__name__}: {exc}"
        )
        raise  # not reached: abort raises


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, pipeline: IngestPipeline, metrics: Metrics, retry_after: float) -> None:
        self._pipeline = pipeline
        self._metrics = metrics
        self._retry_after = retry_after

    async def Export(
        self, request: ExportTraceServiceRequest, context: grpc.aio.ServicerContext
    ) -> ExportTraceServiceResponse:
        started = time.perf_counter()
        outcome = await _committed(
            self._pipeline.export(request, PROTOCOL), context, self._metrics, self._retry_after, started
        )
        return trace_response(outcome)

    async def export_bytes(self, raw: bytes, context: grpc.aio.ServicerContext) -> ExportTraceServiceResponse:
        request = await _decode(ExportTraceServiceRequest, raw, context, self._metrics)
        return await self.Export(request, context)


class _LogsService:
    """LogsService/Export: the span events among the records are stored, the others ignored."""

    def __init__(self, pipeline: IngestPipeline, metrics: Metrics, retry_after: float) -> None:
        self._pipeline = pipeline
        self._metrics = metrics
        self._retry_after = retry_after

    async def Export(
        self, request: ExportLogsServiceRequest, context: grpc.aio.ServicerContext
    ) -> ExportLogsServiceResponse:
        started = time.perf_counter()
        outcome = await _committed(
            self._pipeline.export_logs(request, PROTOCOL), context, self._metrics, self._retry_after, started
        )
        return logs_response(outcome)

    async def export_bytes(self, raw: bytes, context: grpc.aio.ServicerContext) -> ExportLogsServiceResponse:
        request = await _decode(ExportLogsServiceRequest, raw, context, self._metrics)
        return await self.Export(request, context)


class OtlpGrpcReceiver(Component):
    """The gRPC server; `start()` binds the port (0 picks a free one, see `.port`). With
    `credentials` (from `tls:`) the port speaks TLS only."""

    name = "otlp-grpc"

    def __init__(
        self,
        config: ReceiversConfig,
        pipeline: IngestPipeline,
        metrics: Metrics,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
        credentials: grpc.ServerCredentials | None = None,
    ) -> None:
        self._config = config
        self._credentials = credentials
        self._server = grpc.aio.server(
            interceptors=list(interceptors),
            options=[
                ("grpc.max_receive_message_length", config.max_request_bytes),
                ("grpc.max_send_message_length", 4 * 1024 * 1024),
                # gRPC sets SO_REUSEPORT by default, so a second server would silently share the port.
                ("grpc.so_reuseport", 0),
            ],
        )
        service = _TraceService(pipeline, metrics, config.retry_after)
        export = grpc.unary_unary_rpc_method_handler(
            service.export_bytes,
            request_deserializer=None,
            response_serializer=ExportTraceServiceResponse.SerializeToString,
        )
        logs = _LogsService(pipeline, metrics, config.retry_after)
        export_logs = grpc.unary_unary_rpc_method_handler(
            logs.export_bytes,
            request_deserializer=None,
            response_serializer=ExportLogsServiceResponse.SerializeToString,
        )
        self._server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "opentelemetry.proto.collector.trace.v1.TraceService", {"Export": export}
                ),
                grpc.method_handlers_generic_handler(
                    "opentelemetry.proto.collector.logs.v1.LogsService", {"Export": export_logs}
                ),
            )
        )
        self.port = 0

    async def start(self) -> None:
        address = f"{self._config.host}:{self._config.grpc_port}"
        taken = port_taken(self._config.host, self._config.grpc_port)
        if taken:  # said in one line before gRPC core logs its own bind error to stderr
            raise OSError(f"cannot listen for OTLP/gRPC on {address}: {taken}")
        try:
            if self._credentials is None:
                self.port = self._server.add_insecure_port(address)
            else:
                self.port = self._server.add_secure_port(address, self._credentials)
        except RuntimeError as exc:
            raise OSError(f"cannot listen for OTLP/gRPC on {address}: {exc}") from None
        await self._server.start()

    async def stop(self, deadline: float | None = None) -> None:
        """Stop taking exports; those in progress get 5 s to finish (not past `deadline`)."""
        await self._server.stop(remaining(deadline, 5.0))
