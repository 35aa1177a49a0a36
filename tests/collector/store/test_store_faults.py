"""A store that cannot write is visible: a full disk, a file system made read-only and a database
file removed under a running `ragpulse serve` (a real process, its store on a real tmpfs of a few
MB) show in `/healthz/ready`, `/metrics` and a few log lines, refuse exports with a retryable status,
lose nothing acknowledged, and recover by themselves. The state logic (one ERROR line, a summary a
minute, one INFO line) is tested on its own with a clock of the test's."""

from __future__ import annotations

import contextlib
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import duckdb
import httpx
import pytest
import yaml

from collector.otlp.batch import decode_request
from collector.store.disk import wal_replay_message
from collector.store.duckdb_store import DuckDBStore
from collector.store.health import QUIET_SECONDS, SUMMARY_SECONDS, StoreHealth, store_error_reason
from tests.support.helpers import (
    ServeProcess,
    file_rows,
    metric,
    post_otlp,
    root_spans_request,
    run_ragpulse,
    sql,
    wait_for,
)

PROTOBUF = "application/x-protobuf"
# A span's attribute of this many bytes: a few hundred exports fill the file system.
PADDING = 2_000


@contextlib.contextmanager
def tmpfs(path: Path, size_mb: int) -> Iterator[Path]:
    """A tmpfs of `size_mb` MB mounted at `path` (the tests run as root, as CI does)."""
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """Write a ballast file until the file system is full; return it."""
    ballast = directory / "ballast"
    with ballast.open("wb") as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * (1 << 20))
            f.flush()
    return ballast


def export(served: ServeProcess, spans: int = 20) -> tuple[httpx.Response, list[str]]:
    """One export of `spans` root spans of new traces; the response and the span ids sent."""
    request, span_ids = root_spans_request(spans, padding="x" * PADDING)
    return post_otlp(served, request.SerializeToString(), PROTOBUF, timeout=10), span_ids


def ready(served: ServeProcess) -> httpx.Response:
    return httpx.get(f"{served.http_url}/healthz/ready", timeout=5)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", 24) as disk:
        yield disk


def serve_on(disk: Path, tmp_path: Path, **store: object) -> ServeProcess:
    config = tmp_path / "ragpulse.yaml"
    config.write_text(yaml.safe_dump({"store": {"memory_limit": "64MB", **store}}))
    return ServeProcess(disk / "ragpulse.duckdb", tmp_path / "serve.log", config)


def test_a_full_disk_refuses_exports_shows_in_health_and_recovers(small_disk: Path, tmp_path: Path) -> None:
    served = serve_on(small_disk, tmp_path)
    # Traces wait 3 s for late spans: the first ones are assembled while the disk is full, which
    # fails, and taken back from the store once it writes again.
    served.start(decision_wait="3", poll_interval="0.05")
    try:
        acked: list[str] = []
        response, span_ids = export(served)
        assert response.status_code == 200
        acked += span_ids
        first = span_ids
        assert ready(served).json() == {"status": "ready"}
        assert metric(served, "ragpulse_store_writable") == 1

        ballast = fill(small_disk)
        refused: list[str] = []
        for _ in range(5):
            response, span_ids = export(served)
            if response.status_code == 200:  # a commit that still fitted
                acked += span_ids
                continue
            assert response.status_code == 503
            assert response.headers["Retry-After"]
            refused += span_ids
        assert refused, "every export was acknowledged on a full disk"

        answer = ready(served)
        assert answer.status_code == 503
        assert answer.json()["status"] == "not_ready"
        assert answer.json()["store"] == "no space left on device"
        live = httpx.get(f"{served.http_url}/healthz/live", timeout=5)
        assert live.status_code == 200 and live.json()["store"]["writable"] is False
        assert httpx.get(f"{served.http_url}/healthz", timeout=5).status_code == 200
        assert metric(served, "ragpulse_store_writable") == 0
        assert metric(served, "ragpulse_store_write_failures_total", component="span writer") >= 1

        # The first traces' assembly fails on the full disk (their 3 s are up)...
        wait_for(
            lambda: metric(served, "ragpulse_store_write_failures_total", component="assembler"),
            what="an assembly round failing on the full disk",
        )
        ballast.unlink()  # no traffic now: the store's probe finds it writable again by itself
        wait_for(lambda: ready(served).status_code, lambda s: s == 200, timeout=30, what="ready again")
        assert metric(served, "ragpulse_store_writable") == 1
        response, span_ids = export(served)
        assert response.status_code == 200
        acked += span_ids
        roots = ", ".join(f"'{s}'" for s in first)
        assembled = f"SELECT assembly_reason FROM traces WHERE root_span_id IN ({roots})"
        reasons = wait_for(lambda: sql(served, assembled), lambda r: len(r) == len(first), what="recovery")
        assert {r["assembly_reason"] for r in reasons} == {"recovery"}
        assert served.terminate() == 0
    finally:
        served.cleanup()

    log = served.log.read_text()
    assert "whose assembly failed while the store could not write" in log
    assert log.count("THE STORE CANNOT WRITE") == 1, log
    assert log.count("the store writes again") == 1, log
    assert "Traceback" not in log, log
    stored = {r["span_id"] for r in file_rows(served.db, "SELECT span_id FROM spans")}
    assert set(acked) <= stored
    assert not set(refused) & stored


def test_stop_and_start_on_a_full_disk_say_so_in_one_line(tmp_path: Path) -> None:
    # No automatic checkpoint: the write-ahead log grows until it fills the disk, and the last
    # checkpoint at stop cannot be written. Replaying a log larger than DuckDB's memory limit spills
    # to disk (by default the log may reach 256 MB, the memory limit is 128 MB): a start on the full
    # disk with a memory limit below the log's size cannot replay it.
    with tmpfs(tmp_path / "disk", 24) as disk:
        served = serve_on(disk, tmp_path, checkpoint_threshold_mb=1024)
        served.start()
        acked: list[str] = []
        try:
            for _ in range(200):
                response, span_ids = export(served, spans=200)
                if response.status_code != 200:
                    break
                acked += span_ids
            assert response.status_code == 503, "the disk never filled"
            assert served.terminate() == 1
        finally:
            served.cleanup()
        log = served.log.read_text()
        assert "Traceback" not in log, log
        last = log.strip().splitlines()[-1]
        assert last.startswith("Error: ragpulse stopped, but the store could not write its last checkpoint")

        ports = ["--grpc-port", str(served.grpc_port), "--http-port", str(served.http_port)]
        small = tmp_path / "small-memory.yaml"
        small.write_text(yaml.safe_dump({"store": {"memory_limit": "8MB"}}))
        config = ["--config", str(small), "--db", str(served.db)]
        started = run_ragpulse("serve", *config, *ports, cwd=tmp_path, timeout=60)
        assert started.returncode == 1, started.stderr
        assert "Traceback" not in started.stderr
        assert started.stderr.startswith(f"Error: no space left on {disk} to replay the write-ahead log")
        assert "free about" in started.stderr

        # The operator grows the volume: the start replays the log, nothing acknowledged is lost.
        subprocess.run(["mount", "-o", "remount,size=128m", str(disk)], check=True)
        served.start()
        assert served.terminate() == 0
        stored = {r["span_id"] for r in file_rows(served.db, "SELECT span_id FROM spans")}
        assert set(acked) <= stored


def test_database_files_made_read_only_and_back(tmp_path: Path) -> None:
    # Read-only for root too: the immutable attribute (chattr +i, on the ext4 the tests run on).
    served = ServeProcess(tmp_path / "ragpulse.duckdb", tmp_path / "serve.log")
    served.start()
    files = [str(served.db), f"{served.db}.wal"]
    try:
        assert export(served)[0].status_code == 200
        subprocess.run(["chattr", "+i", *files], check=True)
        response, refused = export(served)
        assert response.status_code == 503
        answer = ready(served)
        assert answer.status_code == 503
        assert "operation not permitted" in answer.json()["store"]
        subprocess.run(["chattr", "-i", *files], check=True)
        wait_for(lambda: ready(served).status_code, lambda s: s == 200, timeout=30, what="ready again")
        assert export(served)[0].status_code == 200
        assert served.terminate() == 0
    finally:
        subprocess.run(["chattr", "-i", *files], check=False)
        served.cleanup()
    assert "Traceback" not in served.log.read_text()
    assert not {r["span_id"] for r in file_rows(served.db, "SELECT span_id FROM spans")} & set(refused)


def test_a_database_file_removed_under_the_service_refuses_what_it_would_lose(tmp_path: Path) -> None:
    served = ServeProcess(tmp_path / "ragpulse.duckdb", tmp_path / "serve.log")
    served.start()
    try:
        assert export(served)[0].status_code == 200
        served.db.unlink()
        response, _ = export(served)
        # Acknowledged into a file nobody can open again would be lost: refused, retryable.
        assert response.status_code == 503
        assert "was removed or replaced while ragpulse ran" in response.text
        answer = ready(served)
        assert answer.status_code == 503
        assert "restart ragpulse" in answer.json()["store"]
    finally:
        served.cleanup()


# ---------------------------------------------------------------- the state and its log lines


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_log_gets_one_line_to_start_a_summary_a_minute_and_one_to_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    health = StoreHealth("/data/ragpulse.duckdb", clock=clock)
    full = OSError(28, "No space left on device")
    caplog.set_level(logging.INFO, logger="collector.store.health")
    for _ in range(100):
        health.failed(full, "span writer", spans=400)
        clock.now += 0.3  # 30 s of failing commits
    assert [r.levelname for r in caplog.records] == ["ERROR"]
    assert "THE STORE CANNOT WRITE (/data/ragpulse.duckdb): no space left on device" in caplog.text
    assert health.as_dict()["writable"] is False

    clock.now += SUMMARY_SECONDS
    health.failed(full, "span writer", spans=400)
    assert len(caplog.records) == 2
    assert "101 failed writes, 40400 spans refused in the last minute" in caplog.records[1].getMessage()

    health.succeeded()  # right after a failure: small commits squeeze through on a nearly full disk
    assert not health.writable and len(caplog.records) == 2
    clock.now += QUIET_SECONDS
    health.succeeded()
    assert health.writable and health.reason is None
    assert caplog.records[2].levelname == "INFO"
    assert "101 failed writes, 40400 spans refused" in caplog.records[2].getMessage()


def test_only_storage_failures_are_the_stores_state() -> None:
    health = StoreHealth("lake")
    assert not health.absorb(ValueError("a bug"), "assembler")
    assert health.writable
    assert health.absorb(OSError(30, "Read-only file system"), "assembler")
    assert health.reason == "the file system is read-only"
    assert store_error_reason(RuntimeError('Could not write file "x.wal": No space left on device')) == (
        "no space left on device"
    )
    assert store_error_reason(RuntimeError("IO Error: Unable to connect to Postgres: connection refused"))
    # What the sessions refresher's read got in CI while the catalog was paused (it was logged with
    # a traceback, as a bug would be).
    lost = (
        'Binder Error: Failed to get data file list from DuckLake: Failed to prepare query "SELECT '
        'data_file_id, value_count, min_value\n FROM "public".ducklake_file_column_stats" (no result '
        "returned): no connection to the server"
    )
    assert store_error_reason(RuntimeError(lost)) == "the catalog database cannot be reached"
    # What every thread of the soak's service got at 128MB.
    full = "Out of Memory Error: failed to pin block of size 256.0 KiB (121.8 MiB/122.0 MiB used)"
    assert store_error_reason(RuntimeError(full)) == "DuckDB ran out of its memory (store.memory_limit)"


def test_a_replay_short_of_space_names_what_to_free(tmp_path: Path) -> None:
    db = tmp_path / "ragpulse.duckdb"
    (tmp_path / "ragpulse.duckdb.wal").write_bytes(b"\0" * 1000)
    message = wal_replay_message(db, "IO Error: Could not write file: No space left on device")
    assert message is not None
    assert message.startswith(f"no space left on {tmp_path} to replay the write-ahead log of {db}")
    assert wal_replay_message(db, "Catalog Error: something else") is None


def test_a_transaction_left_aborted_on_the_writers_connection_is_rolled_back(tmp_path: Path) -> None:
    # A write on a full disk whose ROLLBACK failed too left the span writer's connection inside an
    # aborted transaction: every append after the disk was freed failed ("Current transaction is
    # aborted") until the service was restarted (found by bench/soak.py).
    store = DuckDBStore(tmp_path / "s.duckdb")
    try:
        con = store._con
        con.execute("CREATE TEMP TABLE one (a INTEGER PRIMARY KEY)")
        con.execute("INSERT INTO one VALUES (1)")
        con.execute("BEGIN TRANSACTION")
        with pytest.raises(duckdb.ConstraintException):
            con.execute("INSERT INTO one VALUES (1)")
        with pytest.raises(duckdb.TransactionException, match="aborted"):
            con.execute("SELECT 1")
        request, span_ids = root_spans_request(3)
        batch = decode_request(request)
        store.append_spans(batch.spans, batch.events)
        stored = store.query("SELECT count(*) AS n FROM spans", 10, 10).records()
        assert stored == [{"n": 3}]
        assert len(span_ids) == 3
    finally:
        store.close()
