"""The service starts on free ports, answers health checks, and stores what the gRPC SDK sends."""

from __future__ import annotations

import httpx
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.conftest import sql


def test_healthz_and_one_span(service):
    assert httpx.get(f"{service.http_url}/healthz").json() == {"status": "ok"}
    provider = TracerProvider(resource=Resource.create({"service.name": "smoke"}))
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"127.0.0.1:{service.grpc_port}", insecure=True))
    )
    with provider.get_tracer("t").start_as_current_span("hello") as span:
        span.set_attribute("rag.question", "why?")
    provider.shutdown()
    rows = sql(service, "SELECT name, service_name, attributes->>'rag.question' AS q FROM spans")
    assert rows == [{"name": "hello", "service_name": "smoke", "q": "why?"}]
