"""Forwarder: the exports ragpulse received, untouched (but for redaction when `redaction.apply_to`
holds `export`), to a downstream OTLP backend.

Trace exports go to the traces service (`/v1/traces`), log exports (GenAI events and any other log
records that came with them) to the logs service (`/v1/logs`) of the same endpoint, so a backend
behind ragpulse sees what the app sent.

Forwarding is best effort and never slows ingest: exports go to a bounded queue after their commit,
a background thread sends them, and when the queue is full or the backend refuses, the export is
dropped and counted (`ragpulse_forward_dropped_total`). ragpulse's own store is the durable copy.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

import grpc
import httpx
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collector.exporters.config import OtlpExporterConfig
from collector.lifecycle import Component, remaining
from collector.store.health import first_line
from collector.telemetry import Metrics

log = logging.getLogger(__name__)

Export = ExportTraceServiceRequest | ExportLogsServiceRequest


def _grpc_target(endpoint: str) -> tuple[str, bool]:
    for scheme, secure in (("https://", True), ("http://", False), ("grpc://", False)):
        if endpoint.startswith(scheme):
            return endpoint[len(scheme) :].rstrip("/"), secure
    return endpoint.rstrip("/"), False


def _http_base(endpoint: str) -> str:
    """The endpoint without a signal path: `http://h:4318/v1/traces` and `h:4318` -> `http://h:4318`."""
    if "://" not in endpoint:
        endpoint = "http://" + endpoint
    endpoint = endpoint.rstrip("/")
    return endpoint.removesuffix("/v1/traces").removesuffix("/v1/logs")


class Forwarder(Component):
    """Sends queued trace and log exports to `config.endpoint` over OTLP/gRPC or OTLP/HTTP protobuf."""

    name = "forwarder"

    def __init__(
        self,
        config: OtlpExporterConfig,
        metrics: Metrics,
        max_queue: int,
        redact: Callable[[Export], None] | None = None,
    ) -> None:
        if not config.endpoint:
            raise ValueError("exporters.otlp.endpoint is required to forward spans")
        self._config = config
        self._metrics = metrics
        self._queue: deque[Export] = deque()
        self._max_queue = max_queue
        # `redaction.apply_to: [export]`: applied to each request, in place, on this thread.
        self._redact = redact
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="ragpulse-forwarder", daemon=True)
        self._send = self._grpc_sender() if config.protocol == "grpc" else self._http_sender()

    def start(self) -> None:
        self._thread.start()

    def enqueue(self, request: Export) -> None:
        with self._cond:
            if len(self._queue) >= self._max_queue:
                self._queue.popleft()
                self._metrics.forward_dropped.inc()
            self._queue.append(request)
            self._cond.notify()

    def stop(self, deadline: float | None = None) -> None:
        """Send what is queued (within 10 s, and not past `deadline`), then stop."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(remaining(deadline, 10.0))

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                request = self._queue.popleft()
            try:
                if self._redact is not None:
                    self._redact(request)
                self._send(request)
            except Exception as exc:
                self._metrics.forward_dropped.inc()
                log.warning("forwarding to %s failed: %s", self._config.endpoint, one_line(exc))

    def _grpc_sender(self) -> Callable[[Export], None]:
        target, secure = _grpc_target(self._config.endpoint or "")
        channel = (
            grpc.secure_channel(target, grpc.ssl_channel_credentials())
            if secure
            else grpc.insecure_channel(target)
        )
        traces = trace_service_pb2_grpc.TraceServiceStub(channel)
        logs = logs_service_pb2_grpc.LogsServiceStub(channel)
        metadata = tuple((k.lower(), v) for k, v in self._config.headers.items())

        def send(request: Export) -> None:
            if isinstance(request, ExportLogsServiceRequest):
                logs.Export(request, timeout=self._config.timeout, metadata=metadata)
            else:
                traces.Export(request, timeout=self._config.timeout, metadata=metadata)

        return send

    def _http_sender(self) -> Callable[[Export], None]:
        base = _http_base(self._config.endpoint or "")
        client = httpx.Client(timeout=self._config.timeout)
        headers = {**self._config.headers, "Content-Type": "application/x-protobuf"}

        def send(request: Export) -> None:
            path = "/v1/logs" if isinstance(request, ExportLogsServiceRequest) else "/v1/traces"
            response = client.post(base + path, content=request.SerializeToString(), headers=headers)
            response.raise_for_status()

        return send


def one_line(exc: BaseException) -> str:
    """An export's failure in one line: a gRPC error's status and details (its text spans lines and
    carries the debug string), else the exception's first line."""
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code") and hasattr(exc, "details"):
        return f"{exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {first_line(exc)}" if str(exc).strip() else type(exc).__name__
