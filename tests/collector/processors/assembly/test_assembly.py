"""Trace assembly end to end: spans in over OTLP/HTTP, rows out in `traces`, `steps` and `documents`.

Every test runs the real service on loopback (in-process `BackgroundService`, or a `ragpulse serve`
subprocess for kill -9) with a real DuckDB file. Spans are sent as raw OTLP protobuf requests built
here (exact ids, times and arrival order), or by the real OpenTelemetry SDK exporter. The assertions
read the tables through /api/sql and the assembler's counters on /metrics.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pyarrow as pa
import pytest
from opentelemetry import context as otel_context
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import collector.processors.assembly.claims as claims_module
from collector.otlp.batch import SpanBatch, decode_request, empty_batch
from collector.processors.assembly.assembler import WRITE_JOBS, TraceAssembler
from collector.processors.assembly.ready import ROUND_TRACES
from collector.processors.assembly.workers import mapping_pool, submit_job
from collector.processors.assembly.writing import runs_without_repeats
from collector.processors.config import AssemblerConfig, SamplingConfig
from collector.processors.mapping_job import MAP_CHUNK, MapJob, Scoring, run_map_job
from collector.processors.scoring import ScoringSetup
from collector.schema.trace_rows import TraceTables
from collector.service import BackgroundService, Service
from collector.store.duckdb_store import DuckDBStore
from collector.store.health import QUIET_SECONDS, StoreHealth
from collector.telemetry import Metrics
from semconv import emit
from tests.support.helpers import (
    Served,
    ServeProcess,
    emit_rag_request,
    fast_assembler,
    file_rows,
    key_values,
    make_config,
    metric,
    named_spans_batch,
    post_otlp,
    sdk_tracer_provider,
    sql,
    trace_request,
    wait_for,
)

QUESTION = "What is the refund window?"
ANSWER = "You can get a refund within 30 days."
DOCS = [
    {"id": "refunds", "score": 0.91, "content": "Refunds are accepted within 30 days."},
    {"id": "shipping", "score": 0.55, "content": "Orders ship within 2 days."},
    {"id": "returns", "score": 0.42, "content": "Return the item in its box.", "metadata": {"page": 3}},
]


# --------------------------------------------------------------------------- building OTLP requests


@dataclass
class S:
    """One span to send: integer ids (hex-encoded on the wire), times in ms after the trace's base."""

    span_id: int
    parent: int | None
    name: str
    start_ms: float
    end_ms: float
    attrs: dict[str, Any] = field(default_factory=dict)
    error: bool = False
    remote_parent: bool = False  # the parent is in another process (OTLP span flags say so)


def trace_id_of(n: int, tag: int = 0xA55E) -> str:
    """Distinct, ordered trace ids: `n` increases with the id's sort order."""
    return f"{tag:08x}{n:024x}"


def span_hex(n: int) -> str:
    return f"{n:016x}"


def otlp_request(
    trace_id: str, spans: list[S], base_ns: int, service_name: str = "assembly-test"
) -> ExportTraceServiceRequest:
    """One export of `spans`, all of trace `trace_id`."""
    tid = bytes.fromhex(trace_id)
    built = []
    for s in spans:
        span = Span(
            trace_id=tid,
            span_id=bytes.fromhex(span_hex(s.span_id)),
            name=s.name,
            kind=Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=base_ns + int(s.start_ms * 1_000_000),
            end_time_unix_nano=base_ns + int(s.end_ms * 1_000_000),
            attributes=key_values(s.attrs),
        )
        if s.parent is not None:
            span.parent_span_id = bytes.fromhex(span_hex(s.parent))
        if s.error:
            span.status.code = Status.STATUS_CODE_ERROR
        if s.remote_parent:
            span.flags = 0x300  # SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK | SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
        built.append(span)
    return trace_request(built, service_name, "assembly-test")


def post(url: str, request: ExportTraceServiceRequest) -> None:
    """POST one protobuf export and require it fully accepted (so it is committed: acknowledged)."""
    response = post_otlp(url, request.SerializeToString(), "application/x-protobuf")
    assert response.status_code == 200, response.text
    body = ExportTraceServiceResponse.FromString(response.content)
    assert body.partial_success.rejected_spans == 0, body.partial_success.error_message


def send(url: str, trace_id: str, spans: list[S], base_ns: int | None = None) -> None:
    post(url, otlp_request(trace_id, spans, time.time_ns() if base_ns is None else base_ns))


def rag_spans(question: str = QUESTION, tokens: tuple[int, int] = (100, 20)) -> list[S]:
    """A small ragpulse-convention request: root, retrieval with three documents, one chat."""
    messages = [{"role": "user", "parts": [{"type": "text", "content": question}]}]
    output = [{"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]}]
    return [
        S(
            1,
            None,
            "rag.request",
            0,
            50,
            {"rag.step": "chain", "rag.question": question, "rag.answer": ANSWER},
        ),
        S(
            2,
            1,
            "retrieval kb",
            1,
            10,
            {
                "gen_ai.operation.name": "retrieval",
                "gen_ai.retrieval.query.text": question,
                "gen_ai.retrieval.documents": json.dumps(DOCS),
            },
        ),
        S(
            3,
            1,
            "chat gpt-4o-mini",
            11,
            49,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.input.messages": json.dumps(messages),
                "gen_ai.output.messages": json.dumps(output),
                "gen_ai.usage.input_tokens": tokens[0],
                "gen_ai.usage.output_tokens": tokens[1],
            },
        ),
    ]


def late_llm_span(span_id: int = 6, tokens: tuple[int, int] = (7, 3)) -> S:
    return S(
        span_id,
        1,
        "chat follow-up",
        60,
        70,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.input_tokens": tokens[0],
            "gen_ai.usage.output_tokens": tokens[1],
        },
    )


# --------------------------------------------------------------------------- reading results


def traces_rows(svc: Served | str, where: str = "true") -> list[dict[str, Any]]:
    return sql(svc, f"SELECT * FROM traces WHERE {where} ORDER BY trace_id")


def count(svc: Served | str, q: str) -> int:
    return int(sql(svc, q)[0]["n"])


def wait_traces(svc: Served | str, n: int, where: str = "true", timeout: float = 15) -> list[dict[str, Any]]:
    return wait_for(
        lambda: traces_rows(svc, where),
        lambda rows: len(rows) >= n,
        timeout=timeout,
        what=f"{n} traces row(s) ({where})",
    )


def assembled(url: str, reason: str) -> float:
    return metric(url, "ragpulse_traces_assembled_total", reason=reason)


def in_flight(url: str) -> float:
    return metric(url, "ragpulse_traces_in_flight")


# --------------------------------------------------------------------------- when a trace is assembled


def test_trace_waits_for_its_root_then_for_decision_wait(tmp_path: Path) -> None:
    wait = 0.5
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler(decision_wait=wait))) as svc:
        tid = trace_id_of(1)
        spans = rag_spans()
        base = time.time_ns()
        send(svc.http_url, tid, [spans[1]], base)
        send(svc.http_url, tid, [spans[2]], base)
        assert count(svc, f"SELECT count(*) AS n FROM spans WHERE trace_id = '{tid}'") == 2
        time.sleep(3 * wait)  # far past decision_wait: without the root the trace still waits
        assert traces_rows(svc) == []
        assert in_flight(svc.http_url) == 1

        send(svc.http_url, tid, [spans[0]], base)
        (row,) = wait_traces(svc, 1)
        assert row["trace_id"] == tid
        assert row["root_span_id"] == span_hex(1)
        assert row["span_count"] == 3
        assert (row["assembly_reason"], row["assembly_count"]) == ("complete", 1)
        assert row["question"] == QUESTION and row["answer"] == ANSWER
        # Assembled no earlier than decision_wait after the last span was received.
        (gap,) = sql(
            svc,
            "SELECT epoch_us(assembled_at) - epoch_us(last_received_at) AS us, "
            "epoch_us(last_received_at) = (SELECT max(epoch_us(received_at)) FROM spans) AS last_is_max "
            "FROM traces",
        )
        assert gap["last_is_max"] is True
        assert gap["us"] >= wait * 1_000_000
        assert assembled(svc.http_url, "complete") == 1
        assert (
            wait_for(lambda: in_flight(svc.http_url), lambda v: v == 0, what="in-flight gauge back to 0") == 0
        )


@pytest.mark.parametrize(("batch_wait", "writes"), [(1.0, 1), (0, 3)])
def test_traces_complete_at_a_low_rate_share_a_write_within_batch_wait(
    tmp_path: Path, batch_wait: float, writes: int
) -> None:
    # Three traces complete 0.2 s apart: within batch_wait they wait for each other and are mapped
    # and written together (one job: one assembled_at); without it each round writes its own.
    wait = 0.3
    config = make_config(tmp_path, assembler=fast_assembler(decision_wait=wait, batch_wait=batch_wait))
    with BackgroundService(config) as svc:
        for n in range(3):
            send(svc.http_url, trace_id_of(n), rag_spans())
            time.sleep(0.2)
        wait_traces(svc, 3)
        (row,) = sql(
            svc,
            "SELECT count(DISTINCT assembled_at) AS writes, "
            "max(epoch_us(assembled_at) - epoch_us(last_received_at)) / 1e6 AS longest FROM traces",
        )
        assert row["writes"] == writes
        assert wait + batch_wait - 0.45 <= row["longest"] <= wait + batch_wait + 1.0


def test_in_flight_gauge_is_exact_right_after_an_assembly(tmp_path: Path) -> None:
    # A long poll interval keeps the gauge value of the round that assembled the trace visible for
    # a second: it must say 0 traces waiting, not a negative count.
    cfg = make_config(tmp_path, assembler=fast_assembler(poll_interval=1.0))
    with BackgroundService(cfg) as svc:
        send(svc.http_url, trace_id_of(1), rag_spans())
        wait_traces(svc, 1)
        assert in_flight(svc.http_url) == 0


def _nested_trace() -> list[S]:
    """root -> pipeline chain -> (retrieval, llm wrapper -> llm client span): five spans, four steps."""
    messages = [{"role": "user", "parts": [{"type": "text", "content": QUESTION}]}]
    output = [{"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]}]
    llm = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.output_tokens": 20,
    }
    return [
        S(1, None, "rag.request", 0, 60, {"rag.step": "chain", "rag.question": QUESTION}),
        S(2, 1, "pipeline", 1, 59, {"rag.step": "chain"}),
        S(
            3,
            2,
            "retrieval kb",
            2,
            10,
            {
                "gen_ai.operation.name": "retrieval",
                "gen_ai.retrieval.query.text": QUESTION,
                "gen_ai.retrieval.documents": json.dumps(DOCS),
            },
        ),
        S(4, 2, "generate", 11, 58, {**llm, "gen_ai.input.messages": json.dumps(messages)}),
        S(5, 4, "chat gpt-4o-mini", 12, 57, {**llm, "gen_ai.output.messages": json.dumps(output)}),
    ]


def _rows_without_ids(svc: Service, tid: str) -> dict[str, list[dict[str, Any]]]:
    traces = sql(
        svc,
        "SELECT * EXCLUDE (trace_id, assembled_at, last_received_at, scored_at) "
        f"FROM traces WHERE trace_id = '{tid}'",
    )
    steps = sql(svc, f"SELECT * EXCLUDE (trace_id) FROM steps WHERE trace_id = '{tid}' ORDER BY position")
    documents = sql(
        svc,
        f"SELECT * EXCLUDE (trace_id) FROM documents WHERE trace_id = '{tid}' ORDER BY span_id, stage, rank",
    )
    return {"traces": traces, "steps": steps, "documents": documents}


def test_out_of_order_exports_give_the_same_rows_as_in_order(tmp_path: Path) -> None:
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler(decision_wait=0.5))) as svc:
        spans = {s.span_id: s for s in _nested_trace()}
        base = time.time_ns()
        in_order, shuffled = trace_id_of(1), trace_id_of(2)
        for span_id in (1, 2, 3, 4, 5):  # parents before children, one export each
            send(svc.http_url, in_order, [spans[span_id]], base)
        for group in ([5], [3], [1], [2, 4]):  # leaves first, the root before its direct child
            send(svc.http_url, shuffled, [spans[i] for i in group], base)
        wait_traces(svc, 2)

        expected = _rows_without_ids(svc, in_order)
        (trace,) = expected["traces"]
        assert (trace["span_count"], trace["step_count"], trace["assembly_count"]) == (5, 4, 1)
        assert (trace["input_tokens"], trace["output_tokens"]) == (100, 20)  # inner span not counted twice
        assert [s["kind"] for s in expected["steps"]] == ["chain", "chain", "retrieval", "llm"]
        assert sorted(expected["steps"][3]["span_ids"]) == [span_hex(4), span_hex(5)]
        assert [d["doc_id"] for d in expected["documents"]] == ["refunds", "shipping", "returns"]
        assert _rows_without_ids(svc, shuffled) == expected


def test_spans_past_the_memory_bound_wait_on_disk_and_their_files_go_once_assembled(tmp_path: Path) -> None:
    # max_held_spans 1: only the first one-span export is kept in memory, the other four spans wait
    # in files of the spill directory, and the trace is the same as when all is held.
    held = make_config(tmp_path / "held", assembler=fast_assembler(decision_wait=0.5))
    spilled = make_config(tmp_path / "spilled", assembler=fast_assembler(decision_wait=0.5, max_held_spans=1))
    spill = Path(f"{spilled.store.path}.spill")
    rows, files_waiting = [], []
    base = time.time_ns()
    for config in (held, spilled):
        Path(config.store.path).parent.mkdir()
        with BackgroundService(config) as svc:
            spans = {s.span_id: s for s in _nested_trace()}
            for group in ([5], [3], [1], [2, 4]):
                send(svc.http_url, trace_id_of(7), [spans[i] for i in group], base)
            if config is spilled:
                files_waiting = sorted(p.name for p in spill.iterdir())
            wait_traces(svc, 1)
            rows.append(_rows_without_ids(svc, trace_id_of(7)))
            on_disk = metric(svc, "ragpulse_assembly_spill_file_spans_total")
            from_store = metric(svc, "ragpulse_assembly_spilled_spans_total")
            left = sorted(p.name for p in Path(f"{config.store.path}.spill").iterdir())
        assert (on_disk, from_store, left) == ((4, 0, []) if config is spilled else (0, 0, []))
    assert rows[0] == rows[1]
    assert rows[0]["traces"][0]["span_count"] == 5
    assert files_waiting and all(name.endswith(".spans.arrow") for name in files_waiting)
    assert not spill.exists()  # removed at stop


def test_a_full_assembly_backlog_refuses_exports_with_a_retryable_status(tmp_path: Path) -> None:
    config = make_config(tmp_path, assembler=fast_assembler(decision_wait=60, max_backlog=2))
    with BackgroundService(config) as svc:
        send(svc.http_url, trace_id_of(1), rag_spans())
        send(svc.http_url, trace_id_of(2), rag_spans())
        wait_for(lambda: in_flight(svc.http_url), lambda n: n == 2, what="two traces waiting")
        request = otlp_request(trace_id_of(3), rag_spans(), time.time_ns())
        refused = post_otlp(svc.http_url, request.SerializeToString(), "application/x-protobuf")
        stored = count(svc, f"SELECT count(*) AS n FROM spans WHERE trace_id = '{trace_id_of(3)}'")
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert stored == 0


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="threads have their own priority on Linux only"
)
def test_the_assembler_thread_yields_the_cpu_to_the_receivers(tmp_path: Path) -> None:
    """`assembler.thread_nice` lowers the assembler thread's priority, and only that thread's."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler(thread_nice=7))):
        (assembler,) = [t for t in threading.enumerate() if t.name == "ragpulse-assembler"]
        writer = next(t for t in threading.enumerate() if t.name == "ragpulse-writer")
        assert assembler.native_id is not None and writer.native_id is not None
        tid = assembler.native_id
        # `thread_nice` is a niceness, not an increment; a process already nicer keeps its own.
        wait_for(lambda: os.getpriority(os.PRIO_PROCESS, tid) == max(base, 7), timeout=5)
        assert os.getpriority(os.PRIO_PROCESS, writer.native_id) == base


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="threads have their own priority on Linux only"
)
def test_mapping_workers_run_at_the_configured_niceness(tmp_path: Path) -> None:
    """`assembler.worker_nice` is the workers' niceness, whatever the niceness of the thread that
    started them (the assembler thread, at `thread_nice`, starts them as jobs come)."""
    assert os.getpriority(os.PRIO_PROCESS, 0) <= 8, "the test needs room below the niceness it sets"
    assembler = fast_assembler(workers=1, thread_nice=8, worker_nice=12)
    with BackgroundService(make_config(tmp_path, assembler=assembler)) as svc:
        send(svc.http_url, trace_id_of(1), rag_spans())
        wait_traces(svc, 1, timeout=30)  # the first job waits for the worker to start
        pool = svc.assembler.worker_pool if svc.assembler else None
        assert pool is not None
        (worker,) = pool._processes
        assert os.getpriority(os.PRIO_PROCESS, worker) == 12


def test_trace_without_root_is_assembled_at_max_wait_from_its_earliest_orphan(tmp_path: Path) -> None:
    max_wait = 1.0
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler(max_wait=max_wait))) as svc:
        tid = trace_id_of(1)
        # Parents 0xaa and 0xbb never arrive; orphan 2 starts before orphan 1; 3 is a child of 1.
        orphans = [
            S(1, 0xAA, "retrieval kb", 5, 20, rag_spans()[1].attrs),
            S(2, 0xBB, "pipeline", 2, 30, {"rag.step": "chain", "rag.question": QUESTION}),
            S(3, 1, "inner", 6, 19, {"rag.step": "chain"}),
        ]
        base = time.time_ns()
        send(svc.http_url, tid, orphans[:2], base)
        send(svc.http_url, tid, orphans[2:], base)
        (row,) = wait_traces(svc, 1, timeout=max_wait + 10)
        assert row["root_span_id"] == span_hex(2)
        assert (row["assembly_reason"], row["span_count"]) == ("max_wait", 3)
        assert row["question"] == QUESTION
        (gap,) = sql(
            svc,
            "SELECT epoch_us(t.assembled_at) - (SELECT min(epoch_us(received_at)) FROM spans) AS us "
            "FROM traces t",
        )
        assert gap["us"] >= max_wait * 1_000_000
        assert assembled(svc.http_url, "max_wait") == 1
        assert assembled(svc.http_url, "complete") == 0


def test_a_trace_entered_from_another_process_completes_after_decision_wait(tmp_path: Path) -> None:
    # The app behind a traced gateway that reports elsewhere: its request span's parent is remote
    # (the real SDK, given a W3C traceparent, says so in the span flags). That entry span stands in
    # for the root, which never comes here: the trace is complete decision_wait after its last
    # span, not at max_wait.
    max_wait = 30.0
    config = make_config(tmp_path, assembler=fast_assembler(max_wait=max_wait))
    with BackgroundService(config) as svc:
        provider = sdk_tracer_provider(svc, "rag-app")
        gateway_trace, gateway_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
        carrier = {"traceparent": f"00-{gateway_trace}-{gateway_span}-01"}
        token = otel_context.attach(TraceContextTextMapPropagator().extract(carrier))
        try:
            emit_rag_request(provider.get_tracer("app"), QUESTION, DOCS[0]["content"], ANSWER)
        finally:
            otel_context.detach(token)
        provider.shutdown()
        started = time.monotonic()
        (row,) = wait_traces(svc, 1, timeout=max_wait / 2)
        assert time.monotonic() - started < max_wait / 2
        assert (row["trace_id"], row["assembly_reason"], row["span_count"]) == (gateway_trace, "complete", 3)
        (entry,) = sql(svc, "SELECT span_id, parent_span_id FROM spans WHERE name = 'rag.request'")
        assert (row["root_span_id"], entry["parent_span_id"]) == (entry["span_id"], gateway_span)
        assert (row["question"], row["answer"]) == (QUESTION, ANSWER)


GATEWAY_ROOT = S(0x10, None, "GET /ask", 0, 60)


def _app_behind_gateway() -> list[S]:
    """rag_spans() as an app behind a gateway: its request span's parent (0x10) is remote."""
    request, *steps = rag_spans()
    return [S(1, 0x10, request.name, 2, 55, request.attrs, remote_parent=True), *steps]


def test_once_a_services_callers_report_here_late_its_traces_wait_for_their_root(tmp_path: Path) -> None:
    # Gateway and app both report here, the gateway slowly: its root comes after the app's entry
    # span stood in for it and the trace was assembled, which re-assembles the trace. From then on
    # the app's traces wait for their root, so that they are not all assembled (and judged) twice;
    # until one reaches max_wait without it (the gateway stopped reporting here).
    wait, max_wait = 0.3, 2.0
    config = make_config(tmp_path, assembler=fast_assembler(decision_wait=wait, max_wait=max_wait))
    with BackgroundService(config) as svc:

        def send_app(tid: str) -> None:
            post(svc.http_url, otlp_request(tid, _app_behind_gateway(), base, service_name="rag-app"))

        def send_root(tid: str) -> None:
            post(svc.http_url, otlp_request(tid, [GATEWAY_ROOT], base, service_name="gateway"))

        def row_of(tid: str) -> tuple[str, int, str, int]:
            (row,) = wait_traces(svc, 1, f"trace_id = '{tid}'", timeout=max_wait + 10)
            return row["assembly_reason"], row["assembly_count"], row["root_span_id"], row["span_count"]

        first, second, third, fourth = (trace_id_of(n) for n in range(1, 5))
        base = time.time_ns()
        send_app(first)
        assert row_of(first) == ("complete", 1, span_hex(1), 3)  # the entry span stood in
        send_root(first)
        wait_for(
            lambda: traces_rows(svc, f"trace_id = '{first}'"),
            lambda rows: [(r["assembly_count"], r["root_span_id"]) for r in rows] == [(2, span_hex(0x10))],
            what="the first trace re-assembled with the gateway's root",
        )

        send_app(second)
        time.sleep(4 * wait)  # far past decision_wait (and short of max_wait): it waits for its root
        assert traces_rows(svc, f"trace_id = '{second}'") == []
        send_root(second)
        assert row_of(second) == ("complete", 1, span_hex(0x10), 4)

        send_app(third)  # its root never comes
        assert row_of(third) == ("max_wait", 1, span_hex(1), 3)
        started = time.monotonic()
        send_app(fourth)  # the entry span stands in again
        assert row_of(fourth) == ("complete", 1, span_hex(1), 3)
        assert time.monotonic() - started < max_wait
        assert assembled(svc.http_url, "late_span") == 1


def test_a_root_arriving_in_time_leaves_entry_spans_standing_in(tmp_path: Path) -> None:
    # A root that comes before the trace is assembled (ragpulse's own probe span, a quick gateway)
    # re-assembles nothing, so the app's traces without one are still complete after decision_wait.
    max_wait = 30.0
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler(max_wait=max_wait))) as svc:
        first, second = trace_id_of(1), trace_id_of(2)
        base = time.time_ns()
        post(svc.http_url, otlp_request(first, [GATEWAY_ROOT], base, service_name="probe"))
        post(svc.http_url, otlp_request(first, _app_behind_gateway(), base, service_name="rag-app"))
        (row,) = wait_traces(svc, 1, f"trace_id = '{first}'")
        assert (row["assembly_count"], row["root_span_id"], row["span_count"]) == (1, span_hex(0x10), 4)
        post(svc.http_url, otlp_request(second, _app_behind_gateway(), base, service_name="rag-app"))
        (row,) = wait_traces(svc, 1, f"trace_id = '{second}'", timeout=max_wait / 2)
        assert (row["assembly_reason"], row["root_span_id"]) == ("complete", span_hex(1))


def test_a_service_called_within_the_trace_stops_standing_in_for_its_caller(tmp_path: Path) -> None:
    # The app (behind a gateway reporting elsewhere) calls a retriever service; both report here,
    # the retriever first. Its entry span stood in for the first trace's root, so the app's spans
    # came late and re-assembled it. From then on the retriever's entry waits: the next trace is
    # complete after the app's entry span, assembled once.
    wait = 0.3
    call = S(0x30, 1, "POST /search", 3, 20)
    retriever = [S(0x20, 0x30, "search", 4, 19, rag_spans()[1].attrs, remote_parent=True)]
    app = [*_app_behind_gateway()[::2], call]  # the request span, the chat step, the call

    with BackgroundService(make_config(tmp_path, assembler=fast_assembler(decision_wait=wait))) as svc:

        def send_as(service: str, tid: str, spans: list[S]) -> None:
            post(svc.http_url, otlp_request(tid, spans, base, service_name=service))

        def rows_of(tid: str) -> list[tuple[int, str, int]]:
            rows = traces_rows(svc, f"trace_id = '{tid}'")
            return [(r["assembly_count"], r["root_span_id"], r["span_count"]) for r in rows]

        first, second = trace_id_of(1), trace_id_of(2)
        base = time.time_ns()
        send_as("retriever", first, retriever)
        wait_for(lambda: rows_of(first), lambda rows: rows == [(1, span_hex(0x20), 1)], what="stood in")
        send_as("rag-app", first, app)
        wait_for(lambda: rows_of(first), lambda rows: rows == [(2, span_hex(1), 4)], what="re-assembled")

        send_as("retriever", second, retriever)
        time.sleep(4 * wait)
        assert rows_of(second) == []
        send_as("rag-app", second, app)
        (row,) = wait_traces(svc, 1, f"trace_id = '{second}'")
        assert (row["assembly_reason"], row["assembly_count"]) == ("complete", 1)
        assert row["root_span_id"] == span_hex(1)
        assert row["question"] == QUESTION and row["answer"] == ANSWER
        assert assembled(svc.http_url, "late_span") == 1


# --------------------------------------------------------------------------- late spans


def _trace_summary(svc: Service, tid: str) -> dict[str, Any]:
    (row,) = sql(
        svc,
        "SELECT t.assembly_count, t.assembly_reason, t.span_count, t.step_count, t.input_tokens, "
        "t.output_tokens, "
        f"(SELECT count(*) FROM traces WHERE trace_id = '{tid}') AS trace_rows, "
        f"(SELECT count(*) FROM steps WHERE trace_id = '{tid}') AS steps, "
        f"(SELECT count(DISTINCT span_id) FROM steps WHERE trace_id = '{tid}') AS distinct_steps, "
        f"(SELECT count(*) FROM documents WHERE trace_id = '{tid}') AS documents, "
        f"(SELECT sum(input_tokens) FROM steps WHERE trace_id = '{tid}' AND kind = 'llm') AS step_input "
        f"FROM traces t WHERE t.trace_id = '{tid}'",
    )
    return row


def test_late_span_reassembles_the_trace_in_place(tmp_path: Path) -> None:
    # max_wait is short: this test is about the rows a re-assembly writes, not about when it runs
    # (test_late_span_is_reassembled_after_decision_wait).
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler(max_wait=1.0))) as svc:
        tid, other = trace_id_of(1), trace_id_of(2)
        spans = rag_spans()
        base = time.time_ns()
        send(svc.http_url, tid, spans, base)
        wait_traces(svc, 1)
        first = _trace_summary(svc, tid)
        assert first == {
            "assembly_count": 1,
            "assembly_reason": "complete",
            "span_count": 3,
            "step_count": 3,
            "input_tokens": 100,
            "output_tokens": 20,
            "trace_rows": 1,
            "steps": 3,
            "distinct_steps": 3,
            "documents": 3,
            "step_input": 100,
        }

        # A new LLM span of the assembled trace, in the same export as a new trace without its root:
        # both wait max_wait, so one round re-reads the first from the store and takes the second
        # from memory.
        request = otlp_request(tid, [late_llm_span()], base)
        request.resource_spans.extend(otlp_request(other, rag_spans()[1:], base).resource_spans)
        post(svc.http_url, request)
        wait_for(lambda: _trace_summary(svc, tid), lambda r: r["assembly_count"] == 2, what="re-assembly")
        second = _trace_summary(svc, tid)
        assert second == {
            **first,
            "assembly_count": 2,
            "assembly_reason": "late_span",
            "span_count": 4,
            "step_count": 4,
            "input_tokens": 107,
            "output_tokens": 23,
            "steps": 4,
            "distinct_steps": 4,
            "step_input": 107,
        }
        (new_trace,) = wait_traces(svc, 1, f"trace_id = '{other}'")
        assert (new_trace["assembly_reason"], new_trace["span_count"]) == ("max_wait", 2)

        # The retrieval span sent again (an exporter retry): stored twice, shown once, and its trace
        # not assembled again (nothing new came). A trace sent after it is assembled after the
        # assembler took the retry up.
        send(svc.http_url, tid, [spans[1]], base)
        send(svc.http_url, trace_id_of(3), rag_spans(), base)
        wait_traces(svc, 1, f"trace_id = '{trace_id_of(3)}'")
        assert count(svc, f"SELECT count(*) AS n FROM received_spans WHERE trace_id = '{tid}'") == 5
        assert count(svc, f"SELECT count(*) AS n FROM spans WHERE trace_id = '{tid}'") == 4
        assert _trace_summary(svc, tid) == second
        assert assembled(svc.http_url, "late_span") == 1
        assert assembled(svc.http_url, "complete") == 2
        assert assembled(svc.http_url, "max_wait") == 1


def test_late_span_is_reassembled_after_decision_wait(tmp_path: Path) -> None:
    # The root of an assembled trace is already stored, so a late child span completes the trace
    # again as soon as it has been idle decision_wait; max_wait is for traces whose root is missing.
    max_wait = 10.0
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler(max_wait=max_wait))) as svc:
        tid = trace_id_of(1)
        base = time.time_ns()
        send(svc.http_url, tid, rag_spans(), base)
        wait_traces(svc, 1)
        send(svc.http_url, tid, [late_llm_span()], base)
        started = time.monotonic()
        wait_for(
            lambda: _trace_summary(svc, tid),
            lambda r: r["assembly_count"] == 2,
            timeout=max_wait / 2,
            what="re-assembly well before max_wait",
        )
        assert time.monotonic() - started < max_wait / 2
        assert _trace_summary(svc, tid)["assembly_reason"] == "late_span"


def test_late_span_of_a_trace_assembled_before_a_restart_waits_only_decision_wait(tmp_path: Path) -> None:
    # The same after a restart: the store, not this process's memory, says the root arrived.
    max_wait = 10.0
    tid = trace_id_of(1)
    base = time.time_ns()
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        send(svc.http_url, tid, rag_spans(), base)
        wait_traces(svc, 1)
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler(max_wait=max_wait))) as svc:
        send(svc.http_url, tid, [late_llm_span()], base)
        wait_for(
            lambda: _trace_summary(svc, tid),
            lambda r: r["assembly_count"] == 2,
            timeout=max_wait / 2,
            what="re-assembly well before max_wait",
        )
        summary = _trace_summary(svc, tid)
        assert (summary["assembly_reason"], summary["span_count"], summary["trace_rows"]) == (
            "late_span",
            4,
            1,
        )
        assert (summary["input_tokens"], summary["documents"]) == (107, 3)


def test_a_trace_delivered_again_after_a_restart_ends_with_one_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A trace that comes again whole (root included) after a restart is not looked up in the store
    # when it is assembled (that read all of `traces` for every job): it is written as new, and the
    # search for traces assembled twice re-assembles it from every stored span, leaving one row.
    monkeypatch.setattr(claims_module, "RECONCILE_EVERY", 0.5)
    tid = trace_id_of(1)
    base = time.time_ns()
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        send(svc.http_url, tid, rag_spans(), base)
        wait_traces(svc, 1)
        first = sql(svc, f"SELECT name, count(*) AS n FROM scores WHERE trace_id = '{tid}' GROUP BY name")
    assert first
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        send(svc.http_url, tid, rag_spans(), base)
        rows = f"SELECT assembly_count, assembly_reason FROM traces WHERE trace_id = '{tid}'"
        wait_for(
            lambda: sql(svc, rows),
            lambda found: [(r["assembly_count"], r["assembly_reason"]) for r in found] == [(2, "late_span")],
            timeout=15,
            what="one row, re-assembled from the store",
        )
        scores = sql(svc, f"SELECT name, count(*) AS n FROM scores WHERE trace_id = '{tid}' GROUP BY name")
        assert sorted(scores, key=str) == sorted(first, key=str)  # one row per score, none twice
        (counted,) = sql(
            svc,
            "SELECT (SELECT sum(n) FROM score_aggregates) AS aggregated, "
            "(SELECT count(*) FROM scores) AS rows",
        )
        assert counted["aggregated"] == counted["rows"]


# --------------------------------------------------------------------------- size and pressure


def test_ten_thousand_span_trace_is_one_row(tmp_path: Path) -> None:
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        tid = trace_id_of(1)
        base = time.time_ns()
        spans = [S(1, None, "rag.request", 0, 10_000, {"rag.question": QUESTION})]
        next_id = 2
        for chain in range(99):  # 99 chains of 100 spans each: one chat leaf and 99 plain leaves
            chain_id = next_id
            spans.append(S(chain_id, 1, f"stage {chain}", chain * 100, chain * 100 + 99))
            next_id += 1
            for leaf in range(100):
                attrs: dict[str, Any] = {"leaf": leaf}
                if leaf == 0:
                    attrs = {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.usage.input_tokens": 2,
                        "gen_ai.usage.output_tokens": 1,
                    }
                start = chain * 100 + leaf * 0.5
                spans.append(S(next_id, chain_id, f"work {leaf}", start, start + 0.4, attrs))
                next_id += 1
        assert len(spans) == 10_000
        children, root = spans[1:], spans[0]
        for start in range(0, len(children), 2_500):  # four exports, then the root alone
            send(svc.http_url, tid, children[start : start + 2_500], base)
        send(svc.http_url, tid, [root], base)

        (row,) = wait_traces(svc, 1, timeout=60)
        assert (row["span_count"], row["step_count"]) == (10_000, 10_000)
        assert (row["assembly_reason"], row["assembly_count"]) == ("complete", 1)
        assert (row["input_tokens"], row["output_tokens"]) == (198, 99)
        assert count(svc, f"SELECT count(*) AS n FROM steps WHERE trace_id = '{tid}'") == 10_000
        assert count(svc, "SELECT count(*) AS n FROM steps WHERE kind = 'llm'") == 99


def test_max_traces_pressure_assembles_the_oldest_early(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, assembler=fast_assembler(decision_wait=60, max_wait=120, max_traces=5))
    with BackgroundService(cfg) as svc:
        sent = [trace_id_of(n) for n in range(20)]
        gauge = []
        for tid in sent:
            send(svc.http_url, tid, rag_spans())
            time.sleep(0.02)
            gauge.append(in_flight(svc.http_url))
        rows = wait_traces(svc, 15)
        time.sleep(0.3)  # a few more rounds: nothing else may be assembled
        rows = traces_rows(svc)
        assert [r["trace_id"] for r in rows] == sent[:15]
        assert {r["assembly_reason"] for r in rows} == {"pressure"}
        assert all(0 <= g <= 5 for g in gauge), gauge
        assert in_flight(svc.http_url) == 5
        assert assembled(svc.http_url, "pressure") == 15
        assert assembled(svc.http_url, "complete") == 0
        # The five newest are still waiting, each a whole trace.
        pending = sql(
            svc,
            "SELECT trace_id, count(*) AS n FROM spans WHERE trace_id NOT IN (SELECT trace_id FROM traces) "
            "GROUP BY trace_id ORDER BY trace_id",
        )
        assert pending == [{"trace_id": t, "n": 3} for t in sent[15:]]


# --------------------------------------------------------------------------- restarts


def test_spans_stored_with_the_assembler_off_are_assembled_on_the_next_start(tmp_path: Path) -> None:
    sent = [trace_id_of(n) for n in range(3)]
    with BackgroundService(make_config(tmp_path, assembler={"enabled": False})) as svc:
        for tid in sent:
            send(svc.http_url, tid, rag_spans())
        time.sleep(0.5)
        assert count(svc, "SELECT count(*) AS n FROM spans") == 9
        assert traces_rows(svc) == []
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        rows = wait_traces(svc, 3)
        assert [r["trace_id"] for r in rows] == sent
        assert {(r["assembly_reason"], r["assembly_count"], r["question"]) for r in rows} == {
            ("recovery", 1, QUESTION)
        }
        assert count(svc, "SELECT count(*) AS n FROM documents") == 9
        assert assembled(svc.http_url, "recovery") == 3


def test_stop_before_decision_wait_then_restart_assembles_and_reassembles(tmp_path: Path) -> None:
    db = tmp_path / "ragpulse.duckdb"
    first, second = trace_id_of(1), trace_id_of(2)
    base = time.time_ns()
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        send(svc.http_url, first, rag_spans(), base)
        wait_traces(svc, 1)
    # A late span of the assembled trace and a new trace, then a stop long before decision_wait.
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler(decision_wait=60))) as svc:
        send(svc.http_url, first, [late_llm_span()], base)
        send(svc.http_url, second, rag_spans(), base)
    assert file_rows(db, "SELECT trace_id, assembly_count, span_count FROM traces") == [
        {"trace_id": first, "assembly_count": 1, "span_count": 3}
    ]
    assert file_rows(db, "SELECT count(*) AS n FROM spans") == [{"n": 7}]

    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        wait_for(
            lambda: traces_rows(svc),
            lambda rows: len(rows) == 2 and rows[0]["assembly_count"] == 2,
            what="recovery of both traces",
        )
        rows = {r["trace_id"]: r for r in traces_rows(svc)}
        assert (rows[first]["assembly_reason"], rows[first]["span_count"]) == ("recovery", 4)
        assert (rows[first]["input_tokens"], rows[first]["output_tokens"]) == (107, 23)
        assert (rows[second]["assembly_reason"], rows[second]["assembly_count"]) == ("recovery", 1)
        assert count(svc, f"SELECT count(*) AS n FROM steps WHERE trace_id = '{first}'") == 4
        assert count(svc, f"SELECT count(*) AS n FROM documents WHERE trace_id = '{first}'") == 3
        assert assembled(svc.http_url, "recovery") == 2


def post_event(url: str, trace_id: str, span_id: str, name: str, **attributes: Any) -> None:
    """POST one GenAI event as an OTLP log record of span `span_id` (it is committed when acknowledged)."""
    request = ExportLogsServiceRequest()
    record = request.resource_logs.add().scope_logs.add().log_records.add()
    record.time_unix_nano = time.time_ns()
    record.trace_id, record.span_id = bytes.fromhex(trace_id), bytes.fromhex(span_id)
    record.event_name = name
    record.attributes.extend(key_values(attributes))
    response = post_otlp(url, request.SerializeToString(), "application/x-protobuf", signal="logs")
    assert response.status_code == 200, response.text


def test_a_log_event_stored_after_assembly_is_assembled_after_a_restart(tmp_path: Path) -> None:
    """An event sent as a log after its trace was assembled, then a stop before the re-assembly:
    the next start re-assembles the trace from the store, once."""
    db = tmp_path / "ragpulse.duckdb"
    tid = trace_id_of(3)
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        send(svc.http_url, tid, rag_spans())
        wait_traces(svc, 1)
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler(decision_wait=60))) as svc:
        post_event(
            svc.http_url, tid, span_hex(3), "gen_ai.evaluation.result", **{"gen_ai.evaluation.name": "x"}
        )
    assert file_rows(db, "SELECT assembly_count FROM traces") == [{"assembly_count": 1}]
    assert file_rows(db, "SELECT name, source FROM span_events WHERE source <> 'ragpulse'") == [
        {"name": "gen_ai.evaluation.result", "source": "log"}
    ]

    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        rows = wait_for(
            lambda: traces_rows(svc),
            lambda rows: bool(rows) and rows[0]["assembly_count"] == 2,
            what="re-assembly of the trace",
        )
        assert rows[0]["assembly_reason"] == "recovery"
        assert assembled(svc.http_url, "recovery") == 1
    # The event is accounted for now: a further start finds nothing to assemble.
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        time.sleep(0.5)
        assert assembled(svc.http_url, "recovery") == 0
        assert [r["assembly_count"] for r in traces_rows(svc)] == [2]


def test_sigkill_after_acknowledgement_before_assembly_loses_no_trace(server: ServeProcess) -> None:
    server.start(decision_wait="60", workers="0")
    sent = [trace_id_of(n) for n in range(30)]
    for tid in sent:
        send(server.http_url, tid, rag_spans())  # 200 = committed
    assert count(server.http_url, "SELECT count(DISTINCT trace_id) AS n FROM spans") == 30
    assert traces_rows(server.http_url) == []
    server.kill()

    # The restart maps in the worker process, the default.
    server.start(decision_wait="0.3")
    rows = wait_traces(server.http_url, 30, timeout=30)
    assert [r["trace_id"] for r in rows] == sent
    assert {(r["assembly_reason"], r["assembly_count"], r["span_count"]) for r in rows} == {
        ("recovery", 1, 3)
    }
    assert count(server.http_url, "SELECT count(*) AS n FROM documents") == 90
    assert assembled(server.http_url, "recovery") == 30


# --------------------------------------------------------------------------- shapes the mapper cannot read


def test_plain_spans_are_an_unknown_convention_trace(tmp_path: Path) -> None:
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        plain, rag = trace_id_of(1), trace_id_of(2)
        send(
            svc.http_url,
            plain,
            [
                S(1, None, "GET /search", 0, 30, {"http.request.method": "GET", "http.route": "/search"}),
                S(2, 1, "SELECT products", 2, 12, {"db.system": "postgresql", "db.statement": "SELECT 1"}),
                S(3, 1, "render", 13, 29, {"template": "results.html"}, error=True),
            ],
        )
        send(svc.http_url, rag, rag_spans())
        rows = {r["trace_id"]: r for r in wait_traces(svc, 2)}
        assert rows[plain]["convention"] == "unknown"
        assert (rows[plain]["span_count"], rows[plain]["status"]) == (3, "error")
        assert rows[plain]["mapping_error"] is None
        assert rows[rag]["convention"] == "ragpulse"
        kinds = sql(svc, f"SELECT DISTINCT kind FROM steps WHERE trace_id = '{plain}'")
        assert kinds == [{"kind": "chain"}]
        assert metric(svc.http_url, "ragpulse_traces_unknown_convention_total") == 1
        assert assembled(svc.http_url, "complete") == 2


def test_invalid_json_in_attributes_still_assembles(tmp_path: Path) -> None:
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        tid = trace_id_of(1)
        send(
            svc.http_url,
            tid,
            [
                S(
                    1,
                    None,
                    "rag.request",
                    0,
                    40,
                    {"rag.question": "q?", "input.value": '{"query": ', "traceloop.entity.output": "[1, 2"},
                ),
                S(
                    2,
                    1,
                    "retrieval kb",
                    1,
                    10,
                    {
                        "gen_ai.operation.name": "retrieval",
                        "gen_ai.retrieval.query.text": "q?",
                        "gen_ai.retrieval.documents": '[{"id": "d1", "content": "abc"',
                        "output.value": "{'documents': [",
                    },
                ),
                S(
                    3,
                    1,
                    "chat",
                    11,
                    39,
                    {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.input.messages": '{"role": "user", "parts": [',
                        "gen_ai.output.messages": "not json ]",
                        "llm.invocation_parameters": "{bad",
                        "langfuse.observation.usage_details": "{'input': 3,",
                        "gen_ai.usage.input_tokens": "12x",
                    },
                ),
            ],
        )
        (row,) = wait_traces(svc, 1)
        assert row["mapping_error"] is None
        assert (row["question"], row["convention"], row["span_count"]) == ("q?", "ragpulse", 3)
        assert row["input_tokens"] is None
        steps = sql(svc, "SELECT kind, query FROM steps ORDER BY position")
        assert steps == [
            {"kind": "chain", "query": None},
            {"kind": "retrieval", "query": "q?"},
            {"kind": "llm", "query": None},
        ]
        assert count(svc, "SELECT count(*) AS n FROM documents") == 0


def test_token_counts_at_the_int64_limit_do_not_block_assembly(tmp_path: Path) -> None:
    # OTLP ints are int64: the largest ones are valid on the wire. Their sum must not make the
    # round that holds the trace fail (it would take every other trace of the round with it).
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        big, normal = trace_id_of(1), trace_id_of(2)
        spans = rag_spans(tokens=(2**63 - 1, 2**63 - 1))
        request = otlp_request(big, spans, time.time_ns())
        request.resource_spans.extend(otlp_request(normal, rag_spans(), time.time_ns()).resource_spans)
        post(svc.http_url, request)
        rows = {r["trace_id"]: r for r in wait_traces(svc, 2, timeout=5)}
        assert rows[normal]["input_tokens"] == 100
        assert rows[big]["span_count"] == 3
        assert metric(svc.http_url, "ragpulse_assembly_errors_total") == 0


# --------------------------------------------------------------------------- golden cases


def _request_with_sdk(provider: TracerProvider, question: str, case_id: str | None = None) -> str:
    tracer = provider.get_tracer("golden-test")
    with emit.request(tracer, question, case_id=case_id) as req:
        with emit.retrieval(tracer, question, data_source="kb") as step:
            step.documents(DOCS)
        with emit.chat(tracer, model="gpt-4o-mini", provider="openai") as chat:
            chat.messages([{"role": "user", "content": question}])
            chat.output(ANSWER, input_tokens=50, output_tokens=10)
        req.answer(ANSWER)
        return f"{req.span.get_span_context().trace_id:032x}"


def test_traces_match_golden_cases_by_question_or_case_id(tmp_path: Path) -> None:
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        response = httpx.post(
            f"{svc.http_url}/api/cases",
            json={
                "source": "golden.yaml",
                "cases": [
                    {
                        "id": "refund-window",
                        "question": "What is the refund window?",
                        "expected_documents": ["refunds", "returns"],
                        "expected_answer": "30 days",
                    },
                    {"id": "shipping", "question": "How fast do you ship?"},
                ],
            },
            timeout=10,
        )
        assert response.status_code == 200, response.text
        assert response.json() == {"loaded": 2}

        provider = sdk_tracer_provider(svc, "golden-app")
        try:
            by_question = _request_with_sdk(provider, "  what is the REFUND window?? ")
            by_id = _request_with_sdk(provider, "Something else entirely", case_id="refund-window")
            unknown_id = _request_with_sdk(provider, "What is the refund window?", case_id="no-such-case")
            no_match = _request_with_sdk(provider, "Can I pay with a card?")
        finally:
            provider.shutdown()
        rows = {r["trace_id"]: r for r in wait_traces(svc, 4)}

        def expectation(tid: str) -> tuple[Any, ...]:
            row = rows[tid]
            docs = row["expected_documents"]
            docs = json.loads(docs) if isinstance(docs, str) else docs
            return row["case_id"], row["case_match"], docs, row["expected_answer"]

        assert expectation(by_question) == ("refund-window", "question", ["refunds", "returns"], "30 days")
        assert expectation(by_id) == ("refund-window", "case_id", ["refunds", "returns"], "30 days")
        assert expectation(unknown_id) == ("no-such-case", None, None, None)
        assert expectation(no_match) == (None, None, None, None)
        assert rows[by_question]["service_name"] == "golden-app"
        assert rows[by_question]["convention"] == "ragpulse"


# --------------------------------------------------------------------------- the mapping worker process


def test_worker_process_maps_like_the_thread_and_survives_its_death(tmp_path: Path) -> None:
    """`assembler.workers: 1` maps in a spawned process (as the default, 2, does); the rows must be
    the ones in-thread mapping gives, and a dead worker must cost no trace (mapping falls back to
    the assembler thread)."""
    rows = {}
    base = time.time_ns() - 60_000_000_000  # one fixed start: rows compared across traces and services
    for workers in (0, 1):
        folder = tmp_path / f"workers-{workers}"
        folder.mkdir()
        with BackgroundService(make_config(folder, assembler=fast_assembler(workers=workers))) as svc:
            send(svc.http_url, trace_id_of(1), _nested_trace(), base)
            wait_traces(svc, 1, timeout=30)  # the first job also waits for the spawn
            rows[workers] = _rows_without_ids(svc, trace_id_of(1))
            if workers:
                pool = svc.assembler.worker_pool if svc.assembler else None
                assert pool is not None, "workers: 1 must map in a worker process"
                for pid in list(pool._processes):  # the worker(s) of this service's pool
                    os.kill(pid, signal.SIGKILL)
                send(svc.http_url, trace_id_of(2), _nested_trace(), base)
                (after,) = wait_traces(svc, 1, where=f"trace_id = '{trace_id_of(2)}'", timeout=30)
                assert after["mapping_error"] is None
                assert _rows_without_ids(svc, trace_id_of(2)) == rows[0]
                assert svc.assembler is not None
                assert svc.assembler.worker_pool is None  # fell back to the thread
    assert rows[1] == rows[0]


def test_mapping_workers_do_not_import_the_commands_main_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spawned worker would run the parent's main module first: for `ragpulse serve`, the whole
    command (DuckDB, gRPC, the HTTP stack), about 100 MiB a worker never uses. The pool is started
    without it."""
    script = tmp_path / "main_script.py"
    marker = tmp_path / "main-ran"
    script.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)
    pool = mapping_pool(1, 0, None)
    try:
        job = MapJob(empty_batch().spans, None, {}, 0, 0)
        assert submit_job(pool, job).result(60).conventions == {}  # the worker starts here
        loaded = pool.submit(eval, "sorted({'duckdb', 'grpc'} & set(__import__('sys').modules))").result(60)
    finally:
        pool.shutdown()
    assert loaded == [] and not marker.exists()
    assert main.__file__ == str(script) and main.__spec__ is None


def test_a_mapping_job_builds_its_rows_a_chunk_at_a_time_and_loses_none() -> None:
    """A job larger than MAP_CHUNK traces (rows are built a chunk at a time, to bound a worker's
    memory) gives the rows of its traces mapped one by one, in order, outbox included."""
    scoring = Scoring.of(ScoringSetup.from_entries(None, SamplingConfig(), False, True))
    base = time.time_ns()
    batches = [
        decode_request(otlp_request(trace_id_of(i), rag_spans(question=f"question {i}?"), base + i))
        for i in range(1, 2 * MAP_CHUNK + 8)
    ]

    def job_of(parts: list[SpanBatch]) -> MapJob:
        spans = pa.concat_tables([b.spans for b in parts])
        traces = {t: ("complete", 1) for t in spans.column("trace_id").to_pylist()}
        return MapJob(spans, None, traces, base // 1000, 0)

    def rows(table: pa.Table) -> list[dict[str, Any]]:
        return table.drop_columns([c for c in ("event_id",) if c in table.column_names]).to_pylist()

    whole = run_map_job(job_of(batches), scoring)
    alone = [run_map_job(job_of([b]), scoring) for b in batches]
    for name in ("traces", "steps", "documents", "scores", "outbox"):
        expected = [row for result in alone for row in rows(getattr(result.tables, name))]
        assert rows(getattr(whole.tables, name)) == expected, name
    assert whole.tables.traces.num_rows == len(batches)
    assert whole.tables.outbox is not None and whole.tables.scores is not None
    assert len(set(whole.tables.outbox.column("event_id").to_pylist())) == whole.tables.scores.num_rows
    assert whole.conventions == {k: v for result in alone for k, v in result.conventions.items()}


def test_jobs_are_written_together_until_a_trace_repeats() -> None:
    """Finished jobs are written in one transaction, but a job holding a trace that an earlier
    one holds (re-assembled by a late span while the first ran) starts a new write, so its rows
    replace the earlier ones instead of joining them."""
    jobs = [("a", ["t1", "t2"]), ("b", ["t3"]), ("c", ["t2", "t4"]), ("d", ["t5"]), ("e", ["t5"])]
    runs = list(runs_without_repeats(jobs, lambda job: job[1]))
    assert [[name for name, _ in run] for run in runs] == [["a", "b"], ["c", "d"], ["e"]]
    assert list(runs_without_repeats([], lambda job: job)) == []


class _RecordedWrites(DuckDBStore):
    """A store that records the trace ids of each `write_traces` (one transaction each)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writes: list[list[str]] = []

    def write_traces(self, tables: TraceTables, replace: Any) -> None:
        super().write_traces(tables, replace)
        self.writes.append(tables.traces["trace_id"].to_pylist())


def test_the_two_oldest_jobs_are_written_together_while_the_workers_map_on(tmp_path: Path) -> None:
    """With worker processes, each has a job mapping and one queued while the assembler writes;
    the assembler waits for the two oldest jobs and writes them in one transaction (a write's
    statements cost a few ms each whatever their rows). Every trace is written once."""
    now = [0.0]
    store = _RecordedWrites(tmp_path / "pairs.duckdb")
    config = AssemblerConfig(workers=2, decision_wait=1.0)
    assembler = TraceAssembler(store, config, Metrics(), clock=lambda: now[0])
    batch = named_spans_batch([f"span {i}" for i in range(6 * ROUND_TRACES)])
    store.append_spans(batch.spans, batch.events)
    try:
        assembler.run_round([batch])
        now[0] = 2.0
        assembler.run_round([])  # three jobs sent (one per worker, one more); the workers start
        assembler.run_round([])  # two more: past four in flight, the two oldest are written
        assert store.writes and len(store.writes[0]) >= WRITE_JOBS * ROUND_TRACES  # or more, if done
        for _ in range(10):  # the last job, then (nothing left to send) everything mapped is written
            if not (assembler.run_round([]) or assembler.in_flight):
                break
        assert assembler.in_flight == 0
        written = [t for write in store.writes for t in write]
        assert sorted(written) == sorted(batch.spans["trace_id"].to_pylist())
    finally:
        assembler.stop()
        store.close()


class _RecordedQuestions(DuckDBStore):
    """A store that records the trace ids of each `assembly_counts` (each a read of all `traces`)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.asked: list[list[str]] = []

    def assembly_counts(self, trace_ids: Any) -> dict[str, int]:
        trace_ids = list(trace_ids)
        self.asked.append(sorted(trace_ids))
        return super().assembly_counts(trace_ids)


def test_the_store_is_asked_about_root_less_traces_once_per_decision_wait(tmp_path: Path) -> None:
    """Over a store with history, root-less traces idle for decision_wait are looked up (they may be
    late spans of a trace assembled before), at most once per decision_wait for all of them: each
    question reads every row of `traces`, and traffic whose spans all have a remote parent would
    otherwise ask every round."""
    now = [0.0]
    store = _RecordedQuestions(tmp_path / "asked.duckdb")
    base = time.time_ns()
    earlier = decode_request(otlp_request(trace_id_of(9), rag_spans(), base))
    store.append_spans(earlier.spans, earlier.events)
    assert TraceAssembler(store, AssemblerConfig(), Metrics()).assemble_stored() == 1  # a history
    assembler = TraceAssembler(store, AssemblerConfig(decision_wait=1.0), Metrics(), clock=lambda: now[0])
    try:
        assembler.assemble_stored()  # as at start: the store has traces, so any may be a late one's
        store.asked.clear()
        first, second = trace_id_of(1), trace_id_of(2)
        orphan = [S(2, 1, "child of a span sent elsewhere", 0, 10)]
        assembler.run_round([decode_request(otlp_request(first, orphan, base))])
        now[0] = 0.6
        assembler.run_round([decode_request(otlp_request(second, orphan, base))])
        now[0] = 1.5
        assembler.run_round([])  # the first is idle: asked
        now[0] = 1.7
        assembler.run_round([])  # the second is idle too, but the store was asked 0.2 s ago
        assert store.asked == [[first]]
        now[0] = 2.6
        assembler.run_round([])
        assert store.asked == [[first], [second]]
    finally:
        assembler.stop()
        store.close()


class _FailsFirstRecovery(DuckDBStore):
    """A store whose first look for unassembled traces fails as a lost catalog does."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.looks = 0

    def pending_trace_ids(self, received_before: datetime | None = None) -> list[str]:
        self.looks += 1
        if self.looks == 1:
            raise duckdb.TransactionException(
                "TransactionContext Error: Failed to get global stats information from DuckLake: "
                "Current transaction is aborted (please ROLLBACK)"
            )
        return super().pending_trace_ids(received_before)


def test_a_recovery_failing_at_start_on_the_store_is_run_when_the_store_writes_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The catalog lost while the assembler starts: the traces stored before are not left for the
    next start but assembled once the store writes again, the store's history is known (a late
    span of a trace assembled before re-assembles it), and the failure is the store's one ERROR
    line, not a traceback."""
    now = [0.0]
    base = time.time_ns()
    store = _FailsFirstRecovery(tmp_path / "start.duckdb")
    store.health = StoreHealth(str(store.path), clock=lambda: now[0])
    earlier, pending = trace_id_of(6), trace_id_of(7)
    for trace_id in (earlier, pending):
        batch = decode_request(otlp_request(trace_id, rag_spans(), base))
        store.append_spans(batch.spans, batch.events)
        if trace_id == earlier:
            store.looks = 1  # this assembly's look is not the one that fails
            assert TraceAssembler(store, AssemblerConfig(), Metrics()).assemble_stored() == 1
            store.looks = 0
    config = AssemblerConfig(poll_interval=0.02, decision_wait=0.2, max_wait=30.0)
    assembler = TraceAssembler(store, config, Metrics())
    try:
        assembler.start()
        wait_for(lambda: store.health.writable, lambda w: not w, what="the store failing")
        assert store.health.reason == "the catalog database aborted the transaction"
        now[0] = QUIET_SECONDS + 1
        store.health.succeeded()  # a write went through: the store writes again
        wait_for(store.pending_trace_ids, lambda p: p == [], what="the stored trace assembled")
        late = decode_request(otlp_request(earlier, [late_llm_span()], base))
        store.append_spans(late.spans, late.events)
        assembler.on_commit(late)
        wait_for(lambda: store.assembly_counts([earlier]), lambda c: c == {earlier: 2}, what="re-assembly")
    finally:
        assembler.stop()
        store.close()
    assert store.looks >= 2
    assert not [r for r in caplog.records if r.exc_info], caplog.text
