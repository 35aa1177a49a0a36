"""Property tests for the OTLP decoders: any input gives a result or a clear rejection, never a crash.

Protobuf side: arbitrary bytes and generated requests through `decode_request`, checked against a
small model of the rules (id lengths, int64 timestamps, attribute nesting depth) and then written
to a real DuckDB store. JSON side: arbitrary documents and OTLP/JSON-shaped documents through
`parse_json_request`.
"""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from collector.otlp.batch import (
    MAX_ATTRIBUTE_DEPTH,
    SPAN_KINDS,
    STATUS_CODES,
    SpanBatch,
    concat_batches,
    decode_request,
)
from collector.otlp.json_request import UndecodableBody, parse_json_request
from collector.store.duckdb_store import DuckDBStore

INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
INT64 = st.integers(-(1 << 63), INT64_MAX)
HEX32 = re.compile(r"^[0-9a-f]{32}$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def span_count(request: ExportTraceServiceRequest) -> int:
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, picked with the given weights."""
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


# --- attribute values: a model tree, built into AnyValue and converted to the expected JSON -------

scalar_values = st.one_of(
    st.tuples(st.just("s"), st.text(max_size=20)),
    st.tuples(st.just("i"), INT64),
    st.tuples(st.just("d"), st.floats(allow_nan=True, allow_infinity=True)),
    st.tuples(st.just("b"), st.booleans()),
    st.tuples(st.just("y"), st.binary(max_size=20)),
    st.tuples(st.just("n"), st.none()),
)
keys = st.text(max_size=8)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.tuples(st.just("a"), st.lists(children, max_size=4)),
        st.tuples(st.just("k"), st.lists(st.tuples(keys, children), max_size=4)),
    )


@st.composite
def deep_values(draw: st.DrawFn) -> Any:
    """A scalar wrapped in 0..40 arrays / kvlists: crosses MAX_ATTRIBUTE_DEPTH both ways."""
    node = draw(scalar_values)
    for _ in range(draw(st.integers(0, 40))):
        node = ("a", [node]) if draw(st.booleans()) else ("k", [(draw(keys), node)])
    return node


shallow_values = st.recursive(scalar_values, _containers, max_leaves=12)
values = st.one_of(shallow_values, deep_values())
# Mostly shallow attributes, sometimes deep values: crossing the depth limit rejects the span.
attribute_lists = weighted(
    (4, st.lists(st.tuples(keys, shallow_values), max_size=5)),
    (1, st.lists(st.tuples(keys, values), max_size=5)),
)


def build_value(node: Any, target: AnyValue) -> None:
    kind, payload = node
    if kind == "s":
        target.string_value = payload
    elif kind == "i":
        target.int_value = payload
    elif kind == "d":
        target.double_value = payload
    elif kind == "b":
        target.bool_value = payload
    elif kind == "y":
        target.bytes_value = payload
    elif kind == "a":
        array = target.array_value
        array.SetInParent()
        for child in payload:
            build_value(child, array.values.add())
    elif kind == "k":
        kvlist = target.kvlist_value
        kvlist.SetInParent()
        for key, child in payload:
            kv = kvlist.values.add()
            kv.key = key
            build_value(child, kv.value)
    # "n": an AnyValue with no value set


def expected_json(node: Any) -> Any:
    kind, payload = node
    if kind == "d":
        return payload if math.isfinite(payload) else None
    if kind == "y":
        return base64.b64encode(payload).decode("ascii")
    if kind == "n":
        return None
    if kind == "a":
        return [expected_json(child) for child in payload]
    if kind == "k":
        return {key: expected_json(child) for key, child in payload}
    return payload


def container_depth(node: Any) -> int:
    """How many arrays / kvlists are nested on the deepest path of this value."""
    kind, payload = node
    if kind == "a":
        return 1 + max((container_depth(c) for c in payload), default=0)
    if kind == "k":
        return 1 + max((container_depth(c) for _, c in payload), default=0)
    return 0


def attrs_ok(attributes: list[tuple[str, Any]]) -> bool:
    return all(container_depth(node) <= MAX_ATTRIBUTE_DEPTH for _, node in attributes)


def build_attributes(attributes: list[tuple[str, Any]], target: Any) -> None:
    for key, node in attributes:
        kv = target.add()
        kv.key = key
        build_value(node, kv.value)


# --- spans and requests --------------------------------------------------------------------------


def ids(size: int) -> st.SearchStrategy[bytes]:
    """Mostly well-formed ids (so many spans are accepted), else any length 0..20 or all zeroes."""
    valid = st.integers(1, (1 << (8 * size)) - 1).map(lambda n: n.to_bytes(size, "big"))
    return weighted((7, valid), (2, st.binary(max_size=20)), (1, st.just(bytes(size))))


timestamps = weighted(
    (6, st.integers(0, INT64_MAX)),
    (1, st.integers(INT64_MAX - 2, INT64_MAX + 2)),
    (1, st.integers(0, UINT64_MAX)),
)

span_models = st.fixed_dictionaries(
    {
        "trace_id": ids(16),
        "span_id": ids(8),
        "parent_span_id": st.one_of(st.just(b""), ids(8)),
        "name": st.text(max_size=30),
        "kind": st.integers(-(1 << 31), (1 << 31) - 1) | st.integers(-2, 8),
        "status_code": st.integers(-(1 << 31), (1 << 31) - 1) | st.integers(-1, 4),
        "status_message": st.text(max_size=10),
        "start": timestamps,
        "end": timestamps,
        "attributes": attribute_lists,
        "events": st.lists(st.tuples(timestamps, st.text(max_size=10), attribute_lists), max_size=3),
        "links": st.lists(
            st.tuples(st.binary(max_size=20), st.binary(max_size=20), attribute_lists), max_size=2
        ),
    }
)
request_models = st.lists(
    st.tuples(attribute_lists, st.lists(st.lists(span_models, max_size=4), max_size=3)), max_size=3
)


def build_request(model: Any) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for resource_attrs, scopes in model:
        rs = request.resource_spans.add()
        build_attributes(resource_attrs, rs.resource.attributes)
        for number, spans in enumerate(scopes):
            ss = rs.scope_spans.add()
            ss.scope.name = f"scope-{number}"
            for m in spans:
                span = ss.spans.add()
                span.trace_id, span.span_id, span.parent_span_id = (
                    m["trace_id"],
                    m["span_id"],
                    m["parent_span_id"],
                )
                span.name = m["name"]
                span.kind = m["kind"]
                span.status.code = m["status_code"]
                span.status.message = m["status_message"]
                span.start_time_unix_nano, span.end_time_unix_nano = m["start"], m["end"]
                build_attributes(m["attributes"], span.attributes)
                for time_ns, name, attrs in m["events"]:
                    event = span.events.add()
                    event.time_unix_nano, event.name = time_ns, name
                    build_attributes(attrs, event.attributes)
                for trace_id, span_id, attrs in m["links"]:
                    link = span.links.add()
                    link.trace_id, link.span_id = trace_id, span_id
                    build_attributes(attrs, link.attributes)
    return request


def span_valid(m: dict[str, Any]) -> bool:
    """The model of the OTLP rules decode_request enforces span by span."""
    return (
        len(m["trace_id"]) == 16
        and m["trace_id"] != bytes(16)
        and len(m["span_id"]) == 8
        and m["span_id"] != bytes(8)
        and len(m["parent_span_id"]) in (0, 8)
        and m["start"] <= INT64_MAX
        and m["end"] <= INT64_MAX
        and attrs_ok(m["attributes"])
        and all(t <= INT64_MAX and attrs_ok(a) for t, _, a in m["events"])
        and all(attrs_ok(a) for _, _, a in m["links"])
    )


def expected_spans(model: Any) -> list[dict[str, Any]]:
    return [
        m
        for resource_attrs, scopes in model
        if attrs_ok(resource_attrs)
        for spans in scopes
        for m in spans
        if span_valid(m)
    ]


# --- protobuf ------------------------------------------------------------------------------------


@PROPS
@given(st.binary(max_size=400))
@example(b"\x0a\x02\x12\x00")  # resource_spans { scope_spans {} }
@example(b"\x0a\x06\x12\x04\x12\x02\x0a\x00")  # one span with nothing set
@example(b"\xff\xff\xff")
def test_arbitrary_bytes_decode_or_reject_every_span(data):
    try:
        request = ExportTraceServiceRequest.FromString(data)
    except DecodeError:
        return
    batch = decode_request(request)
    assert isinstance(batch, SpanBatch)
    assert batch.accepted + batch.rejected == span_count(request)
    assert batch.events.num_rows <= sum(
        len(s.events) for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans
    )


@PROPS
@given(request_models)
def test_generated_requests_match_the_model(model):
    request = build_request(model)
    batch = decode_request(request)
    want = expected_spans(model)
    assert batch.accepted + batch.rejected == span_count(request)
    assert batch.accepted == len(want)
    assert len(batch.errors) <= 5
    if batch.rejected:
        assert batch.errors
        assert batch.error_message().startswith(f"{batch.rejected} span(s) rejected")
    rows = batch.spans.drop_columns(["start_time", "end_time", "received_at"]).to_pylist()
    times = batch.spans.select(["start_time", "end_time"]).cast(
        pa.schema([("start_time", pa.int64()), ("end_time", pa.int64())])
    )
    assert times.column("start_time").to_pylist() == [m["start"] for m in want]
    assert times.column("end_time").to_pylist() == [m["end"] for m in want]
    for row, m in zip(rows, want, strict=True):
        assert HEX32.match(row["trace_id"]) and row["trace_id"] == m["trace_id"].hex()
        assert HEX16.match(row["span_id"]) and row["span_id"] == m["span_id"].hex()
        parent = m["parent_span_id"]
        assert row["parent_span_id"] == (parent.hex() if parent and parent != bytes(8) else None)
        assert row["kind"] == (SPAN_KINDS[m["kind"]] if 0 <= m["kind"] < 6 else "UNSPECIFIED")
        assert row["status_code"] == (
            STATUS_CODES[m["status_code"]] if 0 <= m["status_code"] < 3 else "UNSET"
        )
        assert row["name"] == m["name"]
        assert orjson.loads(row["attributes"]) == {k: expected_json(v) for k, v in m["attributes"]}
        assert isinstance(orjson.loads(row["resource_attributes"]), dict)
        if row["links"] is not None:
            assert len(orjson.loads(row["links"])) == len(m["links"])
    assert batch.events.num_rows == sum(len(m["events"]) for m in want)
    for event in batch.events.drop_columns(["time", "received_at"]).to_pylist():
        assert isinstance(orjson.loads(event["attributes"]), dict)
        assert event["source"] == "otlp"
    # An event arrives with its span: one receive time for the whole export.
    received = set(batch.spans["received_at"].cast("int64").to_pylist())
    assert set(batch.events["received_at"].cast("int64").to_pylist()) <= received


def test_generated_requests_store_and_read_back(tmp_path: Path):
    store = DuckDBStore(tmp_path / "props.duckdb")
    stored = {"spans": 0, "events": 0}

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(request_models)
    def append_one(model):
        batch = decode_request(build_request(model))
        store.append_spans(batch.spans, batch.events)
        stored["spans"] += batch.accepted
        stored["events"] += batch.events.num_rows
        # The stored rows: generated requests may repeat a span (`spans` would show it once).
        spans = store.query("SELECT count(*) FROM received_spans", 1, 30).rows
        events = store.query("SELECT count(*) FROM received_span_events", 1, 30).rows
        # Every stored JSON column is valid DuckDB JSON.
        bad = store.query(
            "SELECT count(*) FROM spans "
            "WHERE NOT json_valid(attributes) OR NOT json_valid(resource_attributes)",
            1,
            30,
        ).rows
        assert spans == [(stored["spans"],)]
        assert events == [(stored["events"],)]
        assert bad == [(0,)]

    try:
        append_one()
        ids_ok = store.query(
            "SELECT count(*) FROM received_spans WHERE regexp_full_match(trace_id, '[0-9a-f]{32}') "
            "AND regexp_full_match(span_id, '[0-9a-f]{16}')",
            1,
            30,
        ).rows
        assert ids_ok == [(stored["spans"],)]
    finally:
        store.close()


# --- OTLP/JSON -----------------------------------------------------------------------------------

json_documents = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=25,
)


@PROPS
@given(json_documents)
def test_arbitrary_json_parses_or_is_undecodable(document):
    try:
        parsed = parse_json_request(dumps(document))
    except UndecodableBody:
        return
    batch = decode_request(parsed.request)
    assert batch.accepted + batch.rejected == span_count(parsed.request)


@PROPS
@given(st.binary(max_size=200))
@example(b"")
@example(b"[]")
@example(b"\xef\xbb\xbf{}")
@example(b'{"resourceSpans": 1}')
def test_arbitrary_bytes_parse_json_or_undecodable(body):
    try:
        parsed = parse_json_request(body)
    except UndecodableBody as exc:
        assert str(exc)
        return
    assert isinstance(parsed.request, ExportTraceServiceRequest)


def _hex_or_b64(raw: bytes) -> st.SearchStrategy[Any]:
    return st.sampled_from([raw.hex(), raw.hex().upper(), base64.b64encode(raw).decode()])


json_ids = st.one_of(
    st.binary(min_size=16, max_size=16).flatmap(_hex_or_b64),
    st.binary(min_size=8, max_size=8).flatmap(_hex_or_b64),
    st.binary(max_size=20).flatmap(_hex_or_b64),
    st.text(max_size=40),
    st.integers(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.just({"x": 1}),
)
json_any_values = st.recursive(
    st.one_of(
        st.fixed_dictionaries({"stringValue": st.text(max_size=10)}),
        st.fixed_dictionaries({"intValue": st.integers(-(1 << 70), 1 << 70).map(str) | st.integers()}),
        st.fixed_dictionaries(
            {
                "doubleValue": st.floats(allow_nan=False, allow_infinity=False)
                | st.sampled_from(["NaN", "Infinity", "-Infinity"])
            }
        ),
        st.fixed_dictionaries({"boolValue": st.booleans() | st.text(max_size=4)}),
        st.fixed_dictionaries(
            {"bytesValue": st.binary(max_size=8).map(lambda b: base64.b64encode(b).decode())}
        ),
        st.fixed_dictionaries({"bytesValue": st.text(max_size=8)}),
        st.just({}),
        json_documents,
    ),
    lambda children: st.one_of(
        st.fixed_dictionaries(
            {"arrayValue": st.fixed_dictionaries({"values": st.lists(children, max_size=3)})}
        ),
        st.fixed_dictionaries(
            {
                "kvlistValue": st.fixed_dictionaries(
                    {"values": st.lists(st.fixed_dictionaries({"key": keys, "value": children}), max_size=3)}
                )
            }
        ),
    ),
    max_leaves=10,
)
json_attributes = st.one_of(
    st.lists(st.fixed_dictionaries({"key": keys, "value": json_any_values}), max_size=4),
    json_documents,
)
json_times = st.one_of(
    st.integers(0, UINT64_MAX).map(str),
    st.integers(-5, UINT64_MAX * 2),
    st.text(max_size=6),
    st.floats(allow_nan=False, allow_infinity=False),
)
json_spans = st.fixed_dictionaries(
    {
        "traceId": json_ids,
        "spanId": json_ids,
        "name": st.text(max_size=10) | st.integers(),
    },
    optional={
        "parentSpanId": json_ids,
        "kind": st.integers(-3, 9) | st.sampled_from(["SPAN_KIND_SERVER", "bogus"]),
        "startTimeUnixNano": json_times,
        "endTimeUnixNano": json_times,
        "attributes": json_attributes,
        "status": st.fixed_dictionaries({"code": st.integers(-2, 5)}) | json_documents,
        "events": st.lists(
            st.fixed_dictionaries({"timeUnixNano": json_times, "name": st.text(max_size=5)}), max_size=2
        )
        | json_documents,
        "links": st.lists(
            st.fixed_dictionaries(
                {"traceId": json_ids, "spanId": json_ids}, optional={"attributes": json_attributes}
            ),
            max_size=2,
        )
        | json_documents,
        "unknownField": json_documents,
    },
)
json_requests = st.fixed_dictionaries(
    {
        "resourceSpans": st.lists(
            st.fixed_dictionaries(
                {
                    "scopeSpans": st.lists(
                        st.fixed_dictionaries(
                            {"spans": st.lists(json_spans, max_size=4)},
                            optional={
                                "scope": st.fixed_dictionaries({"name": st.text(max_size=5)}) | json_documents
                            },
                        ),
                        max_size=3,
                    )
                },
                optional={
                    "resource": st.fixed_dictionaries({"attributes": json_attributes}) | json_documents,
                    "schemaUrl": st.text(max_size=5),
                },
            ),
            max_size=3,
        )
    }
)


def dumps(document: Any) -> bytes:
    """JSON text as any client may send it (integers of any size, unlike orjson.dumps)."""
    return json.dumps(document, allow_nan=False).encode()


def json_span_total(document: dict[str, Any]) -> int:
    return sum(len(ss["spans"]) for rs in document["resourceSpans"] for ss in rs["scopeSpans"])


@PROPS
@given(json_requests)
def test_otlp_json_shaped_documents_account_for_every_span(document):
    parsed = parse_json_request(dumps(document))
    batch = decode_request(parsed.request)
    assert parsed.rejected + batch.rejected + batch.accepted == json_span_total(document)
    assert len(parsed.errors) <= 5
    for row in batch.spans.select(["trace_id", "span_id", "attributes"]).to_pylist():
        assert HEX32.match(row["trace_id"])
        assert HEX16.match(row["span_id"])
        assert isinstance(orjson.loads(row["attributes"]), dict)


def test_otlp_json_valid_span_with_hex_and_base64_ids():
    trace, span = bytes(range(1, 17)), bytes(range(20, 28))
    document = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            {"traceId": trace.hex(), "spanId": span.hex(), "name": "hex", "kind": 2},
                            {
                                "traceId": base64.b64encode(trace).decode(),
                                "spanId": base64.b64encode(span).decode(),
                                "name": "b64",
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": "1700000000500000000",
                            },
                            {"traceId": "zz", "spanId": span.hex(), "name": "garbage"},
                        ]
                    }
                ],
            }
        ]
    }
    parsed = parse_json_request(dumps(document))
    batch = decode_request(parsed.request)
    assert parsed.rejected == 1 and "traceId" in parsed.errors[0]
    rows = batch.spans.select(
        ["name", "trace_id", "span_id", "service_name", "kind", "duration_ms"]
    ).to_pylist()
    assert [(r["name"], r["trace_id"], r["span_id"], r["service_name"]) for r in rows] == [
        ("hex", trace.hex(), span.hex(), "svc"),
        ("b64", trace.hex(), span.hex(), "svc"),
    ]
    assert rows[0]["kind"] == "SERVER"
    assert rows[1]["duration_ms"] == 500.0


def test_entry_spans_are_those_whose_parent_is_remote():
    # OTLP span flags: 0x100 "the sender says whether the parent is remote", 0x200 "it is". A
    # sender that does not say (flags 0) is taken at its span kind: SERVER and CONSUMER spans have
    # their parent in another process by definition.
    has, remote = 0x100, 0x200
    cases = [  # (name, parent?, flags, kind, entry?)
        ("remote parent", True, has | remote | 0x01, 1, True),
        ("local parent", True, has, 2, False),  # a SERVER span, but the sender says local
        ("unsaid, server", True, 0, 2, True),
        ("unsaid, consumer", True, 0, 5, True),
        ("unsaid, internal", True, 0, 1, False),
        ("unsaid, client", True, 0, 3, False),
        ("root", False, has | remote, 2, False),  # no parent: a root, not an entry
    ]
    spans = [
        {
            "traceId": f"{n + 1:032x}",
            "spanId": f"{n + 1:016x}",
            "name": name,
            "kind": kind,
            "flags": flags,
            **({"parentSpanId": "aa" * 8} if parent else {}),
        }
        for n, (name, parent, flags, kind, _) in enumerate(cases)
    ]
    document = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    want = [name for name, *_, entry in cases if entry]

    from_json = decode_request(parse_json_request(dumps(document)).request)
    names = from_json.spans["name"].to_pylist()
    assert [names[row] for row in from_json.entry_rows] == want

    protobuf = ExportTraceServiceRequest.FromString(
        parse_json_request(dumps(document)).request.SerializeToString()
    )
    first, second = decode_request(protobuf), decode_request(protobuf)
    together = concat_batches([first, second])  # a group commit: rows of the second come after
    names = together.spans["name"].to_pylist()
    assert [names[row] for row in together.entry_rows] == want + want
    assert together.entry_rows[len(want)] >= first.accepted


structural_garbage = json_documents | st.just(5) | st.just("spans")


@PROPS
@given(
    st.fixed_dictionaries(
        {
            "resourceSpans": st.lists(
                st.fixed_dictionaries(
                    {
                        "scopeSpans": st.lists(
                            st.fixed_dictionaries({"spans": structural_garbage}), max_size=2
                        )
                    },
                    optional={"resource": structural_garbage},
                )
                | structural_garbage,
                max_size=3,
            )
            | structural_garbage
        }
    )
)
@example({"resourceSpans": [{"resource": 5, "scopeSpans": [{"spans": 5}]}]})
@example({"resourceSpans": [{"resource": {"attributes": 5}, "scopeSpans": [{"spans": 7}]}]})
def test_otlp_json_with_garbage_structure_is_result_or_undecodable(document):
    try:
        parsed = parse_json_request(dumps(document))
    except UndecodableBody as exc:
        assert str(exc)
        return
    batch = decode_request(parsed.request)
    assert batch.accepted + batch.rejected == span_count(parsed.request)
