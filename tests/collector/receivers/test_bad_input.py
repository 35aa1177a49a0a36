"""Bad input against a live service: exact statuses and messages, and the server keeps serving.

Every test sends something malformed to the real receivers on loopback (OTLP/HTTP with protobuf or
JSON bodies, OTLP/gRPC), checks the exact answer, checks what reached the real DuckDB file, and then
proves with `assert_serving` that a good export afterwards is still acknowledged and stored.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import secrets
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest
from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from collector.otlp.batch import MAX_ATTRIBUTE_DEPTH
from collector.service import BackgroundService, Service
from tests.support.helpers import (
    key_values,
    make_config,
    metric_samples,
    post_otlp,
    sql,
    trace_request,
    trace_request_json,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
PROTOCOLS = ("http/protobuf", "http/json", "grpc")
T0 = 1_700_000_000_000_000_000
INT64_MAX = 2**63 - 1
SMALL_LIMIT = 64 * 1024


# ---------------------------------------------------------------------------------------------------
# Building requests. Spans are written in OTLP/JSON form (hex ids); the protobuf forms are derived.


def new_trace() -> bytes:
    return secrets.token_bytes(16)


def new_span() -> bytes:
    return secrets.token_bytes(8)


def span_json(
    trace: bytes | None,
    span: bytes | None,
    parent: bytes | None = None,
    name: str = "op",
    start: int = T0,
    end: int = T0 + 2_000_000,
    attributes: list[dict[str, Any]] | None = None,
    events: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "name": name,
        "kind": 2,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
    }
    if trace is not None:
        obj["traceId"] = trace.hex()
    if span is not None:
        obj["spanId"] = span.hex()
    if parent is not None:
        obj["parentSpanId"] = parent.hex()
    if attributes:
        obj["attributes"] = attributes
    if events:
        obj["events"] = events
    return obj


def nested_array(depth: int, leaf: str = "leaf") -> dict[str, Any]:
    """An OTLP/JSON AnyValue: `depth` arrays, one inside the other, around a string."""
    value: dict[str, Any] = {"stringValue": leaf}
    for _ in range(depth):
        value = {"arrayValue": {"values": [value]}}
    return value


def nested_python(depth: int, leaf: str = "leaf") -> Any:
    value: Any = leaf
    for _ in range(depth):
        value = [value]
    return value


def span_proto(obj: dict[str, Any]) -> Span:
    fields = dict(obj)
    ids = {
        key: bytes.fromhex(fields.pop(key)) for key in ("traceId", "spanId", "parentSpanId") if key in fields
    }
    span = json_format.ParseDict(fields, Span())
    span.trace_id = ids.get("traceId", b"")
    span.span_id = ids.get("spanId", b"")
    span.parent_span_id = ids.get("parentSpanId", b"")
    return span


def request_json(spans: list[Any], service: str | None = None) -> dict[str, Any]:
    return trace_request_json(spans, service or current_name(), "bad-input-tests")


def request_proto(spans: list[dict[str, Any]], service: str | None = None) -> ExportTraceServiceRequest:
    return trace_request([span_proto(obj) for obj in spans], service or current_name(), "bad-input-tests")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field, encoded by hand."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


# ---------------------------------------------------------------------------------------------------
# Talking to the service.


def grpc_channel(svc: Service) -> grpc.Channel:
    return grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}", options=[("grpc.enable_http_proxy", 0)])


def export(svc: Service, protocol: str, body: Any) -> ExportTraceServiceResponse:
    """One successful export; `body` is an OTLP/JSON dict (http/json) or a protobuf request."""
    if protocol == "grpc":
        with grpc_channel(svc) as channel:
            response: ExportTraceServiceResponse = trace_service_pb2_grpc.TraceServiceStub(channel).Export(
                body, timeout=20
            )
            return response
    if protocol == "http/json":
        reply = post_otlp(svc, orjson.dumps(body), JSON)
        assert reply.status_code == 200, reply.text
        assert reply.headers["content-type"].startswith(JSON)
        return json_format.Parse(reply.text, ExportTraceServiceResponse())
    reply = post_otlp(svc, body.SerializeToString(), PROTOBUF)
    assert reply.status_code == 200, reply.content
    assert reply.headers["content-type"].startswith(PROTOBUF)
    return ExportTraceServiceResponse.FromString(reply.content)


def export_spans(svc: Service, protocol: str, spans: list[Any]) -> ExportTraceServiceResponse:
    body = request_json(spans) if protocol == "http/json" else request_proto(spans)
    return export(svc, protocol, body)


def spans_of_test(svc: Service, columns: str, service: str | None = None) -> list[dict[str, Any]]:
    """Rows of the spans this test sent (all spans of a request share its resource's service name)."""
    where = f"service_name = '{service or current_name()}'"
    return sql(svc, f"SELECT {columns} FROM spans WHERE {where} ORDER BY start_time, span_id")


def stored(svc: Service, service: str | None = None) -> set[tuple[str, str]]:
    return {(row["trace_id"], row["span_id"]) for row in spans_of_test(svc, "trace_id, span_id", service)}


def assert_serving(svc: Service) -> None:
    """A good export over HTTP and over gRPC is acknowledged in full and stored."""
    for protocol in ("http/protobuf", "grpc"):
        trace, span = new_trace(), new_span()
        response = export(svc, protocol, request_proto([span_json(trace, span, name="probe")], "probe"))
        assert response.partial_success.rejected_spans == 0
        assert response.partial_success.error_message == ""
        rows = sql(svc, f"SELECT trace_id, name, service_name FROM spans WHERE span_id = '{span.hex()}'")
        assert rows == [{"trace_id": trace.hex(), "name": "probe", "service_name": "probe"}]


def protobuf_status(reply: httpx.Response, http_status: int, code: int) -> str:
    """The google.rpc.Status of a protobuf error answer; returns its message."""
    assert reply.status_code == http_status, reply.content
    assert reply.headers["content-type"].startswith(PROTOBUF)
    status = status_pb2.Status.FromString(reply.content)
    assert status.code == code
    assert status.message
    return status.message


def json_status(reply: httpx.Response, http_status: int, code: int) -> str:
    """The OTLP/JSON google.rpc.Status of an error answer; returns its message."""
    assert reply.status_code == http_status, reply.text
    assert reply.headers["content-type"].startswith(JSON)
    body = reply.json()
    assert set(body) == {"code", "message"}
    assert body["code"] == code
    assert isinstance(body["message"], str) and body["message"]
    message: str = body["message"]
    return message


# One service per module (and one with a small request limit): starting one per test would cost more
# than the tests. Tests stay independent because each sends its spans under its own service.name.
_CURRENT: dict[str, str] = {}


def current_name() -> str:
    return _CURRENT["name"]


@pytest.fixture(autouse=True)
def _unique_service_name() -> Iterator[None]:
    _CURRENT["name"] = f"bad-input-{secrets.token_hex(6)}"
    yield
    _CURRENT.clear()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A running service with default settings, shared by this module's tests."""
    with BackgroundService(make_config(tmp_path_factory.mktemp("bad-input"))) as svc:
        yield svc


@pytest.fixture(scope="module")
def small_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A running service whose receivers refuse requests over SMALL_LIMIT bytes."""
    config = make_config(tmp_path_factory.mktemp("small"), receivers={"max_request_bytes": SMALL_LIMIT})
    with BackgroundService(config) as svc:
        yield svc


def valid_body(size_hint: int) -> tuple[bytes, str]:
    """A valid protobuf export of about `size_hint` bytes (one span with a long attribute)."""
    span = new_span()
    request = request_proto(
        [span_json(new_trace(), span, attributes=[{"key": "big", "value": {"stringValue": "x" * size_hint}}])]
    )
    return request.SerializeToString(), span.hex()


# ---------------------------------------------------------------------------------------------------
# HTTP: bodies that cannot be decoded, media types, encodings.


def test_truncated_protobuf_body_is_400_with_protobuf_status(service):
    body = request_proto([span_json(new_trace(), new_span())]).SerializeToString()
    message = protobuf_status(post_otlp(service, body[:-5], PROTOBUF), 400, code_pb2.INVALID_ARGUMENT)
    assert "not a valid protobuf ExportTraceServiceRequest" in message
    assert stored(service) == set()
    assert_serving(service)


def test_garbage_protobuf_body_is_400(service):
    message = protobuf_status(
        post_otlp(service, b"\xff\xff\xff\xff", PROTOBUF), 400, code_pb2.INVALID_ARGUMENT
    )
    assert "not a valid protobuf" in message
    assert_serving(service)


def _request_counts(svc: Service) -> dict[tuple[str, str], float]:
    """`ragpulse_export_requests_total` by (protocol, outcome), from /metrics."""
    samples = metric_samples(svc, "ragpulse_export_requests_total")
    return {(labels["protocol"], labels["outcome"]): value for labels, value in samples}


def test_accepted_and_refused_http_requests_count_under_one_protocol_label(tmp_path):
    with BackgroundService(make_config(tmp_path)) as svc:
        body = request_proto([span_json(new_trace(), new_span())]).SerializeToString()
        assert post_otlp(svc, body, PROTOBUF).status_code == 200
        assert post_otlp(svc, body[:-5], PROTOBUF).status_code == 400
        assert (
            post_otlp(svc, orjson.dumps(request_json([span_json(new_trace(), new_span())])), JSON).status_code
            == 200
        )
        assert post_otlp(svc, b"{", JSON).status_code == 400
        assert post_otlp(svc, body, "text/plain").status_code == 415
        counts = _request_counts(svc)
    assert counts == {
        ("http/protobuf", "ok"): 1,
        ("http/protobuf", "invalid"): 1,
        ("http/json", "ok"): 1,
        ("http/json", "invalid"): 1,
        # An unknown media type counts under OTLP/HTTP's default encoding.
        ("http/protobuf", "unsupported"): 1,
    }


def test_wrong_content_type_is_415(service):
    body = request_proto([span_json(new_trace(), new_span())]).SerializeToString()
    message = json_status(post_otlp(service, body, "text/plain"), 415, code_pb2.INVALID_ARGUMENT)
    assert "unsupported Content-Type 'text/plain'" in message
    assert PROTOBUF in message and JSON in message
    assert stored(service) == set()
    assert_serving(service)


def test_missing_content_type_is_415(service):
    body = request_proto([span_json(new_trace(), new_span())]).SerializeToString()
    reply = post_otlp(service, body, None)
    assert "content-type" not in {name.lower() for name in reply.request.headers}
    message = json_status(reply, 415, code_pb2.INVALID_ARGUMENT)
    assert "unsupported Content-Type '(none)'" in message
    assert stored(service) == set()
    assert_serving(service)


def test_invalid_json_is_400_with_json_status(service):
    reply = post_otlp(service, b'{"resourceSpans": [', JSON)
    message = json_status(reply, 400, code_pb2.INVALID_ARGUMENT)
    assert message.startswith("body is not valid JSON")
    assert_serving(service)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param([1, 2], "body must be a JSON object", id="array-document"),
        pytest.param("resourceSpans", "body must be a JSON object", id="string-document"),
        pytest.param(
            {"resourceSpans": {"scopeSpans": []}}, "resourceSpans must be a JSON array", id="rs-object"
        ),
        pytest.param({"resourceSpans": "x"}, "resourceSpans must be a JSON array", id="rs-string"),
        pytest.param({"resourceSpans": [7]}, "resourceSpans entries must be JSON objects", id="rs-entry"),
        pytest.param(
            {"resourceSpans": [{"scopeSpans": 1}]}, "scopeSpans must be a JSON array", id="ss-number"
        ),
        pytest.param(
            {"resourceSpans": [{"scopeSpans": [{"spans": {"name": "x"}}]}]},
            "spans must be a JSON array",
            id="spans-object",
        ),
    ],
)
def test_json_of_the_wrong_shape_is_400(service, body, expected):
    message = json_status(post_otlp(service, orjson.dumps(body), JSON), 400, code_pb2.INVALID_ARGUMENT)
    assert expected in message
    assert_serving(service)


def test_unsupported_content_encoding_is_415(service):
    body = request_proto([span_json(new_trace(), new_span())]).SerializeToString()
    reply = post_otlp(service, body, PROTOBUF, "br")
    message = protobuf_status(reply, 415, code_pb2.INVALID_ARGUMENT)
    assert "unsupported Content-Encoding 'br'" in message
    assert stored(service) == set()
    assert_serving(service)


def _corrupt_gzip(case: str) -> bytes:
    """A gzip body broken in one way; intact, it would be a valid export of one span."""
    good = gzip.compress(request_proto([span_json(new_trace(), new_span())]).SerializeToString())
    if case == "not-gzip":
        return b"this is not gzip at all"
    if case == "garbage-after-header":
        return good[:10] + b"\x00garbage\xff" * 4
    if case == "bad-crc":  # the CRC32 is the first 4 bytes of the 8-byte trailer
        return good[:-8] + bytes([good[-8] ^ 0xFF]) + good[-7:]
    if case == "cut-in-half":
        return good[: len(good) // 2]
    assert case == "trailer-missing"  # every deflate block present, CRC32 and ISIZE cut off
    return good[:-8]


@pytest.mark.parametrize(
    "case", ["not-gzip", "garbage-after-header", "bad-crc", "cut-in-half", "trailer-missing"]
)
def test_corrupt_gzip_is_400(service, case):
    reply = post_otlp(service, _corrupt_gzip(case), PROTOBUF, "gzip")
    message = protobuf_status(reply, 400, code_pb2.INVALID_ARGUMENT)
    assert "gzip" in message
    assert stored(service) == set()
    assert_serving(service)


def test_gzip_and_deflate_bodies_are_accepted(service):
    """The control for the corrupt-gzip cases: the same encodings, intact, are stored."""
    spans = []
    for encoding, compress in (("gzip", gzip.compress), ("deflate", zlib.compress)):
        trace, span = new_trace(), new_span()
        body = compress(request_proto([span_json(trace, span)]).SerializeToString())
        reply = post_otlp(service, body, PROTOBUF, encoding)
        assert reply.status_code == 200, reply.content
        assert ExportTraceServiceResponse.FromString(reply.content) == ExportTraceServiceResponse()
        spans.append((trace.hex(), span.hex()))
    assert stored(service) == set(spans)


# ---------------------------------------------------------------------------------------------------
# Mixed batches: bad spans are rejected alone, good siblings are stored, partial success says why.


def _bad_spans(trace: bytes) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    """(case, span, expected message) for spans every encoding can carry.

    "proto" is a substring of the protobuf and gRPC message; "json" a regular expression for OTLP/JSON.
    """
    return [
        (
            "trace-id-15-bytes",
            span_json(secrets.token_bytes(15), new_span()),
            {"proto": "trace_id must be 16 bytes, got 15", "json": r"trace_?id"},
        ),
        (
            "trace-id-17-bytes",
            span_json(secrets.token_bytes(17), new_span()),
            {"proto": "trace_id must be 16 bytes, got 17", "json": r"trace_?id"},
        ),
        (
            "span-id-7-bytes",
            span_json(trace, secrets.token_bytes(7)),
            {"proto": "span_id must be 8 bytes, got 7", "json": r"(?<!parent)(?<!parent_)span_?id"},
        ),
        (
            "span-id-missing",
            span_json(trace, None),
            {"proto": "span_id is missing", "json": "span_id is missing"},
        ),
        (
            "trace-id-missing",
            span_json(None, new_span()),
            {"proto": "trace_id is missing", "json": "trace_id is missing"},
        ),
        (
            "trace-id-all-zero",
            span_json(bytes(16), new_span()),
            {"proto": "trace_id is all zeroes", "json": "trace_id is all zeroes"},
        ),
        (
            "span-id-all-zero",
            span_json(trace, bytes(8)),
            {"proto": "span_id is all zeroes", "json": "span_id is all zeroes"},
        ),
        (
            "parent-id-9-bytes",
            span_json(trace, new_span(), parent=secrets.token_bytes(9)),
            {"proto": "parent_span_id must be 8 bytes, got 9", "json": r"parent_?span_?id"},
        ),
    ]


def _json_only_bad_spans(trace: bytes) -> list[tuple[str, Any, str]]:
    return [
        ("span-not-an-object", 42, "span is not a JSON object"),
        ("span-list-not-an-object", ["traceId", trace.hex()], "span is not a JSON object"),
        (
            "span-id-not-hex-nor-base64",
            {**span_json(trace, None), "spanId": "zz-not-an-id!"},
            "spanId 'zz-not-an-id!' is neither hex nor base64",
        ),
        (
            "trace-id-not-a-string",
            {**span_json(None, new_span()), "traceId": 12345},
            "traceId must be a string",
        ),
    ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_mixed_batch_stores_good_spans_and_rejects_bad_ones(service, protocol):
    trace = new_trace()
    goods = [new_span() for _ in range(4)]
    bad = [span for _, span, _ in _bad_spans(trace)]
    if protocol == "http/json":
        bad += [span for _, span, _ in _json_only_bad_spans(trace)]
    # Good spans first, last and in between the bad ones; one good child points at a good parent.
    spans: list[Any] = [span_json(trace, goods[0])]
    spans += bad[: len(bad) // 2]
    spans += [span_json(trace, goods[1], parent=goods[0]), span_json(trace, goods[2])]
    spans += bad[len(bad) // 2 :]
    spans.append(span_json(trace, goods[3], parent=goods[2]))

    response = export_spans(service, protocol, spans)

    assert response.partial_success.rejected_spans == len(bad)
    message = response.partial_success.error_message
    assert message.startswith(f"{len(bad)} span(s) rejected (first ")
    assert "shown): " in message
    assert stored(service) == {(trace.hex(), span.hex()) for span in goods}
    rows = spans_of_test(service, "span_id, parent_span_id")
    parents = {row["span_id"]: row["parent_span_id"] for row in rows}
    assert parents == {
        goods[0].hex(): None,
        goods[1].hex(): goods[0].hex(),
        goods[2].hex(): None,
        goods[3].hex(): goods[2].hex(),
    }
    assert_serving(service)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", [case for case, _, _ in _bad_spans(bytes(16))])
def test_each_bad_span_is_rejected_alone_with_its_reason(service, protocol, case):
    trace = new_trace()
    bad, expected = next((span, exp) for name, span, exp in _bad_spans(trace) if name == case)
    good = new_span()

    response = export_spans(service, protocol, [bad, span_json(trace, good)])

    assert response.partial_success.rejected_spans == 1
    message = response.partial_success.error_message
    assert message.startswith("1 span(s) rejected: span ")
    if protocol == "http/json":
        # The JSON decoder words id errors its own way; it must at least name the field (either spelling).
        assert re.search(expected["json"], message, re.IGNORECASE), message
    else:
        assert expected["proto"] in message
    assert stored(service) == {(trace.hex(), good.hex())}
    assert_serving(service)


@pytest.mark.parametrize("case", [case for case, _, _ in _json_only_bad_spans(bytes(16))])
def test_each_malformed_json_span_is_rejected_alone(service, case):
    trace = new_trace()
    bad, expected = next((span, exp) for name, span, exp in _json_only_bad_spans(trace) if name == case)
    good = new_span()

    response = export_spans(service, "http/json", [span_json(trace, good), bad])

    assert response.partial_success.rejected_spans == 1
    assert response.partial_success.error_message.startswith("1 span(s) rejected: span ")
    assert expected in response.partial_success.error_message
    assert stored(service) == {(trace.hex(), good.hex())}
    assert_serving(service)


def test_json_hex_id_of_wrong_length_is_reported_as_a_length_error(service):
    """A hex id that is simply too short or too long should be reported by its length, as protobuf is."""
    trace = new_trace()
    good = new_span()
    spans = [
        span_json(secrets.token_bytes(15), new_span()),
        span_json(trace, secrets.token_bytes(7)),
        span_json(trace, new_span(), parent=secrets.token_bytes(12)),
        span_json(trace, good),
    ]

    response = export_spans(service, "http/json", spans)

    assert response.partial_success.rejected_spans == 3
    message = response.partial_success.error_message
    assert stored(service) == {(trace.hex(), good.hex())}
    assert "16 bytes, got 15" in message, message
    assert "8 bytes, got 7" in message, message
    assert "8 bytes, got 12" in message, message


def test_json_ids_in_base64_are_accepted_next_to_bad_ones(service):
    trace, span, parent = new_trace(), new_span(), new_span()
    good = {
        **span_json(None, None),
        "traceId": base64.b64encode(trace).decode(),
        "spanId": base64.b64encode(span).decode(),
        "parentSpanId": base64.b64encode(parent).decode(),
    }
    response = export_spans(service, "http/json", [good, {**span_json(trace, None), "spanId": "!!"}])
    assert response.partial_success.rejected_spans == 1
    rows = spans_of_test(service, "trace_id, span_id, parent_span_id")
    assert rows == [{"trace_id": trace.hex(), "span_id": span.hex(), "parent_span_id": parent.hex()}]
    assert_serving(service)


def test_resource_with_too_deep_attribute_rejects_its_spans_only(service):
    trace = new_trace()
    goods = [new_span(), new_span()]
    request = request_proto([span_json(trace, span) for span in goods])
    doomed_name = f"{current_name()}-doomed"
    doomed = request.resource_spans.add()
    doomed.resource.attributes.extend(key_values({"service.name": doomed_name}))
    deep = doomed.resource.attributes.add()
    deep.key = "deep"
    deep.value.CopyFrom(json_format.ParseDict(nested_array(40), type(deep.value)()))
    scope = doomed.scope_spans.add()
    for _ in range(3):
        scope.spans.append(span_proto(span_json(trace, new_span())))

    response = export(service, "http/protobuf", request)

    assert response.partial_success.rejected_spans == 3
    message = response.partial_success.error_message
    assert message.startswith("3 span(s) rejected")
    assert message.endswith(
        f": resource of 3 span(s): attribute value nested deeper than {MAX_ATTRIBUTE_DEPTH} levels"
    )
    assert stored(service) == {(trace.hex(), span.hex()) for span in goods}
    assert stored(service, doomed_name) == set()
    assert_serving(service)


# ---------------------------------------------------------------------------------------------------
# Timestamps.


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_timestamps_past_int64_reject_only_their_span(service, protocol):
    trace = new_trace()
    good = new_span()
    event = {"timeUnixNano": str(2**63), "name": "late"}
    spans = [
        span_json(trace, new_span(), start=2**63, end=2**63 + 5),
        span_json(
            trace, good, start=T0, end=T0 + 1_000, events=[{"timeUnixNano": str(T0 + 10), "name": "ok"}]
        ),
        span_json(trace, new_span(), start=T0, end=2**64 - 1),
        span_json(trace, new_span(), events=[event]),
    ]

    response = export_spans(service, protocol, spans)

    assert response.partial_success.rejected_spans == 3
    message = response.partial_success.error_message
    assert f"start_time_unix_nano {2**63} is out of range" in message
    assert f"end_time_unix_nano {2**64 - 1} is out of range" in message
    assert f"event time_unix_nano {2**63} is out of range" in message
    assert stored(service) == {(trace.hex(), good.hex())}
    events = sql(service, f"SELECT span_id, name FROM span_events WHERE trace_id = '{trace.hex()}'")
    assert events == [{"span_id": good.hex(), "name": "ok"}]
    assert_serving(service)


# ---------------------------------------------------------------------------------------------------
# Oversized requests.


def test_body_over_the_limit_with_content_length_is_413(small_service):
    body, span = valid_body(SMALL_LIMIT + 10_000)
    assert len(body) > SMALL_LIMIT
    reply = post_otlp(small_service, body, PROTOBUF)
    assert int(reply.request.headers["content-length"]) == len(body)
    message = protobuf_status(reply, 413, code_pb2.RESOURCE_EXHAUSTED)
    assert f"request body of {len(body)} bytes exceeds the {SMALL_LIMIT} byte limit" == message
    assert sql(small_service, f"SELECT count(*) AS n FROM spans WHERE span_id = '{span}'") == [{"n": 0}]
    assert_serving(small_service)


def test_chunked_body_over_the_limit_is_413(small_service):
    body, span = valid_body(SMALL_LIMIT * 3)

    def chunks() -> Iterator[bytes]:
        for offset in range(0, len(body), 16 * 1024):
            yield body[offset : offset + 16 * 1024]

    reply = post_otlp(small_service, chunks(), PROTOBUF)
    assert "content-length" not in reply.request.headers
    assert reply.request.headers["transfer-encoding"] == "chunked"
    message = protobuf_status(reply, 413, code_pb2.RESOURCE_EXHAUSTED)
    assert message == f"request body exceeds the {SMALL_LIMIT} byte limit"
    assert sql(small_service, f"SELECT count(*) AS n FROM spans WHERE span_id = '{span}'") == [{"n": 0}]
    assert_serving(small_service)


def test_json_body_over_the_limit_is_413_with_json_status(small_service):
    span = new_span()
    body = orjson.dumps(
        request_json(
            [span_json(new_trace(), span, attributes=[{"key": "b", "value": {"stringValue": "y" * 90_000}}])]
        )
    )
    message = json_status(post_otlp(small_service, body, JSON), 413, code_pb2.RESOURCE_EXHAUSTED)
    assert "exceeds the 65536 byte limit" in message
    assert sql(small_service, f"SELECT count(*) AS n FROM spans WHERE span_id = '{span.hex()}'") == [{"n": 0}]
    assert_serving(small_service)


def test_body_of_exactly_the_limit_is_accepted_and_one_more_byte_is_not(small_service):
    # Find an attribute length whose request serializes to exactly SMALL_LIMIT bytes.
    trace, span = new_trace(), new_span()

    def body_with(length: int, span: bytes) -> bytes:
        attrs = [{"key": "big", "value": {"stringValue": "z" * length}}]
        return request_proto([span_json(trace, span, attributes=attrs)]).SerializeToString()

    # Past 16 KiB every length prefix is 3 bytes long, so the size grows one byte per character.
    length = SMALL_LIMIT - 200
    length += SMALL_LIMIT - len(body_with(length, span))
    body = body_with(length, span)
    assert len(body) == SMALL_LIMIT
    over = body_with(length + 1, new_span())
    assert len(over) == SMALL_LIMIT + 1

    reply = post_otlp(small_service, body, PROTOBUF)
    assert reply.status_code == 200, reply.content
    protobuf_status(post_otlp(small_service, over, PROTOBUF), 413, code_pb2.RESOURCE_EXHAUSTED)
    assert stored(small_service) == {(trace.hex(), span.hex())}
    assert_serving(small_service)


def test_grpc_message_over_the_limit_is_resource_exhausted(small_service):
    span = new_span()
    request = request_proto(
        [
            span_json(
                new_trace(),
                span,
                attributes=[{"key": "b", "value": {"stringValue": "q" * (2 * SMALL_LIMIT)}}],
            )
        ]
    )
    with grpc_channel(small_service) as channel, pytest.raises(grpc.RpcError) as raised:
        trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=20)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(SMALL_LIMIT) in raised.value.details()
    assert sql(small_service, f"SELECT count(*) AS n FROM spans WHERE span_id = '{span.hex()}'") == [{"n": 0}]
    assert_serving(small_service)


def test_gzip_expanding_past_the_limit_is_413(small_service):
    body, span = valid_body(SMALL_LIMIT * 2)
    compressed = gzip.compress(body)
    assert len(compressed) < SMALL_LIMIT
    reply = post_otlp(small_service, compressed, PROTOBUF, "gzip")
    message = protobuf_status(reply, 413, code_pb2.RESOURCE_EXHAUSTED)
    assert message == f"decompressed body exceeds the {SMALL_LIMIT} byte limit"
    assert sql(small_service, f"SELECT count(*) AS n FROM spans WHERE span_id = '{span}'") == [{"n": 0}]
    assert_serving(small_service)


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def _zero_bomb(wbits: int, megabytes: int = 100) -> bytes:
    """`megabytes` MiB of zeros compressed, streamed so that only 1 MiB is ever held uncompressed."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    chunk = bytes(1 << 20)
    parts = [compressor.compress(chunk) for _ in range(megabytes)]
    parts.append(compressor.flush())
    return b"".join(parts)


@pytest.mark.parametrize(("encoding", "wbits"), [("gzip", 16 + zlib.MAX_WBITS), ("deflate", zlib.MAX_WBITS)])
def test_compression_bomb_is_413_without_inflating_memory(service, encoding, wbits):
    bomb = _zero_bomb(wbits)
    assert len(bomb) < 200 * 1024  # ~100 KB on the wire, 100 MiB once inflated
    before = _rss_bytes()
    # The timeout bounds how long the refusal may take: it must not inflate all 100 MiB first.
    reply = post_otlp(service, bomb, PROTOBUF, encoding, timeout=10)
    growth = _rss_bytes() - before
    limit = service.config.receivers.max_request_bytes
    message = protobuf_status(reply, 413, code_pb2.RESOURCE_EXHAUSTED)
    assert message == f"decompressed body exceeds the {limit} byte limit"
    assert growth < 200 * 1024 * 1024, f"RSS grew by {growth / 2**20:.0f} MiB"
    assert_serving(service)


# ---------------------------------------------------------------------------------------------------
# Deep nesting.


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_attribute_nested_40_deep_rejects_that_span_alone(service, protocol):
    trace = new_trace()
    goods = [new_span(), new_span()]
    deep = new_span()
    spans = [
        span_json(trace, goods[0], attributes=[{"key": "shallow", "value": nested_array(5)}]),
        span_json(trace, deep, attributes=[{"key": "deep", "value": nested_array(40)}]),
        span_json(trace, goods[1]),
    ]

    response = export_spans(service, protocol, spans)

    assert response.partial_success.rejected_spans == 1
    assert response.partial_success.error_message == (
        f"1 span(s) rejected: span {deep.hex()}: "
        f"attribute value nested deeper than {MAX_ATTRIBUTE_DEPTH} levels"
    )
    assert stored(service) == {(trace.hex(), span.hex()) for span in goods}
    assert_serving(service)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_attribute_nested_5_deep_round_trips(service, protocol):
    trace, span = new_trace(), new_span()
    kvlist = {"kvlistValue": {"values": [{"key": "inner", "value": nested_array(3, "x")}]}}
    attrs = [
        {"key": "deep5", "value": nested_array(5)},
        {"key": "mixed", "value": {"arrayValue": {"values": [kvlist, {"intValue": "7"}]}}},
    ]
    response = export_spans(service, protocol, [span_json(trace, span, attributes=attrs)])
    assert response.partial_success.rejected_spans == 0
    rows = spans_of_test(service, "span_id, attributes")
    assert rows == [
        {
            "span_id": span.hex(),
            "attributes": {"deep5": nested_python(5), "mixed": [{"inner": nested_python(3, "x")}, 7]},
        }
    ]
    assert_serving(service)


def test_attribute_depth_limit_is_exact(service):
    trace = new_trace()
    at_limit, over_limit = new_span(), new_span()
    spans = [
        span_json(trace, at_limit, attributes=[{"key": "d", "value": nested_array(MAX_ATTRIBUTE_DEPTH)}]),
        span_json(
            trace, over_limit, attributes=[{"key": "d", "value": nested_array(MAX_ATTRIBUTE_DEPTH + 1)}]
        ),
    ]
    response = export_spans(service, "http/protobuf", spans)
    assert response.partial_success.rejected_spans == 1
    assert over_limit.hex() in response.partial_success.error_message
    rows = spans_of_test(service, "span_id, attributes->'d' AS d")
    assert rows == [{"span_id": at_limit.hex(), "d": nested_python(MAX_ATTRIBUTE_DEPTH)}]
    assert_serving(service)


def _deep_protobuf_request(levels: int) -> bytes:
    """An export whose one span has an attribute `levels` arrays deep, encoded by hand."""
    value = _len_field(1, b"leaf")  # AnyValue.string_value
    for _ in range(levels):
        value = _len_field(5, _len_field(1, value))  # AnyValue.array_value -> ArrayValue.values
    key_value = _len_field(1, b"deep") + _len_field(2, value)
    span = span_proto(span_json(new_trace(), new_span())).SerializeToString() + _len_field(9, key_value)
    resource = request_proto([]).resource_spans[0].resource.SerializeToString()
    resource_spans = _len_field(1, resource) + _len_field(2, _len_field(2, span))
    return _len_field(1, resource_spans)


def test_hand_encoded_protobuf_is_what_protobuf_decodes(service):
    """The control for the deep case: the same hand encoding at a sane depth is a valid export."""
    body = _deep_protobuf_request(3)
    request = ExportTraceServiceRequest.FromString(body)
    value = request.resource_spans[0].scope_spans[0].spans[0].attributes[0].value
    assert value.array_value.values[0].array_value.values[0].array_value.values[0].string_value == "leaf"
    reply = post_otlp(service, body, PROTOBUF)
    assert reply.status_code == 200
    rows = spans_of_test(service, "attributes")
    assert rows == [{"attributes": {"deep": nested_python(3)}}]


def test_protobuf_nested_2000_deep_is_400(service):
    body = _deep_protobuf_request(2000)
    message = protobuf_status(post_otlp(service, body, PROTOBUF), 400, code_pb2.INVALID_ARGUMENT)
    assert "not a valid protobuf ExportTraceServiceRequest" in message
    assert stored(service) == set()
    assert_serving(service)


def test_json_5000_nested_arrays_is_never_a_server_error(service):
    good = new_span()
    trace = new_trace()
    head = orjson.dumps(request_json([span_json(trace, good), span_json(trace, new_span())]))
    marker = b'"name":"op","kind":2'
    # Replace the second span's name by 5000 nested arrays.
    index = head.rindex(marker)
    body = head[:index] + b'"name":' + b"[" * 5000 + b"]" * 5000 + head[index + len(b'"name":"op"') :]
    reply = post_otlp(service, body, JSON)
    if reply.status_code == 400:
        assert "JSON" in json_status(reply, 400, code_pb2.INVALID_ARGUMENT)
        assert stored(service) == set()
    else:
        assert reply.status_code == 200, reply.text
        response = json_format.Parse(reply.text, ExportTraceServiceResponse())
        assert response.partial_success.rejected_spans == 1
        assert stored(service) == {(trace.hex(), good.hex())}
    assert_serving(service)


def test_json_nesting_within_json_limits_but_past_protobuf_limits_rejects_span(service):
    """200 OTLP arrayValue levels: fine for the JSON parser, too deep for json_format: span rejected."""
    trace, good, deep = new_trace(), new_span(), new_span()
    spans = [
        span_json(trace, deep, attributes=[{"key": "nest", "value": nested_array(200)}]),
        span_json(trace, good),
    ]
    # The standard library encoder: orjson refuses to *write* more than 255 levels.
    reply = post_otlp(service, json.dumps(request_json(spans)).encode(), JSON)
    assert reply.status_code == 200, reply.text
    response = json_format.Parse(reply.text, ExportTraceServiceResponse())
    assert response.partial_success.rejected_spans == 1
    assert response.partial_success.error_message.startswith(f"1 span(s) rejected: span {deep.hex()}: ")
    assert "too deep" in response.partial_success.error_message.lower()
    assert stored(service) == {(trace.hex(), good.hex())}
    assert_serving(service)


# ---------------------------------------------------------------------------------------------------
# Invalid UTF-8.


def _invalid_utf8_protobuf() -> bytes:
    placeholder = b"PLACEHOLDER-NAME"
    body = request_proto([span_json(new_trace(), new_span(), name=placeholder.decode())]).SerializeToString()
    assert body.count(placeholder) == 1
    broken = body.replace(placeholder, b"\xff\xfe" + placeholder[2:])
    assert len(broken) == len(body)
    return broken


def test_protobuf_string_with_invalid_utf8_is_400(service):
    message = protobuf_status(
        post_otlp(service, _invalid_utf8_protobuf(), PROTOBUF), 400, code_pb2.INVALID_ARGUMENT
    )
    assert "not a valid protobuf ExportTraceServiceRequest" in message
    assert "UTF-8" in message
    assert stored(service) == set()
    assert_serving(service)


@pytest.mark.parametrize(
    "replacement",
    [pytest.param(b'"\xff\xfeop"', id="raw-invalid-bytes"), pytest.param(b'"\\ud800"', id="lone-surrogate")],
)
def test_json_with_invalid_utf8_is_400(service, replacement):
    body = orjson.dumps(request_json([span_json(new_trace(), new_span())]))
    body = body.replace(b'"op"', replacement)
    message = json_status(post_otlp(service, body, JSON), 400, code_pb2.INVALID_ARGUMENT)
    assert message.startswith("body is not valid JSON")
    assert stored(service) == set()
    assert_serving(service)


# ---------------------------------------------------------------------------------------------------
# gRPC bytes that grpc itself cannot deserialize.


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"\xff\xff\xff", id="garbage"),
        pytest.param("invalid-utf8", id="invalid-utf8"),
        pytest.param("deep-2000", id="nested-2000-deep"),
    ],
)
def test_grpc_undeserializable_request_fails_and_server_keeps_serving(service, payload):
    if payload == "invalid-utf8":
        payload = _invalid_utf8_protobuf()
    elif payload == "deep-2000":
        payload = _deep_protobuf_request(2000)
    with grpc_channel(service) as channel:
        call = channel.unary_unary(EXPORT_METHOD, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as raised:
            call(payload, timeout=20)
    assert raised.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT)
    assert "ExportTraceServiceRequest" in raised.value.details()
    assert stored(service) == set()
    assert_serving(service)


def test_grpc_raw_bytes_call_of_a_valid_request_succeeds(service):
    """The control for the raw-bytes cases: the same raw call with a valid request is stored."""
    trace, span = new_trace(), new_span()
    with grpc_channel(service) as channel:
        call = channel.unary_unary(EXPORT_METHOD, request_serializer=None, response_deserializer=None)
        raw = call(request_proto([span_json(trace, span)]).SerializeToString(), timeout=20)
    assert ExportTraceServiceResponse.FromString(raw) == ExportTraceServiceResponse()
    assert stored(service) == {(trace.hex(), span.hex())}


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_client_that_gives_up_while_its_export_waits_for_commit_leaves_ingest_running(service, protocol):
    """A client whose deadline passes while its export waits for the commit: the export, received
    whole, is stored all the same, and later exports are still served. (Until the receivers kept
    the commit's future out of the handler's cancellation, the span writer's thread died here and
    every later export waited for ever.)"""
    trace, span = new_trace(), new_span()
    body = request_proto([span_json(trace, span, name="impatient")])
    with service.store._write_lock:  # the store's commits wait while the test holds it
        if protocol == "grpc":
            with grpc_channel(service) as channel, pytest.raises(grpc.RpcError) as raised:
                trace_service_pb2_grpc.TraceServiceStub(channel).Export(body, timeout=0.5)
            assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        else:
            with pytest.raises(httpx.TimeoutException):
                post_otlp(service, body.SerializeToString(), PROTOBUF, timeout=0.5)
        time.sleep(0.3)  # the server notices the client is gone and cancels the handler
    assert_serving(service)
    assert stored(service) == {(trace.hex(), span.hex())}
