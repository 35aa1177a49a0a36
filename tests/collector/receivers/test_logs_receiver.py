"""GenAI events sent as OTLP logs reach the mapper as span events.

The semconv sends GenAI events as LogRecords with an event name on `/v1/logs`, tied to their span by
trace and span id. Real parts only: a real service on loopback ports, the real OpenTelemetry SDK log
exporters (gRPC and HTTP/protobuf), raw OTLP/JSON and protobuf over httpx and gRPC, the real
`opentelemetry-instrumentation-openai-v2` against the local OpenAI stub, and the DuckDB file read
through /api/sql. An export is acknowledged only after its commit, so stored rows are queried right
away; only assembly (asynchronous by design) is polled, with a bounded deadline.
"""

from __future__ import annotations

import gzip
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import openai
import orjson
import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceResponse,
)
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord as PbLogRecord
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from collector.config import Config
from collector.service import BackgroundService, Service
from tests.support.helpers import (
    fast_assembler,
    key_values,
    logs_request,
    make_config,
    metric,
    post_otlp,
    sdk_exporter,
    sdk_tracer_provider,
    sql,
    wait_for,
)
from tests.support.openai_stub import OpenAIStub

QUESTION = "How long is the refund window?"
ANSWER = "Refunds are accepted within 30 days of delivery."
SYSTEM = "Answer from the refund policy only."
MODEL = "gpt-4o-mini"
DETAILS = "gen_ai.client.inference.operation.details"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"


# --------------------------------------------------------------------------- helpers


def config(tmp_path: Path, **assembler: float) -> Config:
    return make_config(tmp_path, assembler=fast_assembler(**assembler))


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Service]:
    with BackgroundService(config(tmp_path)) as service:
        yield service


def event_rows(svc: Service, where: str = "true") -> list[dict[str, Any]]:
    """Stored span events, but ragpulse's own (its scores written back); /api/sql gives JSON
    columns as JSON values."""
    return sql(
        svc,
        "SELECT trace_id, span_id, epoch_ns(time) AS time_ns, name, attributes, source "
        f"FROM span_events WHERE source <> 'ragpulse' AND ({where}) ORDER BY time, name",
    )


def logger_provider(
    svc: Service, transport: str, batch: bool = False, use_gzip: bool = False
) -> LoggerProvider:
    provider = LoggerProvider(resource=Resource.create({"service.name": "refund-bot"}))
    exporter = sdk_exporter(svc, "logs", transport, use_gzip)
    processor = BatchLogRecordProcessor(exporter) if batch else SimpleLogRecordProcessor(exporter)
    provider.add_log_record_processor(processor)
    return provider


def span_context_of(trace_id: str, span_id: str) -> Context:
    span = NonRecordingSpan(
        SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=False, trace_flags=TraceFlags(1))
    )
    return trace_api.set_span_in_context(span)


def pb_record(trace_id: bytes, span_id: bytes, event_name: str, **attributes: Any) -> PbLogRecord:
    return PbLogRecord(
        time_unix_nano=time.time_ns(),
        trace_id=trace_id,
        span_id=span_id,
        event_name=event_name,
        attributes=key_values(attributes),
    )


# --------------------------------------------------------------------------- SDK exporters


@pytest.mark.parametrize(
    ("transport", "batch", "use_gzip"),
    [
        pytest.param("grpc", True, False, id="grpc-batch"),
        pytest.param("grpc", False, True, id="grpc-gzip-simple"),
        pytest.param("http", False, False, id="http-simple"),
        pytest.param("http", True, True, id="http-gzip-batch"),
    ],
)
def test_sdk_log_exporters_store_events_of_spans_and_ignore_other_logs(
    svc: Service, transport: str, batch: bool, use_gzip: bool
) -> None:
    trace_id, span_id = os.urandom(16).hex(), os.urandom(8).hex()
    ctx = span_context_of(trace_id, span_id)
    provider = logger_provider(svc, transport, batch, use_gzip)
    logger = provider.get_logger("ragpulse.tests.logs")
    t = time.time_ns()
    logger.emit(
        event_name="gen_ai.user.message",
        timestamp=t,
        context=ctx,
        body={"content": QUESTION, "role": "user"},
        attributes={"gen_ai.system": "openai"},
    )
    # The name as an attribute (before LogRecord.event_name), and only an observed time.
    logger.emit(
        observed_timestamp=t + 1_000,
        context=ctx,
        body=ANSWER,
        attributes={"event.name": "gen_ai.choice", "gen_ai.system": "openai"},
    )
    # An application log inside the span, and an event outside any span: not ours, ignored.
    logger.emit(context=ctx, body="GET /refunds 200", attributes={"http.route": "/refunds"})
    logger.emit(event_name="gen_ai.evaluation.result", context=Context(), attributes={"x": 1})
    assert provider.force_flush(10_000)
    provider.shutdown()

    rows = event_rows(svc)
    assert rows == [
        {
            "trace_id": trace_id,
            "span_id": span_id,
            "time_ns": t // 1000 * 1000,  # the store keeps microseconds
            "name": "gen_ai.user.message",
            "attributes": {"gen_ai.system": "openai", "body": {"content": QUESTION, "role": "user"}},
            "source": "log",
        },
        {
            "trace_id": trace_id,
            "span_id": span_id,
            "time_ns": (t + 1_000) // 1000 * 1000,
            "name": "gen_ai.choice",
            "attributes": {"event.name": "gen_ai.choice", "gen_ai.system": "openai", "body": ANSWER},
            "source": "log",
        },
    ]
    protocol = "grpc" if transport == "grpc" else "http/protobuf"
    assert metric(svc, "ragpulse_log_records_received_total", protocol=protocol) == 4
    assert metric(svc, "ragpulse_log_records_ignored_total", protocol=protocol) == 2
    assert metric(svc, "ragpulse_log_records_rejected_total", protocol=protocol) == 0
    # Events are not spans.
    assert sql(svc, "SELECT count(*) AS n FROM spans") == [{"n": 0}]


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_forwarded_log_exports_reach_the_downstream_untouched(tmp_path: Path, protocol: str) -> None:
    """With forwarding on, log exports go on to the downstream's logs service after their commit,
    whole: the plain application log that ragpulse itself ignores is forwarded too."""
    (tmp_path / "down").mkdir()
    (tmp_path / "up").mkdir()
    with BackgroundService(config(tmp_path / "down")) as downstream:
        endpoint = (
            f"127.0.0.1:{downstream.grpc_port}"
            if protocol == "grpc"
            else f"http://127.0.0.1:{downstream.http_port}/v1/traces"  # a traces URL works too
        )
        exporters = {"forward_spans": True, "otlp": {"endpoint": endpoint, "protocol": protocol}}
        up_config = make_config(tmp_path / "up", exporters=exporters)
        with BackgroundService(up_config) as upstream:
            trace_id, span_id = os.urandom(16).hex(), os.urandom(8).hex()
            ctx = span_context_of(trace_id, span_id)
            provider = logger_provider(upstream, "grpc")
            logger = provider.get_logger("ragpulse.tests.forward")
            logger.emit(event_name="gen_ai.user.message", context=ctx, body={"content": QUESTION})
            logger.emit(context=ctx, body="GET /refunds 200")
            assert provider.force_flush(10_000)
            provider.shutdown()

            where = f"trace_id = '{trace_id}'"
            up_rows = event_rows(upstream, where)
            assert [row["name"] for row in up_rows] == ["gen_ai.user.message"]
            down_rows = wait_for(lambda: event_rows(downstream, where), what="the forwarded event")
            assert down_rows == up_rows
            received = "grpc" if protocol == "grpc" else "http/protobuf"
            ignored = wait_for(
                lambda: metric(downstream, "ragpulse_log_records_ignored_total", protocol=received),
                lambda n: n >= 1,
                what="the forwarded plain log",
            )
            assert ignored == 1
            assert metric(upstream, "ragpulse_forward_dropped_total") == 0


# --------------------------------------------------------------------------- raw OTLP/JSON and protobuf


def test_otlp_json_logs_with_hex_ids(svc: Service) -> None:
    trace_id, span_id = os.urandom(16).hex(), os.urandom(8).hex()
    good = {
        "timeUnixNano": "1700000000123456000",
        "traceId": trace_id,
        "spanId": span_id,
        "eventName": "gen_ai.choice",
        "severityNumber": 9,
        "attributes": [{"key": "gen_ai.system", "value": {"stringValue": "openai"}}],
        "body": {
            "kvlistValue": {
                "values": [
                    {"key": "index", "value": {"intValue": "0"}},
                    {"key": "finish_reason", "value": {"stringValue": "stop"}},
                    {
                        "key": "message",
                        "value": {
                            "kvlistValue": {"values": [{"key": "content", "value": {"stringValue": ANSWER}}]}
                        },
                    },
                ]
            }
        },
    }
    document = {
        "resourceLogs": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "refund-bot"}}]},
                "scopeLogs": [
                    {
                        "scope": {"name": "ragpulse.tests"},
                        "logRecords": [
                            good,
                            # a plain log: ignored
                            {"traceId": trace_id, "spanId": span_id, "body": {"stringValue": "cache miss"}},
                            # an event of no span: ignored
                            {"eventName": "gen_ai.evaluation.result"},
                            # a 15-byte trace id on an event: rejected
                            {"traceId": trace_id[:30], "spanId": span_id, "eventName": "gen_ai.user.message"},
                            # not a record at all: rejected by the JSON decoder
                            7,
                        ],
                    }
                ],
            }
        ]
    }
    response = post_otlp(svc, orjson.dumps(document), JSON, signal="logs")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == JSON
    partial = response.json()["partialSuccess"]
    assert partial["rejectedLogRecords"] == "2"  # proto3 JSON writes int64 as a string
    message = partial["errorMessage"]
    assert message.startswith("2 log record(s) rejected: log record ?: log record is not a JSON object; ")
    assert f"log record {span_id} (gen_ai.user.message): trace_id must be 16 bytes, got 15" in message
    assert message.endswith(
        "; 2 log record(s) ignored: only events (an event name) of a span (trace and span id) are kept"
    )

    assert event_rows(svc) == [
        {
            "trace_id": trace_id,
            "span_id": span_id,
            "time_ns": 1700000000123456000,
            "name": "gen_ai.choice",
            "attributes": {
                "gen_ai.system": "openai",
                "body": {"index": 0, "finish_reason": "stop", "message": {"content": ANSWER}},
            },
            "source": "log",
        }
    ]
    assert metric(svc, "ragpulse_log_records_received_total", protocol="http/json") == 5
    assert metric(svc, "ragpulse_log_records_rejected_total", protocol="http/json") == 2
    assert metric(svc, "ragpulse_log_records_ignored_total", protocol="http/json") == 2


def test_only_events_is_a_plain_success_and_only_plain_logs_a_warning(svc: Service) -> None:
    trace_id, span_id = os.urandom(16), os.urandom(8)
    event = logs_request(pb_record(trace_id, span_id, "gen_ai.user.message"))
    response = post_otlp(svc, gzip.compress(event.SerializeToString()), PROTOBUF, "gzip", signal="logs")
    assert response.status_code == 200, response.text
    reply = ExportLogsServiceResponse.FromString(response.content)
    assert not reply.HasField("partial_success")

    plain = logs_request(pb_record(trace_id, span_id, ""), pb_record(b"", b"", ""))
    response = post_otlp(svc, plain.SerializeToString(), PROTOBUF, signal="logs")
    assert response.status_code == 200, response.text
    reply = ExportLogsServiceResponse.FromString(response.content)
    # OTLP: rejected 0 with a message is a warning; the exporter does not retry.
    assert reply.partial_success.rejected_log_records == 0
    assert reply.partial_success.error_message.startswith("2 log record(s) ignored")
    assert [row["name"] for row in event_rows(svc)] == ["gen_ai.user.message"]


def test_grpc_logs_bad_ids_are_rejected_alone(svc: Service) -> None:
    trace_id, span_id = os.urandom(16), os.urandom(8)
    request = logs_request(
        pb_record(trace_id, span_id, "gen_ai.user.message", **{"gen_ai.system": "openai"}),
        pb_record(trace_id, span_id[:4], "gen_ai.choice"),
        pb_record(trace_id + b"\x00", span_id, "gen_ai.choice"),
    )
    with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
        reply = logs_service_pb2_grpc.LogsServiceStub(channel).Export(request, timeout=10)
        assert reply.partial_success.rejected_log_records == 2
        assert reply.partial_success.error_message == (
            f"2 log record(s) rejected: log record {span_id[:4].hex()} (gen_ai.choice): "
            f"span_id must be 8 bytes, got 4; log record {span_id.hex()} (gen_ai.choice): "
            "trace_id must be 16 bytes, got 17"
        )
        # An undecodable body is INVALID_ARGUMENT, as for traces.
        raw = channel.unary_unary("/opentelemetry.proto.collector.logs.v1.LogsService/Export")
        with pytest.raises(grpc.RpcError) as failure:
            raw(b"\xff\xff\xff", timeout=10)
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not a valid ExportLogsServiceRequest" in (failure.value.details() or "")
    rows = event_rows(svc)
    assert [(r["trace_id"], r["span_id"], r["name"]) for r in rows] == [
        (trace_id.hex(), span_id.hex(), "gen_ai.user.message")
    ]
    assert metric(svc, "ragpulse_log_records_rejected_total", protocol="grpc") == 2


def test_logs_endpoint_refuses_like_traces(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, receivers={"max_request_bytes": 4096})
    with BackgroundService(cfg) as svc:
        cases = [
            (post_otlp(svc, b"{}", "text/plain", signal="logs"), 415, "unsupported Content-Type"),
            (
                post_otlp(svc, b"\xff\xff\xff", PROTOBUF, signal="logs"),
                400,
                "not a valid protobuf ExportLogsServiceRequest",
            ),
            (post_otlp(svc, b'{"resourceLogs": [', JSON, signal="logs"), 400, "body is not valid JSON"),
            (
                post_otlp(svc, b'{"resourceLogs": 1}', JSON, signal="logs"),
                400,
                "resourceLogs must be a JSON array",
            ),
            (post_otlp(svc, b"\x00" * 5000, PROTOBUF, signal="logs"), 413, "exceeds the 4096 byte limit"),
            (
                post_otlp(svc, gzip.compress(b"\x00" * 50_000), PROTOBUF, "gzip", signal="logs"),
                413,
                "decompressed body exceeds",
            ),
        ]
        for response, status, text in cases:
            assert response.status_code == status, response.text
            if response.headers["content-type"] == JSON:
                message = json_format.Parse(response.text, status_pb2.Status()).message
            else:
                message = status_pb2.Status.FromString(response.content).message
            assert text in message
        assert event_rows(svc) == []


# --------------------------------------------------------------------------- mapping


def emit_deprecated_events(logger: Any, ctx: Context) -> None:
    """≤v1.36 message events: the content is in the body."""
    system = {"gen_ai.system": "openai"}
    logger.emit(event_name="gen_ai.system.message", context=ctx, body={"content": SYSTEM}, attributes=system)
    logger.emit(event_name="gen_ai.user.message", context=ctx, body={"content": QUESTION}, attributes=system)
    logger.emit(
        event_name="gen_ai.choice",
        context=ctx,
        body={"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": ANSWER}},
        attributes=system,
    )


def emit_details_event(logger: Any, ctx: Context) -> None:
    """v1.37+: one event with the span's attributes, messages structured (not JSON text)."""
    logger.emit(
        event_name=DETAILS,
        context=ctx,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": MODEL,
            "gen_ai.input.messages": [
                {"role": "system", "parts": [{"type": "text", "content": SYSTEM}]},
                {"role": "user", "parts": [{"type": "text", "content": QUESTION}]},
            ],
            "gen_ai.output.messages": [
                {"role": "assistant", "parts": [{"type": "text", "content": ANSWER}], "finish_reason": "stop"}
            ],
        },
    )


EMITTERS = {"deprecated": emit_deprecated_events, "details": emit_details_event}


def trace_summary(svc: Service, trace_id: str) -> dict[str, Any] | None:
    rows = sql(
        svc,
        "SELECT t.question, t.answer, t.assembly_reason, t.assembly_count, s.kind, s.model, s.input, "
        "s.output, s.input_tokens, (SELECT count(*) FROM steps WHERE trace_id = t.trace_id) AS steps "
        f"FROM traces t LEFT JOIN steps s ON s.trace_id = t.trace_id AND s.kind = 'llm' "
        f"WHERE t.trace_id = '{trace_id}'",
    )
    assert len(rows) <= 1, rows
    return rows[0] if rows else None


@pytest.mark.parametrize(
    ("events", "order", "transport"),
    [
        pytest.param("deprecated", "logs_first", "grpc", id="deprecated-logs-first-grpc"),
        pytest.param("deprecated", "spans_first", "http", id="deprecated-spans-first-http"),
        pytest.param("details", "logs_first", "http", id="details-logs-first-http"),
        pytest.param("details", "spans_first", "grpc", id="details-spans-first-grpc"),
    ],
)
def test_llm_content_from_log_events_reaches_steps_and_trace(
    tmp_path: Path, events: str, order: str, transport: str
) -> None:
    # An event for an assembled trace re-assembles it. Whether the late arrival waits
    # decision_wait or max_wait (its root is not among the new rows), a short max_wait keeps it quick.
    with BackgroundService(config(tmp_path, max_wait=2.0)) as svc:
        tracer = sdk_tracer_provider(svc, "refund-bot").get_tracer("ragpulse.tests.logs")
        logs = logger_provider(svc, transport)
        logger = logs.get_logger("ragpulse.tests.logs")
        root = tracer.start_span(
            "invoke_workflow refund-bot", attributes={"gen_ai.operation.name": "invoke_workflow"}
        )
        # The LLM span carries no content: only the events have it.
        llm = tracer.start_span(
            f"chat {MODEL}",
            context=trace_api.set_span_in_context(root),
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": MODEL,
                "gen_ai.usage.input_tokens": 31,
                "gen_ai.usage.output_tokens": 9,
            },
        )
        trace_id = format(llm.get_span_context().trace_id, "032x")
        llm_ctx = trace_api.set_span_in_context(llm)
        if order == "logs_first":
            # As instrumentations do: the events are emitted (and exported) before the spans end.
            EMITTERS[events](logger, llm_ctx)
            assert len(event_rows(svc, f"trace_id = '{trace_id}'")) == (3 if events == "deprecated" else 1)
        llm.end()
        root.end()
        if order == "spans_first":
            first = wait_for(
                lambda: trace_summary(svc, trace_id), lambda r: r is not None, what="first assembly"
            )
            assert first is not None
            assert (first["assembly_count"], first["question"], first["answer"], first["output"]) == (
                1,
                None,
                None,
                None,
            )
            EMITTERS[events](logger, llm_ctx)
        expected_count = 2 if order == "spans_first" else 1
        summary = wait_for(
            lambda: trace_summary(svc, trace_id),
            lambda r: r is not None and r["assembly_count"] == expected_count,
            what=f"assembly #{expected_count}",
        )
        logs.shutdown()
        assert summary == {
            "question": QUESTION,
            "answer": ANSWER,
            "assembly_reason": "late_span" if order == "spans_first" else "complete",
            "assembly_count": expected_count,
            "kind": "llm",
            "model": MODEL,
            "input": f"system: {SYSTEM}\nuser: {QUESTION}",
            "output": ANSWER,
            "input_tokens": 31,
            "steps": 2,
        }
        assert {r["source"] for r in event_rows(svc, f"trace_id = '{trace_id}'")} == {"log"}


def test_openai_v2_instrumentation_event_only_messages_reach_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    # EVENT_ONLY: the messages go on a gen_ai.client.inference.operation.details log event,
    # none on the span.
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "EVENT_ONLY")
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    # The event may be exported after the span's trace was assembled; see the test above.
    with BackgroundService(config(tmp_path, max_wait=2.0)) as svc, OpenAIStub() as stub:
        tracer = sdk_tracer_provider(svc, "refund-bot")
        logs = logger_provider(svc, "grpc", batch=True)
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=tracer, logger_provider=logs)
        try:
            stub.reply(ANSWER, prompt_tokens=41, completion_tokens=11)
            client = openai.OpenAI(base_url=stub.base_url, api_key="test")
            client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
            )
        finally:
            instrumentor.uninstrument()
        assert logs.force_flush(10_000)
        logs.shutdown()

        (span,) = sql(svc, "SELECT trace_id, attributes FROM spans")
        trace_id = span["trace_id"]
        span_attributes = span["attributes"]
        assert span_attributes["gen_ai.operation.name"] == "chat"
        assert "gen_ai.input.messages" not in span_attributes
        assert "gen_ai.output.messages" not in span_attributes
        (event,) = event_rows(svc, f"trace_id = '{trace_id}'")
        assert (event["name"], event["source"]) == (DETAILS, "log")

        summary = wait_for(
            lambda: trace_summary(svc, trace_id),
            lambda r: r is not None and r["answer"] is not None,
            what="a trace with the answer",
        )
        assert summary is not None
        assert (summary["question"], summary["answer"]) == (QUESTION, ANSWER)
        assert (summary["kind"], summary["model"], summary["input_tokens"]) == ("llm", MODEL, 41)
        assert summary["input"] == f"system: {SYSTEM}\nuser: {QUESTION}"
        assert summary["output"] == ANSWER
