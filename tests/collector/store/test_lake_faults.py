"""The lake's catalog going down and coming back under a running replica: exports are refused with
a retryable status while PostgreSQL is down, `/healthz/ready` says why, the replica finds the
catalog again by itself, and every acknowledged span is in the lake."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.support.helpers import metric, post_otlp, root_spans_request, sql, wait_for
from tests.support.postgres import PostgresServer
from tests.support.replica import Replica

# Several replicas and PostgreSQL take both cores: one process runs the heavy tests one after another
# (`--dist loadgroup`; tests/collector/store/test_retention.py).
pytestmark = pytest.mark.xdist_group("heavy")

PROTOBUF = "application/x-protobuf"


def export(replica: Replica, spans: int = 10) -> tuple[int, list[str]]:
    request, span_ids = root_spans_request(spans)
    try:
        status = post_otlp(replica.http_url, request.SerializeToString(), PROTOBUF, timeout=30).status_code
    except httpx.TimeoutException:
        status = 0
    return status, span_ids


def readiness(replica: Replica) -> httpx.Response:
    return httpx.get(f"{replica.http_url}/healthz/ready", timeout=10)


def test_the_catalog_down_and_back(postgres: PostgresServer, tmp_path: Path) -> None:
    replica = Replica("r1", postgres.new_lake(tmp_path), tmp_path).start()
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
