"""The service starts on free ports, answers health checks, and stores what the gRPC SDK sends."""

from __future__ import annotations

import statistics
import time

import httpx

from tests.support.helpers import sdk_tracer_provider, sql


def test_healthz_and_one_span(service):
    healthy = {"status": "ok", "store": {"writable": True}}
    assert httpx.get(f"{service.http_url}/healthz").json() == healthy
    assert httpx.get(f"{service.http_url}/healthz/live").json() == healthy
    assert httpx.get(f"{service.http_url}/healthz/ready").json() == {"status": "ready"}
    provider = sdk_tracer_provider(service, "smoke", transport="grpc")
    with provider.get_tracer("t").start_as_current_span("hello") as span:
        span.set_attribute("rag.question", "why?")
    provider.shutdown()
    rows = sql(service, "SELECT name, service_name, attributes->>'rag.question' AS q FROM spans")
    assert rows == [{"name": "hello", "service_name": "smoke", "q": "why?"}]


def test_kept_alive_http_connection_answers_without_delayed_ack(service):
    """Nagle's algorithm is off on HTTP connections: with it on, each response on a kept-alive
    connection (headers and body written apart) waited for the client's delayed ACK, 40 ms or more."""
    timings = []
    with httpx.Client(base_url=service.http_url) as client:
        client.get("/healthz")  # the connection is open from here
        for _ in range(15):
            started = time.perf_counter()
            assert client.get("/healthz").status_code == 200
            timings.append(time.perf_counter() - started)
    assert statistics.median(timings) < 0.02, timings
