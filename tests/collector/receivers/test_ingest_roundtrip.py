"""Every span sent to ragpulse is found in SQL with the values it was sent with.

Real parts only: a real service on loopback ports, the real OpenTelemetry SDK exporters (gRPC and
HTTP/protobuf, plain and gzip), raw OTLP/JSON and protobuf over httpx, and the real DuckDB file
queried through /api/sql. An export is acknowledged only after its commit, so nothing here sleeps
before querying; only forwarding (asynchronous by design) is polled, with a bounded deadline.
"""

from __future__ import annotations

import base64
import gzip
import os
import time
import zlib
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from collector.service import BackgroundService, Service
from tests.support.helpers import (
    free_port,
    key_values,
    make_config,
    metric,
    post_otlp,
    run_threads,
    sdk_exporter,
    sql,
    trace_request,
    wait_for,
)

EPOCH = datetime(1970, 1, 1)


# ---------------------------------------------------------------- helpers


def iso_us(ns: int) -> str:
    """The ISO text /api/sql gives for a TIMESTAMP holding `ns` truncated to the microsecond."""
    return (EPOCH + timedelta(microseconds=ns // 1000)).isoformat()


def jsonable(value: Any) -> Any:
    """An SDK attribute value as ragpulse stores it in JSON (sequences become lists)."""
    if isinstance(value, tuple | list):
        return [jsonable(v) for v in value]
    return value


def attrs(mapping: Any) -> dict[str, Any]:
    return {k: jsonable(v) for k, v in (mapping or {}).items()}


def hex_trace(value: int) -> str:
    return format(value, "032x")


def hex_span(value: int) -> str:
    return format(value, "016x")


def rand_trace() -> str:
    return os.urandom(16).hex()


def rand_span() -> str:
    return os.urandom(8).hex()


def span_rows(svc: Service, trace_id: str) -> dict[str, dict[str, Any]]:
    rows = sql(
        svc,
        "SELECT *, epoch_us(start_time) AS start_us, epoch_us(end_time) AS end_us "
        f"FROM spans WHERE trace_id = '{trace_id}'",
    )
    by_id = {row["span_id"]: row for row in rows}
    assert len(by_id) == len(rows), f"duplicate span ids in {rows}"
    return by_id


def event_rows(svc: Service, trace_id: str) -> list[dict[str, Any]]:
    return sql(
        svc,
        "SELECT span_id, time, epoch_us(time) AS time_us, name, attributes, source "
        f"FROM span_events WHERE trace_id = '{trace_id}' ORDER BY time, name",
    )


# ---------------------------------------------------------------- 1. OpenTelemetry SDK exporters

# Times with sub-microsecond digits: the store keeps microseconds (truncated), duration_ms is exact.
_BASE_NS = (time.time_ns() // 10**9) * 10**9 + 123_456_789

SDK_CASES = [
    pytest.param("grpc", False, BatchSpanProcessor, id="grpc-batch"),
    pytest.param("grpc", True, SimpleSpanProcessor, id="grpc-gzip-simple"),
    pytest.param("http", False, SimpleSpanProcessor, id="http-simple"),
    pytest.param("http", True, BatchSpanProcessor, id="http-gzip-batch"),
]


def emit_trace_tree(provider: TracerProvider) -> None:
    """root (SERVER, ERROR) -> retrieve (CLIENT, event, link) -> rank (INTERNAL); root -> llm (CLIENT)."""
    tracer = provider.get_tracer("ragpulse.tests.roundtrip", "1.2.3")
    linked = SpanContext(
        trace_id=int(rand_trace(), 16),
        span_id=int(rand_span(), 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("vendor", "v1")]),
    )
    t = _BASE_NS
    root = tracer.start_span(
        "rag.request",
        kind=SpanKind.SERVER,
        start_time=t,
        attributes={
            "rag.question": "what is the refund policy? ünïcode ✓",
            "http.status_code": 500,
            "sample.ratio": 0.25,
            "feature.enabled": True,
            "tags": ["a", "b", "c"],
            "ranks": [3, 1, 2],
            "weights": [0.5, 1.5],
            "flags": [True, False],
            "big.int": 9_007_199_254_740_993,
        },
    )
    root_ctx = trace_api.set_span_in_context(root)
    retrieve = tracer.start_span(
        "retrieve",
        context=root_ctx,
        kind=SpanKind.CLIENT,
        start_time=t + 1_000_111,
        links=[Link(linked, {"link.reason": "follows", "link.n": 2})],
        attributes={"db.system": "qdrant", "k": 5},
    )
    retrieve.add_event(
        "retrieval.done",
        {"documents": ["d1", "d2"], "count": 2, "best": 0.93, "ok": True},
        timestamp=t + 2_500_999,
    )
    retrieve.add_event("no.attrs", timestamp=t + 2_600_001)
    rank = tracer.start_span(
        "rank",
        context=trace_api.set_span_in_context(retrieve),
        kind=SpanKind.INTERNAL,
        start_time=t + 2_700_000,
    )
    rank.end(end_time=t + 2_900_500)
    retrieve.end(end_time=t + 3_000_999)
    llm = tracer.start_span(
        "llm",
        context=root_ctx,
        kind=SpanKind.CLIENT,
        start_time=t + 3_100_000,
        attributes={"gen_ai.request.model": "m-1", "gen_ai.usage.input_tokens": 321},
    )
    llm.set_status(Status(StatusCode.OK))
    llm.end(end_time=t + 9_876_543)
    root.set_status(Status(StatusCode.ERROR, "upstream timed out"))
    root.end(end_time=t + 10_000_001)


@pytest.mark.parametrize(("transport", "use_gzip", "processor"), SDK_CASES)
def test_sdk_exporter_spans_stored_with_exact_values(service, transport, use_gzip, processor):
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": "shop-bot", "deployment.environment": "test", "host.cpus": 8}
        )
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(processor(sdk_exporter(service, "traces", transport, use_gzip)))
    emit_trace_tree(provider)
    assert provider.force_flush(10_000)
    provider.shutdown()

    sent: list[ReadableSpan] = list(memory.get_finished_spans())
    assert len(sent) == 4
    trace_id = hex_trace(sent[0].context.trace_id)
    rows = span_rows(service, trace_id)
    assert set(rows) == {hex_span(s.context.span_id) for s in sent}

    for span in sent:
        row = rows[hex_span(span.context.span_id)]
        assert row["trace_id"] == trace_id
        assert row["parent_span_id"] == (hex_span(span.parent.span_id) if span.parent else None)
        assert row["name"] == span.name
        assert row["kind"] == span.kind.name
        assert row["service_name"] == "shop-bot"
        assert row["start_us"] == span.start_time // 1000
        assert row["end_us"] == span.end_time // 1000
        assert row["start_time"] == iso_us(span.start_time)
        assert row["end_time"] == iso_us(span.end_time)
        assert row["duration_ms"] == pytest.approx((span.end_time - span.start_time) / 1e6, abs=1e-9)
        assert row["status_code"] == span.status.status_code.name
        assert row["status_message"] == span.status.description
        assert row["attributes"] == attrs(span.attributes)
        assert row["resource_attributes"] == attrs(span.resource.attributes)
        assert row["scope_name"] == "ragpulse.tests.roundtrip"
        assert row["scope_version"] == "1.2.3"
        if span.links:
            assert row["links"] == [
                {
                    "trace_id": hex_trace(link.context.trace_id),
                    "span_id": hex_span(link.context.span_id),
                    # The Python SDK's OTLP encoder does not put a link's trace_state on the wire.
                    "trace_state": "",
                    "attributes": attrs(link.attributes),
                }
                for link in span.links
            ]
        else:
            assert row["links"] in (None, [])

    by_name = {row["name"]: row for row in rows.values()}
    root = by_name["rag.request"]
    assert root["parent_span_id"] is None
    assert root["kind"] == "SERVER"
    assert root["status_code"] == "ERROR"
    assert root["status_message"] == "upstream timed out"
    assert root["attributes"]["big.int"] == 9_007_199_254_740_993
    assert root["attributes"]["tags"] == ["a", "b", "c"]
    assert root["attributes"]["ranks"] == [3, 1, 2]
    assert root["attributes"]["sample.ratio"] == 0.25
    assert root["attributes"]["feature.enabled"] is True
    assert root["resource_attributes"]["service.name"] == "shop-bot"
    assert root["resource_attributes"]["host.cpus"] == 8
    assert root["resource_attributes"]["telemetry.sdk.language"] == "python"
    assert root["start_time"] == iso_us(_BASE_NS)
    assert root["duration_ms"] == pytest.approx(10.000001, abs=1e-9)
    assert by_name["llm"]["status_code"] == "OK"
    assert by_name["llm"]["status_message"] is None
    assert by_name["retrieve"]["kind"] == "CLIENT"
    assert by_name["rank"]["kind"] == "INTERNAL"
    assert by_name["rank"]["parent_span_id"] == by_name["retrieve"]["span_id"]

    events = event_rows(service, trace_id)
    retrieve = next(s for s in sent if s.name == "retrieve")
    assert [
        (e["span_id"], e["time_us"], e["time"], e["name"], e["attributes"], e["source"]) for e in events
    ] == [
        (
            hex_span(retrieve.context.span_id),
            ev.timestamp // 1000,
            iso_us(ev.timestamp),
            ev.name,
            attrs(ev.attributes),
            "otlp",
        )
        for ev in retrieve.events
    ]
    assert events[0]["attributes"] == {"documents": ["d1", "d2"], "count": 2, "best": 0.93, "ok": True}
    assert events[1]["attributes"] == {}


# ---------------------------------------------------------------- 2. raw OTLP/JSON


def kv(key: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"key": key, "value": value}


NINE_IN_A_LIST = {"arrayValue": {"values": [{"intValue": "9"}]}}
ANY_VALUE_ATTRIBUTES = [
    kv("s", {"stringValue": "text ✓"}),
    kv("b", {"boolValue": True}),
    kv("b.false", {"boolValue": False}),
    kv("i", {"intValue": "42"}),
    kv("i.neg", {"intValue": "-7"}),
    kv("i.big", {"intValue": "9223372036854775807"}),
    kv("i.plain", {"intValue": 5}),
    kv("d", {"doubleValue": 2.5}),
    kv("d.int", {"doubleValue": 3}),
    kv("d.nan", {"doubleValue": "NaN"}),
    kv("d.inf", {"doubleValue": "Infinity"}),
    kv("bytes", {"bytesValue": base64.b64encode(b"\x00\x01raw\xff").decode()}),
    kv("arr", {"arrayValue": {"values": [{"stringValue": "x"}, {"intValue": "1"}, {"boolValue": False}]}}),
    kv("arr.empty", {"arrayValue": {}}),
    kv(
        "kv",
        {
            "kvlistValue": {
                "values": [
                    kv("inner", {"stringValue": "v"}),
                    kv("n", {"intValue": "3"}),
                    kv(
                        "list",
                        {"arrayValue": {"values": [{"doubleValue": 1.5}, {"kvlistValue": {"values": []}}]}},
                    ),
                    kv(
                        "deep",
                        {
                            "kvlistValue": {
                                "values": [kv("deeper", {"arrayValue": {"values": [{"intValue": "9"}]}})]
                            }
                        },
                    ),
                ]
            }
        },
    ),
    kv("empty", {}),
    kv("unknown.inside", {"stringValue": "kept", "futureKind": 1}),
]

ANY_VALUE_EXPECTED = {
    "s": "text ✓",
    "b": True,
    "b.false": False,
    "i": 42,
    "i.neg": -7,
    "i.big": 9223372036854775807,
    "i.plain": 5,
    "d": 2.5,
    "d.int": 3.0,
    "d.nan": None,
    "d.inf": None,
    "bytes": base64.b64encode(b"\x00\x01raw\xff").decode(),
    "arr": ["x", 1, False],
    "arr.empty": [],
    "kv": {"inner": "v", "n": 3, "list": [1.5, {}], "deep": {"deeper": [9]}},
    "empty": None,
    "unknown.inside": "kept",
}


def json_body(trace_id: str, ids: dict[str, str], id_encoding: str = "hex") -> dict[str, Any]:
    """A two-span OTLP/JSON request (root SERVER with ERROR, child CLIENT) with every AnyValue kind."""

    def enc(hex_id: str) -> str:
        return hex_id if id_encoding == "hex" else base64.b64encode(bytes.fromhex(hex_id)).decode()

    t = 1_700_000_000_123_456_789
    link_trace, link_span = ids["link_trace"], ids["link_span"]
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [
                        kv("service.name", {"stringValue": "json-svc"}),
                        kv("service.instance", {"intValue": "12"}),
                    ],
                    "droppedAttributesCount": 0,
                },
                "schemaUrl": "https://opentelemetry.io/schemas/1.26.0",
                "futureResourceField": {"x": 1},
                "scopeSpans": [
                    {
                        "scope": {"name": "raw.json", "version": "0.9", "unknownScopeField": True},
                        "spans": [
                            {
                                "traceId": enc(trace_id),
                                "spanId": enc(ids["root"]),
                                "parentSpanId": "",
                                "name": "json.root",
                                "kind": 2,
                                "startTimeUnixNano": str(t),
                                "endTimeUnixNano": str(t + 5_000_000_500),
                                "attributes": ANY_VALUE_ATTRIBUTES,
                                "status": {"code": 2, "message": "json failure"},
                                "traceState": "a=b",
                                "flags": 1,
                                "someFutureField": [1, 2, 3],
                                "events": [
                                    {
                                        "timeUnixNano": str(t + 1_234_567),
                                        "name": "json.event",
                                        "attributes": [
                                            kv("e.s", {"stringValue": "yes"}),
                                            kv("e.i", {"intValue": "-1"}),
                                            kv("e.arr", {"arrayValue": {"values": [{"doubleValue": 0.5}]}}),
                                        ],
                                        "unknownEventField": "ignored",
                                    }
                                ],
                                "links": [
                                    {
                                        "traceId": enc(link_trace),
                                        "spanId": enc(link_span),
                                        "traceState": "k=v",
                                        "attributes": [kv("l", {"boolValue": True})],
                                        "unknownLinkField": 0,
                                    }
                                ],
                            },
                            {
                                "traceId": enc(trace_id),
                                "spanId": enc(ids["child"]),
                                "parentSpanId": enc(ids["root"]),
                                "name": "json.child",
                                "kind": 3,
                                "startTimeUnixNano": str(t + 1_000),
                                "endTimeUnixNano": str(t + 2_001_999),
                                "status": {"code": 1},
                            },
                        ],
                    }
                ],
            }
        ],
        "unknownTopLevel": "ignored",
    }


def new_ids() -> dict[str, str]:
    return {"root": rand_span(), "child": rand_span(), "link_trace": rand_trace(), "link_span": rand_span()}


def assert_json_trace_stored(svc: Service, trace_id: str, ids: dict[str, str]) -> None:
    t = 1_700_000_000_123_456_789
    rows = span_rows(svc, trace_id)
    assert set(rows) == {ids["root"], ids["child"]}
    root, child = rows[ids["root"]], rows[ids["child"]]
    assert root["parent_span_id"] is None
    assert root["name"] == "json.root"
    assert root["kind"] == "SERVER"
    assert root["service_name"] == "json-svc"
    assert root["start_us"] == t // 1000
    assert root["end_us"] == (t + 5_000_000_500) // 1000
    assert root["start_time"] == "2023-11-14T22:13:20.123456"
    assert root["duration_ms"] == pytest.approx(5000.0005, abs=1e-9)
    assert root["status_code"] == "ERROR"
    assert root["status_message"] == "json failure"
    assert root["trace_state"] == "a=b"
    assert root["attributes"] == ANY_VALUE_EXPECTED
    assert root["resource_attributes"] == {"service.name": "json-svc", "service.instance": 12}
    assert root["scope_name"] == "raw.json"
    assert root["scope_version"] == "0.9"
    assert root["links"] == [
        {
            "trace_id": ids["link_trace"],
            "span_id": ids["link_span"],
            "trace_state": "k=v",
            "attributes": {"l": True},
        }
    ]
    assert child["parent_span_id"] == ids["root"]
    assert child["name"] == "json.child"
    assert child["kind"] == "CLIENT"
    assert child["status_code"] == "OK"
    assert child["status_message"] is None
    assert child["attributes"] == {}
    assert child["duration_ms"] == pytest.approx(2.000999, abs=1e-9)
    assert child["links"] in (None, [])
    events = event_rows(svc, trace_id)
    assert [(e["span_id"], e["time_us"], e["name"], e["attributes"], e["source"]) for e in events] == [
        (
            ids["root"],
            (t + 1_234_567) // 1000,
            "json.event",
            {"e.s": "yes", "e.i": -1, "e.arr": [0.5]},
            "otlp",
        )
    ]


@pytest.mark.parametrize("id_encoding", ["hex", "base64"])
def test_otlp_json_every_value_kind_stored(service, id_encoding):
    trace_id, ids = rand_trace(), new_ids()
    response = post_otlp(service, orjson.dumps(json_body(trace_id, ids, id_encoding)), "application/json")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {}
    assert_json_trace_stored(service, trace_id, ids)


@pytest.mark.parametrize("encoding", ["gzip", "deflate-zlib", "deflate-raw"])
def test_otlp_json_compressed_bodies(service, encoding):
    trace_id, ids = rand_trace(), new_ids()
    raw = orjson.dumps(json_body(trace_id, ids))
    if encoding == "gzip":
        body, header = gzip.compress(raw), "gzip"
    elif encoding == "deflate-zlib":
        body, header = zlib.compress(raw), "deflate"
    else:
        compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        body, header = compressor.compress(raw) + compressor.flush(), "deflate"
    response = post_otlp(service, body, "application/json", header)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {}
    assert_json_trace_stored(service, trace_id, ids)


def test_otlp_json_partial_success_stores_the_valid_spans(service):
    trace_id, ids = rand_trace(), new_ids()
    document = json_body(trace_id, ids)
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans.append({**spans[1], "spanId": "abcd", "name": "bad.id"})  # 3 bytes after base64: invalid
    spans.append({**spans[1], "spanId": "zz" * 8, "name": "not.hex"})  # neither hex nor base64
    response = post_otlp(service, orjson.dumps(document), "application/json; charset=utf-8")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    partial = response.json()["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 2
    assert "2 span(s) rejected" in partial["errorMessage"]
    assert_json_trace_stored(service, trace_id, ids)
    assert sql(service, "SELECT count(*) AS n FROM spans WHERE name IN ('bad.id', 'not.hex')") == [{"n": 0}]


# ---------------------------------------------------------------- 3. raw protobuf


def pb_request(trace_id: str, span_ids: list[str], service_name: str = "pb-svc") -> ExportTraceServiceRequest:
    t = 1_700_000_100_000_000_999
    spans = [
        PbSpan(
            trace_id=bytes.fromhex(trace_id),
            span_id=bytes.fromhex(span_id),
            parent_span_id=bytes.fromhex(span_ids[0]) if i else b"",
            name=f"pb.{i}",
            kind=PbSpan.SPAN_KIND_PRODUCER if i else PbSpan.SPAN_KIND_CONSUMER,
            start_time_unix_nano=t + i * 1000,
            end_time_unix_nano=t + i * 1000 + 1_500_000,
            status=PbStatus(code=PbStatus.STATUS_CODE_ERROR, message=f"e{i}") if i else PbStatus(),
            attributes=key_values({"i": i, "raw": b"\x10\x20"}),
        )
        for i, span_id in enumerate(span_ids)
    ]
    return trace_request(spans, service_name, "raw.pb", "2.0")


@pytest.mark.parametrize("encoding", [None, "gzip"])
def test_raw_protobuf_response_is_protobuf(service, encoding):
    trace_id, span_ids = rand_trace(), [rand_span() for _ in range(3)]
    body = pb_request(trace_id, span_ids).SerializeToString()
    if encoding == "gzip":
        body = gzip.compress(body)
    response = post_otlp(service, body, "application/x-protobuf", encoding)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-protobuf"
    parsed = ExportTraceServiceResponse.FromString(response.content)
    assert not parsed.HasField("partial_success")
    rows = span_rows(service, trace_id)
    assert set(rows) == set(span_ids)
    for i, span_id in enumerate(span_ids):
        row = rows[span_id]
        assert row["name"] == f"pb.{i}"
        assert row["parent_span_id"] == (span_ids[0] if i else None)
        assert row["kind"] == ("PRODUCER" if i else "CONSUMER")
        assert row["service_name"] == "pb-svc"
        assert row["start_us"] == (1_700_000_100_000_000_999 + i * 1000) // 1000
        assert row["duration_ms"] == pytest.approx(1.5, abs=1e-9)
        assert row["status_code"] == ("ERROR" if i else "UNSET")
        assert row["status_message"] == (f"e{i}" if i else None)
        assert row["attributes"] == {"i": i, "raw": base64.b64encode(b"\x10\x20").decode()}
        assert row["scope_name"] == "raw.pb"
        assert row["scope_version"] == "2.0"


def test_raw_protobuf_partial_success_is_protobuf(service):
    trace_id, span_ids = rand_trace(), [rand_span(), rand_span()]
    request = pb_request(trace_id, span_ids)
    bad = request.resource_spans[0].scope_spans[0].spans.add()
    bad.CopyFrom(request.resource_spans[0].scope_spans[0].spans[1])
    bad.span_id = b"\x01\x02\x03"
    response = post_otlp(service, request.SerializeToString(), "application/x-protobuf")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-protobuf"
    parsed = ExportTraceServiceResponse.FromString(response.content)
    assert parsed.partial_success.rejected_spans == 1
    assert "span_id must be 8 bytes, got 3" in parsed.partial_success.error_message
    assert set(span_rows(service, trace_id)) == set(span_ids)


# ---------------------------------------------------------------- 4. forwarding


@pytest.fixture
def downstream(tmp_path: Path) -> Iterator[Service]:
    (tmp_path / "down").mkdir()
    with BackgroundService(make_config(tmp_path / "down")) as svc:
        yield svc


def test_a_downstream_that_is_down_is_one_log_line(tmp_path, caplog):
    """A forward the downstream refuses is logged in one line with its gRPC status, not the
    multi-line `_InactiveRpcError` (issue 44)."""
    config = make_config(
        tmp_path,
        exporters={
            "forward_spans": True,
            "otlp": {"endpoint": f"127.0.0.1:{free_port()}", "protocol": "grpc", "timeout": 1},
        },
    )
    with caplog.at_level("WARNING", logger="collector.exporters.forwarder"), BackgroundService(config) as svc:
        provider = TracerProvider(resource=Resource.create({"service.name": "fwd-svc"}))
        provider.add_span_processor(
            SimpleSpanProcessor(GrpcSpanExporter(endpoint=f"127.0.0.1:{svc.grpc_port}", insecure=True))
        )
        with provider.get_tracer("t").start_as_current_span("lonely"):
            pass
        provider.shutdown()
        failed = wait_for(
            lambda: [r.getMessage() for r in caplog.records if "forwarding to" in r.getMessage()],
            lambda found: bool(found),
            timeout=30,
            what="the failed forward's log line",
        )
    assert "\n" not in failed[0] and "_InactiveRpcError" not in failed[0], failed[0]
    assert "failed: UNAVAILABLE: " in failed[0], failed[0]


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_forwarded_spans_reach_the_downstream(tmp_path, downstream, protocol):
    endpoint = (
        f"127.0.0.1:{downstream.grpc_port}"
        if protocol == "grpc"
        else f"http://127.0.0.1:{downstream.http_port}"
    )
    (tmp_path / "up").mkdir()
    config = make_config(
        tmp_path / "up",
        exporters={"forward_spans": True, "otlp": {"endpoint": endpoint, "protocol": protocol}},
    )
    with BackgroundService(config) as upstream:
        memory = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": "fwd-svc"}))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        provider.add_span_processor(
            BatchSpanProcessor(GrpcSpanExporter(endpoint=f"127.0.0.1:{upstream.grpc_port}", insecure=True))
        )
        emit_trace_tree(provider)
        assert provider.force_flush(10_000)
        provider.shutdown()
        trace_id, ids = rand_trace(), new_ids()
        response = post_otlp(upstream, orjson.dumps(json_body(trace_id, ids)), "application/json")
        assert response.status_code == 200, response.text

        sent = memory.get_finished_spans()
        sdk_trace = hex_trace(sent[0].context.trace_id)
        want = {hex_span(s.context.span_id) for s in sent}
        query = (
            "SELECT trace_id, span_id, name, service_name, attributes FROM spans "
            f"WHERE trace_id IN ('{sdk_trace}', '{trace_id}') ORDER BY span_id"
        )
        up_rows = sql(upstream, query)
        assert len(up_rows) == 6
        down_rows = wait_for(
            lambda: sql(downstream, query),
            lambda rows: len(rows) >= 6,
            timeout=10,
            what="the forwarded spans",
        )
        assert down_rows == up_rows
        assert {r["span_id"] for r in down_rows if r["trace_id"] == sdk_trace} == want
        assert {r["span_id"] for r in down_rows if r["trace_id"] == trace_id} == {ids["root"], ids["child"]}
        # Forwarded untouched: the full stored form (events, links, values) is identical downstream.
        assert_json_trace_stored(downstream, trace_id, ids)
        assert event_rows(downstream, sdk_trace) == event_rows(upstream, sdk_trace)
        assert metric(upstream, "ragpulse_forward_dropped_total") == 0


def test_an_export_abandoned_in_the_queue_is_stored_and_forwarded(tmp_path, downstream):
    """A gRPC client whose deadline passes while its export waits in the queue behind another
    commit: the export was received whole, so it is committed and forwarded all the same."""
    (tmp_path / "up").mkdir()
    config = make_config(
        tmp_path / "up",
        exporters={"forward_spans": True, "otlp": {"endpoint": f"127.0.0.1:{downstream.grpc_port}"}},
    )
    with (
        BackgroundService(config) as upstream,
        grpc.insecure_channel(f"127.0.0.1:{upstream.grpc_port}") as channel,
    ):
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        first, abandoned = (rand_trace(), [rand_span()]), (rand_trace(), [rand_span()])
        with upstream.store._write_lock:  # the writer waits in the first export's commit
            waiting = stub.Export.future(pb_request(*first), timeout=20)
            time.sleep(0.3)  # the writer has taken the first export
            with pytest.raises(grpc.RpcError) as raised:
                stub.Export(pb_request(*abandoned), timeout=0.5)
            assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            time.sleep(0.3)  # the server cancels the abandoned export's handler
        waiting.result(timeout=20)
        query = f"SELECT trace_id, span_id FROM spans WHERE trace_id IN ('{first[0]}', '{abandoned[0]}')"
        want = {(first[0], first[1][0]), (abandoned[0], abandoned[1][0])}
        assert {(r["trace_id"], r["span_id"]) for r in sql(upstream, query)} == want
        down = wait_for(lambda: sql(downstream, query), lambda rows: len(rows) >= 2, timeout=10, what="both")
        assert {(r["trace_id"], r["span_id"]) for r in down} == want


# ---------------------------------------------------------------- 5. concurrency


def test_concurrent_exports_stored_exactly_once(service):
    threads_n, exports_n, spans_n = 8, 20, 50
    errors: list[BaseException] = []
    partials: list[ExportTraceServiceResponse] = []

    def worker(worker_id: int) -> None:
        try:
            with grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
                stub = trace_service_pb2_grpc.TraceServiceStub(channel)
                for export in range(exports_n):
                    trace_id = f"{worker_id:08x}{export:08x}" + os.urandom(8).hex()
                    span_ids = [f"{worker_id + 1:04x}{export:04x}{i:08x}" for i in range(spans_n)]
                    response = stub.Export(pb_request(trace_id, span_ids, "load-svc"), timeout=20)
                    if response.HasField("partial_success"):
                        partials.append(response)
        except BaseException as exc:  # reported below, the thread must not die silently
            errors.append(exc)

    run_threads(threads_n, worker)
    assert errors == []
    assert partials == []

    total = threads_n * exports_n * spans_n
    assert sql(
        service,
        "SELECT count(*) AS n, count(DISTINCT span_id) AS spans, count(DISTINCT trace_id) AS traces, "
        "count(*) FILTER (WHERE parent_span_id IS NULL) AS roots FROM spans WHERE service_name = 'load-svc'",
    ) == [{"n": total, "spans": total, "traces": threads_n * exports_n, "roots": threads_n * exports_n}]
    assert sql(service, "SELECT count(*) AS n FROM spans") == [{"n": total}]
    assert metric(service, "ragpulse_spans_stored_total") == total
    assert metric(service, "ragpulse_spans_received_total", protocol="grpc") == total
