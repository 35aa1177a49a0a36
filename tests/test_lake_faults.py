"""The lake's catalog going down and coming back under a running replica: exports are refused with
a retryable status while PostgreSQL is down, `/healthz/ready` says why, the replica finds the
catalog again by itself, and every acknowledged span is in the lake."""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.helpers import metric, post_otlp, sql, trace_request, wait_for
from tests.postgres import PostgresServer
from tests.test_ducklake import Replica

PROTOBUF = "application/x-protobuf"


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    yield server
    server.stop()


def export(replica: Replica, spans: int = 10) -> tuple[int, list[str]]:
    now = time.time_ns()
    built = [
        Span(
            trace_id=secrets.token_bytes(16),
            span_id=secrets.token_bytes(8),
            name="rag-query",
            start_time_unix_nano=now,
            end_time_unix_nano=now + 1_000_000,
        )
        for _ in range(spans)
    ]
    body = trace_request(built, "lake-faults", "tests").SerializeToString()
    try:
        status = post_otlp(replica.http_url, body, PROTOBUF, timeout=30).status_code
    except httpx.TimeoutException:
        status = 0
    return status, [s.span_id.hex() for s in built]


def readiness(replica: Replica) -> httpx.Response:
    return httpx.get(f"{replica.http_url}/healthz/ready", timeout=10)


def test_the_catalog_down_and_back(postgres: PostgresServer, tmp_path: Path) -> None:
    lake: dict[str, Any] = {
        "backend": "ducklake",
        "catalog": postgres.create_database(f"lake_{uuid.uuid4().hex[:10]}"),
        "data_path": f"{tmp_path}/lake/",
    }
    replica = Replica("r1", lake, tmp_path).start()
    acked: list[str] = []
    refused: list[str] = []
    try:
        status, span_ids = export(replica)
        assert status == 200
        acked += span_ids

        postgres.pause()
        try:
            status, span_ids = export(replica)
            assert status == 503, status
            refused += span_ids
            answer = wait_for(lambda: readiness(replica), lambda r: r.status_code == 503, what="not ready")
            assert "catalog" in answer.json()["store"], answer.json()
            assert metric(replica.http_url, "ragpulse_store_writable") == 0
        finally:
            postgres.resume()

        wait_for(lambda: readiness(replica).status_code, lambda s: s == 200, timeout=60, what="ready again")
        status, span_ids = export(replica)
        assert status == 200
        acked += span_ids
        stored = {r["span_id"] for r in sql(replica.http_url, "SELECT span_id FROM spans")}
        assert set(acked) <= stored
        assert not set(refused) & stored
    finally:
        replica.stop()
    log = replica.log.read_text()
    assert log.count("THE STORE CANNOT WRITE") == 1, log
    assert "the store writes again" in log
    assert "Traceback" not in log, log
