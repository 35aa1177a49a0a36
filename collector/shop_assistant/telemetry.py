"""OpenTelemetry SDK wiring: a TracerProvider exporting over OTLP (gRPC or HTTP/protobuf)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from urllib.parse import urlsplit

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

PROTOCOLS = ("grpc", "http/protobuf")


class CountingExporter(SpanExporter):
    """Wraps an exporter and counts spans acknowledged and refused, so a caller can tell whether
    the collector got everything (the SDK only logs export failures)."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.failed = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
            else:
                self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def otlp_exporter(endpoint: str, protocol: str = "grpc", timeout: float = 10.0) -> SpanExporter:
    """An OTLP span exporter for `endpoint`: `host:port` or a URL. For HTTP, a URL without a path
    gets the standard `/v1/traces`."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        secure = endpoint.startswith("https://")
        return GrpcExporter(endpoint=endpoint, insecure=not secure, timeout=timeout)
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        url = endpoint if "://" in endpoint else f"http://{endpoint}"
        if urlsplit(url).path in ("", "/"):
            url = url.rstrip("/") + "/v1/traces"
        return HttpExporter(endpoint=url, timeout=timeout)
    raise ValueError(f"unknown OTLP protocol {protocol!r}; use one of {', '.join(PROTOCOLS)}")


def tracer_provider(
    exporter: SpanExporter, service_name: str = "shop-assistant", service_version: str = "1.0"
) -> TracerProvider:
    """A provider of its own (not the global one), batching spans to `exporter`; `shutdown()` flushes."""
    resource = Resource.create({"service.name": service_name, "service.version": service_version})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider
