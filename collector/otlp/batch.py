"""Decoding one OTLP `ExportTraceServiceRequest` into Arrow tables ready for the store.

This is the ingest hot path: one walk over each span and its attributes, columns appended to
plain lists, one Arrow table per request. A span that breaks the OTLP rules (ids of the wrong
length, a timestamp past int64, attribute values nested absurdly deep) is rejected alone and
counted; the rest of the request is kept.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
import pyarrow as pa
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from collector.schema.tables import SPAN_EVENTS, SPANS


class Redactor(Protocol):
    """What the decoders need of the ingest redactor (`processors/redaction.py`): one text, and the
    attribute maps of a whole export redacted in place."""

    def redact(self, text: str) -> str: ...

    def redact_dicts(self, attributes: Iterable[dict[str, Any]]) -> None: ...


MAX_ATTRIBUTE_DEPTH = 32
MAX_REPORTED_ERRORS = 5
_INT64_MAX = (1 << 63) - 1
_ZERO_TRACE_ID = bytes(16)
_ZERO_SPAN_ID = bytes(8)
# OTLP span flags (bits 8 and 9): whether the span says if its parent is remote, and if it is.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
# Kinds whose parent is remote by definition, for senders that do not set the flags (older SDKs).
_REMOTE_PARENT_KINDS = (2, 5)  # SERVER, CONSUMER

SPAN_KINDS = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
STATUS_CODES = ("UNSET", "OK", "ERROR")

# Rows are built in the tables' own shapes (nanosecond timestamps, as OTLP sends them).
SPANS_SCHEMA = SPANS.arrow_schema()
EVENTS_SCHEMA = SPAN_EVENTS.arrow_schema()


class SpanRejected(ValueError):
    """One span breaks the OTLP rules; it is dropped alone and counted as rejected."""


@dataclass
class SpanBatch:
    """The stored form of one export: Arrow tables of its accepted spans and their events."""

    spans: pa.Table
    events: pa.Table
    rejected: int = 0
    errors: list[str] = field(default_factory=list)
    # Rows of `spans` whose parent is in another process: each is its service's entry into the
    # trace (e.g. behind a traced gateway), which assembly may take for the trace's root.
    entry_rows: list[int] = field(default_factory=list)

    @property
    def accepted(self) -> int:
        return self.spans.num_rows

    def error_message(self) -> str:
        """The message for OTLP partial success: how many spans were rejected and why."""
        if not self.rejected:
            return ""
        more = "" if len(self.errors) >= self.rejected else f" (first {len(self.errors)} shown)"
        return f"{self.rejected} span(s) rejected{more}: " + "; ".join(self.errors)


def empty_batch() -> SpanBatch:
    return SpanBatch(SPANS_SCHEMA.empty_table(), EVENTS_SCHEMA.empty_table())


def any_value(value: AnyValue, depth: int = 0) -> Any:
    """An OTLP AnyValue as a JSON-ready Python value (bytes become base64 text)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        return value.double_value
    if kind == "bool_value":
        return value.bool_value
    if kind is None:
        return None
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if depth >= MAX_ATTRIBUTE_DEPTH:
        raise SpanRejected(f"attribute value nested deeper than {MAX_ATTRIBUTE_DEPTH} levels")
    if kind == "array_value":
        return [any_value(item, depth + 1) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value, depth + 1) for kv in value.kvlist_value.values}
    raise SpanRejected(f"unknown AnyValue kind {kind}")


def attributes_dict(attributes: Any) -> dict[str, Any]:
    """A repeated KeyValue field as a dict (a repeated key keeps its last value)."""
    # The scalar kinds are inlined: this loop runs for every attribute of every span received.
    result: dict[str, Any] = {}
    for kv in attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind == "string_value":
            result[kv.key] = value.string_value
        elif kind == "int_value":
            result[kv.key] = value.int_value
        elif kind == "double_value":
            result[kv.key] = value.double_value
        else:
            result[kv.key] = any_value(value)
    return result


def json_column(values: list[dict[str, Any]]) -> list[str]:
    """Attribute maps as JSON text, the stored form (orjson writes NaN and infinities as null, so
    the text is always valid JSON)."""
    return [orjson.dumps(value).decode() for value in values]


def _check_id(raw: bytes, size: int, zero: bytes, what: str, required: bool) -> str | None:
    if not raw:
        if required:
            raise SpanRejected(f"{what} is missing")
        return None
    if len(raw) != size:
        raise SpanRejected(f"{what} must be {size} bytes, got {len(raw)}")
    if raw == zero:
        if required:
            raise SpanRejected(f"{what} is all zeroes")
        return None
    return raw.hex()


def _check_time(ns: int, what: str) -> int:
    if ns > _INT64_MAX:
        raise SpanRejected(f"{what} {ns} is out of range")
    return ns


def _links_json(links: Any, redactor: Redactor | None) -> str | None:
    if not links:
        return None
    return orjson.dumps(
        [
            {
                "trace_id": link.trace_id.hex(),
                "span_id": link.span_id.hex(),
                "trace_state": link.trace_state,
                "attributes": _redacted(attributes_dict(link.attributes), redactor),
            }
            for link in links
        ]
    ).decode()


def _service_name(resource_attributes: dict[str, Any]) -> str:
    name = resource_attributes.get("service.name")
    return name if isinstance(name, str) and name else "unknown_service"


def _redacted(attributes: dict[str, Any], redactor: Redactor | None) -> dict[str, Any]:
    if redactor is not None:
        redactor.redact_dicts([attributes])
    return attributes


def decode_request(
    request: ExportTraceServiceRequest, source: str = "otlp", redactor: Redactor | None = None
) -> SpanBatch:
    """Decode every span of an export; invalid spans are rejected one by one, never the batch.
    With a `redactor`, every attribute value (resource, span, event, link) and status message is
    redacted before it reaches the tables (the spans' and events' values in one pass)."""
    spans: dict[str, list[Any]] = {name: [] for name in SPANS_SCHEMA.names}
    events: dict[str, list[Any]] = {name: [] for name in EVENTS_SCHEMA.names}
    entry_rows: list[int] = []
    rejected = 0
    errors: list[str] = []
    received_at = time.time_ns()

    for resource_spans in request.resource_spans:
        try:
            resource = _redacted(attributes_dict(resource_spans.resource.attributes), redactor)
        except SpanRejected as exc:
            count = sum(len(s.spans) for s in resource_spans.scope_spans)
            rejected += count
            if len(errors) < MAX_REPORTED_ERRORS:
                errors.append(f"resource of {count} span(s): {exc}")
            continue
        resource_json = orjson.dumps(resource).decode()
        service_name = _service_name(resource)
        for scope_spans in resource_spans.scope_spans:
            scope_name = scope_spans.scope.name or None
            scope_version = scope_spans.scope.version or None
            for span in scope_spans.spans:
                try:
                    trace_id = _check_id(span.trace_id, 16, _ZERO_TRACE_ID, "trace_id", True)
                    span_id = _check_id(span.span_id, 8, _ZERO_SPAN_ID, "span_id", True)
                    parent_id = _check_id(span.parent_span_id, 8, _ZERO_SPAN_ID, "parent_span_id", False)
                    start = _check_time(span.start_time_unix_nano, "start_time_unix_nano")
                    end = _check_time(span.end_time_unix_nano, "end_time_unix_nano")
                    attrs = attributes_dict(span.attributes)
                    links = _links_json(span.links, redactor)
                    span_events = [
                        (
                            _check_time(event.time_unix_nano, "event time_unix_nano"),
                            event.name,
                            attributes_dict(event.attributes),
                        )
                        for event in span.events
                    ]
                except SpanRejected as exc:
                    rejected += 1
                    if len(errors) < MAX_REPORTED_ERRORS:
                        errors.append(f"span {span.span_id.hex() or '?'}: {exc}")
                    continue
                kind = span.kind
                if parent_id is not None:
                    flags = span.flags
                    if (flags & _IS_REMOTE) if (flags & _HAS_IS_REMOTE) else (kind in _REMOTE_PARENT_KINDS):
                        entry_rows.append(len(spans["trace_id"]))
                spans["trace_id"].append(trace_id)
                spans["span_id"].append(span_id)
                spans["parent_span_id"].append(parent_id)
                spans["name"].append(span.name)
                spans["kind"].append(SPAN_KINDS[kind] if 0 <= kind < len(SPAN_KINDS) else "UNSPECIFIED")
                spans["service_name"].append(service_name)
                spans["start_time"].append(start)
                spans["end_time"].append(end)
                spans["duration_ms"].append((end - start) / 1e6)
                code = span.status.code
                spans["status_code"].append(STATUS_CODES[code] if 0 <= code < len(STATUS_CODES) else "UNSET")
                message = span.status.message or None
                if message is not None and redactor is not None:
                    message = redactor.redact(message)
                spans["status_message"].append(message)
                spans["attributes"].append(attrs)
                spans["resource_attributes"].append(resource_json)
                spans["scope_name"].append(scope_name)
                spans["scope_version"].append(scope_version)
                spans["trace_state"].append(span.trace_state or None)
                spans["links"].append(links)
                spans["received_at"].append(received_at)
                for event_time, event_name, event_attrs in span_events:
                    events["trace_id"].append(trace_id)
                    events["span_id"].append(span_id)
                    events["time"].append(event_time)
                    events["name"].append(event_name)
                    events["attributes"].append(event_attrs)
                    events["source"].append(source)
                    events["received_at"].append(received_at)

    if redactor is not None:
        redactor.redact_dicts(spans["attributes"] + events["attributes"])
    spans["attributes"] = json_column(spans["attributes"])
    events["attributes"] = json_column(events["attributes"])
    return SpanBatch(
        spans=pa.table(spans, schema=SPANS_SCHEMA),
        events=pa.table(events, schema=EVENTS_SCHEMA),
        rejected=rejected,
        errors=errors,
        entry_rows=entry_rows,
    )


def concat_batches(batches: list[SpanBatch]) -> SpanBatch:
    """Many exports as one batch, for a group commit (Arrow concatenation copies nothing)."""
    if len(batches) == 1:
        return batches[0]
    entry_rows: list[int] = []
    offset = 0
    for b in batches:
        entry_rows += [offset + row for row in b.entry_rows]
        offset += b.spans.num_rows
    return SpanBatch(
        spans=pa.concat_tables([b.spans for b in batches]),
        events=pa.concat_tables([b.events for b in batches]),
        rejected=sum(b.rejected for b in batches),
        entry_rows=entry_rows,
    )


__all__ = [
    "EVENTS_SCHEMA",
    "SPANS_SCHEMA",
    "SpanBatch",
    "SpanRejected",
    "any_value",
    "attributes_dict",
    "concat_batches",
    "decode_request",
    "empty_batch",
    "json_column",
]
