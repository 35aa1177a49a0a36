"""Durability and backpressure: acknowledged spans survive kill -9 and SIGTERM; a slow store pushes back.

The server runs as a real `ragpulse serve` subprocess for the kill tests and as an in-process
BackgroundService (with its real store's `append_spans` slowed down) for the backpressure tests. Clients
are raw gRPC / HTTP and the real OpenTelemetry SDK exporters.
"""

from __future__ import annotations

import itertools
import struct
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import grpc
import httpx
import pyarrow as pa
import pytest
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from collector.server_file import server_file
from collector.service import BackgroundService, Service
from tests.support.helpers import (
    ServeProcess,
    key_values,
    make_config,
    metric,
    run_threads,
    sql,
    trace_request,
    wait_for,
)

BATCH = 200


# --------------------------------------------------------------------------- helpers


def _make_request(
    trace_id: bytes, span_ids: list[bytes], name: str, service_name: str = "durability"
) -> ExportTraceServiceRequest:
    now = time.time_ns()
    spans = [
        Span(
            trace_id=trace_id,
            span_id=span_id,
            name=name,
            kind=Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=now,
            end_time_unix_nano=now + 1_000_000,
            attributes=key_values({"rag.question": "is it stored?"}),
        )
        for span_id in span_ids
    ]
    return trace_request(spans, service_name, "durability-test")


class _IdSource:
    """Globally unique trace and span ids for one test (thread safe)."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    def batch(self, size: int) -> tuple[bytes, list[bytes]]:
        with self._lock:
            first = next(self._counter)
            for _ in range(size):
                last = next(self._counter)
        trace_id = struct.pack(">QQ", 0xD0D0, first)
        return trace_id, [struct.pack(">Q", (1 << 60) | n) for n in range(first + 1, last + 1)]


class _Sender:
    """Threads exporting 200-span requests over gRPC, recording exactly which span ids were acknowledged."""

    def __init__(self, grpc_port: int, threads: int = 4) -> None:
        self._target = f"127.0.0.1:{grpc_port}"
        self._ids = _IdSource()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.acked: list[tuple[str, str, str]] = []  # (trace_id, span_id, name), lowercase hex
        self.failures = 0
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"sender-{i}", daemon=True)
            for i in range(threads)
        ]

    def start(self) -> _Sender:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(20)
        assert not any(t.is_alive() for t in self._threads), "a sender thread hung"

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def _run(self, index: int) -> None:
        name = f"op-{index}"
        channel = grpc.insecure_channel(self._target)
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        while not self._stop.is_set():
            trace_id, span_ids = self._ids.batch(BATCH)
            request = _make_request(trace_id, span_ids, name)
            try:
                response = stub.Export(request, timeout=10)
            except grpc.RpcError:
                with self._lock:
                    self.failures += 1
                # The server may be gone: a fresh channel reconnects at once when it is back.
                channel.close()
                channel = grpc.insecure_channel(self._target)
                stub = trace_service_pb2_grpc.TraceServiceStub(channel)
                self._stop.wait(0.05)
                continue
            assert not response.HasField("partial_success") or response.partial_success.rejected_spans == 0
            rows = [(trace_id.hex(), s.hex(), name) for s in span_ids]
            with self._lock:
                self.acked.extend(rows)
        channel.close()


def _missing_from_file(db: Path, acked: list[tuple[str, str, str]]) -> tuple[int, list[tuple[Any, ...]]]:
    """Acknowledged (trace_id, span_id, name) rows absent from the (closed) database file."""
    table = pa.table(
        {
            "trace_id": [r[0] for r in acked],
            "span_id": [r[1] for r in acked],
            "name": [r[2] for r in acked],
        }
    )
    con = duckdb.connect(str(db), read_only=True)
    try:
        con.register("acked", table)
        missing = con.execute(
            "SELECT a.trace_id, a.span_id, a.name FROM acked a "
            "ANTI JOIN spans s ON s.trace_id = a.trace_id AND s.span_id = a.span_id AND s.name = a.name"
        ).fetchall()
        # The stored rows (`spans` shows each span once whatever was stored): none was written twice.
        dup = con.execute("SELECT count(*) - count(DISTINCT span_id) FROM received_spans").fetchone()
        assert dup == (0,), "a span id was stored twice"
    finally:
        con.close()
    return len(missing), missing[:5]


def _children(pid: int) -> list[int]:
    """Live child processes of `pid` (Linux /proc)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            children.append(int(stat.parent.name))
    return children


# --------------------------------------------------------------------------- kill -9 / SIGTERM


def test_acknowledged_spans_survive_sigkill(server: ServeProcess) -> None:
    server.start()
    sender = _Sender(server.grpc_port).start()
    try:
        acked_before_kills = []
        for _cycle in range(2):
            time.sleep(1.5)
            acked_at_kill = sender.acked_count()
            acked_before_kills.append(acked_at_kill)
            assert server.proc is not None
            workers = _children(server.proc.pid)
            assert workers, "no child processes (mapping worker, resource tracker) to watch"
            server.kill()  # mid-stream: the senders have exports in flight
            # A killed service cannot stop its mapping worker; the worker notices and exits.
            wait_for(
                lambda w=workers: not any(Path(f"/proc/{pid}").exists() for pid in w),
                timeout=10,
                interval=0.02,
                what="workers to exit",
            )
            failures = sender.failures
            wait_for(
                lambda f=failures: sender.failures > f,
                timeout=10,
                interval=0.02,
                what="the senders to notice the dead server",
            )
            server.start()
            # The restarted server on the same file takes new exports again.
            acked_at_restart = sender.acked_count()
            wait_for(
                lambda n=acked_at_restart: sender.acked_count() >= n + 4 * BATCH,
                timeout=10,
                interval=0.02,
                what="exports to be acknowledged after the restart",
            )
    finally:
        sender.stop()

    acked = sender.acked
    assert acked_before_kills[0] >= 3000, f"only {acked_before_kills[0]} spans acknowledged before the kill"
    assert len(acked) >= 6000
    assert sender.failures > 0
    assert len({r[1] for r in acked}) == len(acked)

    # Through the restarted server's API: every acknowledged span is there, each once.
    rows = sql(server, "SELECT count(*) AS n, count(DISTINCT span_id) AS d FROM received_spans")
    assert rows[0]["n"] == rows[0]["d"]
    assert rows[0]["n"] >= len(acked)

    assert server.terminate() == 0
    missing, sample = _missing_from_file(server.db, acked)
    assert missing == 0, f"{missing} acknowledged spans lost after kill -9, e.g. {sample}"


def test_sigterm_drains_and_exits_cleanly(server: ServeProcess) -> None:
    server.start()
    info = server_file(server.db)
    assert info.is_file()
    sender = _Sender(server.grpc_port).start()
    try:
        time.sleep(1.5)
        assert sender.acked_count() >= 2000
        started = time.monotonic()
        code = server.terminate(15)
        elapsed = time.monotonic() - started
    finally:
        sender.stop()
    assert code == 0, server.log.read_text()
    assert elapsed < 15
    assert not info.exists(), f"{info} left behind after a graceful stop"
    assert "Traceback" not in server.log.read_text()

    acked = sender.acked
    server.start()
    rows = sql(server, "SELECT count(*) AS n, count(DISTINCT span_id) AS d FROM received_spans")
    assert rows[0]["n"] == rows[0]["d"] >= len(acked)
    assert server.terminate() == 0
    missing, sample = _missing_from_file(server.db, acked)
    assert missing == 0, f"{missing} acknowledged spans lost after SIGTERM, e.g. {sample}"


# --------------------------------------------------------------------------- backpressure


class _SlowStore:
    """Wraps the real store's `append_spans` so every commit takes `delay` seconds longer."""

    def __init__(self, service: Service, delay: float) -> None:
        assert service.store is not None
        self._store = service.store
        self._original = self._store.append_spans
        self.delay = delay
        self.calls = 0

        def slow_append(spans: pa.Table, events: pa.Table) -> None:
            self.calls += 1
            time.sleep(self.delay)
            self._original(spans, events)

        self._store.append_spans = slow_append  # type: ignore[method-assign]

    def remove(self) -> None:
        self._store.append_spans = self._original  # type: ignore[method-assign]


class _GaugeSampler:
    """Polls /metrics for ragpulse_queue_spans while the service is loaded."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._stop = threading.Event()
        self.samples: list[float] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _GaugeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(metric(self._url, "ragpulse_queue_spans"))
            self._stop.wait(0.01)


def test_slow_store_pushes_back_with_retry_info(tmp_path: Path) -> None:
    max_queue = 500
    config = make_config(tmp_path, store={"max_queue_spans": max_queue}, receivers={"retry_after": 0.2})
    with BackgroundService(config) as svc:
        slow = _SlowStore(svc, 0.3)
        ids = _IdSource()
        lock = threading.Lock()
        grpc_ok: list[str] = []
        grpc_refused: list[grpc.RpcError] = []
        http_ok: list[tuple[str, httpx.Response]] = []
        http_refused: list[httpx.Response] = []
        target = f"127.0.0.1:{svc.grpc_port}"

        def grpc_client(index: int) -> None:
            with grpc.insecure_channel(target) as channel:
                stub = trace_service_pb2_grpc.TraceServiceStub(channel)
                for _ in range(3):
                    trace_id, span_ids = ids.batch(BATCH)
                    try:
                        stub.Export(_make_request(trace_id, span_ids, "grpc-load"), timeout=30)
                    except grpc.RpcError as exc:
                        with lock:
                            grpc_refused.append(exc)
                    else:
                        with lock:
                            grpc_ok.append(trace_id.hex())

        def http_client(index: int) -> None:
            with httpx.Client(timeout=30) as client:
                for _ in range(3):
                    trace_id, span_ids = ids.batch(BATCH)
                    body = _make_request(trace_id, span_ids, "http-load").SerializeToString()
                    response = client.post(
                        f"{svc.http_url}/v1/traces",
                        content=body,
                        headers={"Content-Type": "application/x-protobuf"},
                    )
                    with lock:
                        if response.status_code == 503:
                            http_refused.append(response)
                        else:
                            http_ok.append((trace_id.hex(), response))

        with _GaugeSampler(svc.http_url) as sampler:
            run_threads(8, grpc_client)
            run_threads(8, http_client)
        slow.remove()

        # gRPC: UNAVAILABLE with RetryInfo in both trailing-metadata forms.
        assert grpc_refused, "no gRPC export was refused although the store was slow"
        assert grpc_ok
        for error in grpc_refused:
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error
            assert "store is behind" in error.details()
            metadata = dict(error.trailing_metadata())
            info = error_details_pb2.RetryInfo.FromString(metadata["google.rpc.retryinfo-bin"])
            delay = info.retry_delay.seconds + info.retry_delay.nanos / 1e9
            assert delay == pytest.approx(0.2)
            assert delay > 0
            status = status_pb2.Status.FromString(metadata["grpc-status-details-bin"])
            assert status.code == code_pb2.UNAVAILABLE
            assert "store is behind" in status.message
            assert len(status.details) == 1
            packed = error_details_pb2.RetryInfo()
            assert status.details[0].Unpack(packed)
            assert packed == info

        # HTTP: 503, Retry-After in whole seconds >= 1, a google.rpc.Status body.
        assert http_refused, "no HTTP export was refused although the store was slow"
        assert http_ok
        for response in http_refused:
            assert int(response.headers["retry-after"]) >= 1
            assert response.headers["content-type"].startswith("application/x-protobuf")
            status = status_pb2.Status.FromString(response.content)
            assert status.code == code_pb2.UNAVAILABLE
            assert "store is behind" in status.message
        for _, response in http_ok:
            assert response.status_code == 200, response.text
            parsed = ExportTraceServiceResponse.FromString(response.content)
            assert parsed.partial_success.rejected_spans == 0

        # Every refusal was counted; the queue stayed bounded (and the sampler saw it loaded).
        throttled = metric(svc.http_url, "ragpulse_exports_throttled_total")
        assert throttled == len(grpc_refused) + len(http_refused)
        assert max(sampler.samples) > 0
        assert max(sampler.samples) <= max_queue + BATCH
        wait_for(
            lambda: svc.writer is not None and svc.writer.queued_spans == 0,
            timeout=10,
            interval=0.02,
            what="the queue to drain",
        )
        assert metric(svc.http_url, "ragpulse_queue_spans") == 0

        # Exactly the acknowledged exports are stored; refused ones left nothing behind.
        rows = sql(svc, "SELECT trace_id, name, count(*) AS n FROM spans GROUP BY trace_id, name")
        stored = {(r["trace_id"], r["name"]): r["n"] for r in rows}
        expected = {(t, "grpc-load"): BATCH for t in grpc_ok}
        expected.update({(t, "http-load"): BATCH for t, _ in http_ok})
        assert stored == expected


def _sdk_provider(service_name: str, exporter: Any) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(
        BatchSpanProcessor(
            exporter, max_export_batch_size=BATCH, schedule_delay_millis=50, export_timeout_millis=30_000
        )
    )
    return provider


def test_sdk_exporters_deliver_everything_through_backpressure(tmp_path: Path) -> None:
    # The SDK exporters make 6 attempts. 5 waits x 0.6 s (the gRPC exporter's whole retry budget)
    # outlasts the slowed writer's 12 x 0.2 s worst case; HTTP clients wait Retry-After: 1 each time.
    config = make_config(tmp_path, store={"max_queue_spans": 500}, receivers={"retry_after": 0.6})
    with BackgroundService(config) as svc:
        slow = _SlowStore(svc, 0.2)
        providers = {
            f"sdk-grpc-{i}": _sdk_provider(
                f"sdk-grpc-{i}",
                GrpcSpanExporter(endpoint=f"127.0.0.1:{svc.grpc_port}", insecure=True, timeout=30),
            )
            for i in range(3)
        }
        providers.update(
            {
                f"sdk-http-{i}": _sdk_provider(
                    f"sdk-http-{i}", HttpSpanExporter(endpoint=f"{svc.http_url}/v1/traces", timeout=30)
                )
                for i in range(3)
            }
        )
        per_provider = 400  # 2400 spans in 12 exports of 200
        emitted: dict[str, set[str]] = {name: set() for name in providers}
        flushed: dict[str, bool] = {}
        names = list(providers)

        def emit_and_flush(index: int) -> None:
            name = names[index]
            tracer = providers[name].get_tracer("durability")
            for i in range(per_provider):
                with tracer.start_as_current_span(f"{name}-{i % 7}") as span:
                    span.set_attribute("rag.question", f"q{i}")
                    emitted[name].add(format(span.get_span_context().span_id, "016x"))
            flushed[name] = providers[name].force_flush(timeout_millis=30_000)

        try:
            run_threads(len(providers), emit_and_flush)
            throttled = metric(svc.http_url, "ragpulse_exports_throttled_total")
        finally:
            slow.remove()
            for provider in providers.values():
                provider.shutdown()

        assert flushed == dict.fromkeys(providers, True)
        assert all(len(ids) == per_provider for ids in emitted.values())
        assert throttled > 0, "the slowed writer never pushed back; the test exercised nothing"
        # The stored rows, copies included (`spans` would show each span once anyway).
        rows = sql(svc, "SELECT service_name, span_id, count(*) AS n FROM received_spans GROUP BY ALL")
        assert len(rows) == per_provider * len(providers)
        assert all(r["n"] == 1 for r in rows), "a span was stored twice"
        stored: dict[str, set[str]] = {name: set() for name in providers}
        for r in rows:
            stored[r["service_name"]].add(r["span_id"])
        assert stored == emitted
