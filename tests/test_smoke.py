"""The service starts on free ports, answers health checks, and stores what the gRPC SDK sends."""

from __future__ import annotations

import httpx

from tests.helpers import sdk_tracer_provider, sql


def test_healthz_and_one_span(service):
    assert httpx.get(f"{service.http_url}/healthz").json() == {"status": "ok"}
    provider = sdk_tracer_provider(service, "smoke", transport="grpc")
    with provider.get_tracer("t").start_as_current_span("hello") as span:
        span.set_attribute("rag.question", "why?")
    provider.shutdown()
    rows = sql(service, "SELECT name, service_name, attributes->>'rag.question' AS q FROM spans")
    assert rows == [{"name": "hello", "service_name": "smoke", "q": "why?"}]
