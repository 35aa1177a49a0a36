"""OTLP/JSON bodies to protobuf requests, span by span (traces) or record by record (logs).

OTLP/JSON is proto3 JSON with three twists (OTLP spec, "JSON Protobuf Encoding"): trace and span
ids are hex, not base64; enums are integers; unknown fields must be ignored. Each span or log record
is parsed on its own with protobuf's `json_format`, so one malformed item is rejected alone. Ids are
also accepted in base64, the form plain proto3 JSON tools produce.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import orjson
from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from collector.otlp.batch import MAX_REPORTED_ERRORS

_HEX = re.compile(r"[0-9a-fA-F]*")
R = TypeVar("R", ExportTraceServiceRequest, ExportLogsServiceRequest)


def _reason(exc: Exception) -> str:
    """json_format wraps errors as "Failed to parse X field: ..." once per level: keep the cause."""
    text = str(exc)
    while text.startswith("Failed to parse ") and ": " in text:
        text = text.split(": ", 1)[1]
    return text[:200]


_PARSE_ERRORS = (json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError, KeyError)


class UndecodableBody(ValueError):
    """The body is not OTLP at all (not JSON, not protobuf, wrong shape): the whole request fails."""


@dataclass
class ParsedJson(Generic[R]):
    """The valid part of an OTLP/JSON body as protobuf, plus what was rejected on the way."""

    request: R
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    def reject(self, count: int, message: str) -> None:
        self.rejected += count
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append(message)


def _get(obj: dict[str, Any], camel: str, snake: str, default: Any = None) -> Any:
    value = obj.get(camel)
    return obj.get(snake, default) if value is None else value


def decode_id(text: Any, size: int, what: str) -> bytes:
    """An id as OTLP/JSON carries it: hex (the spec), or base64 (plain proto3 JSON)."""
    if text is None or text == "":
        return b""
    if not isinstance(text, str):
        raise ValueError(f"{what} must be a string")
    if len(text) % 2 == 0 and _HEX.fullmatch(text):
        # Hex of any length is hex (a valid base64 id always ends in "="): a wrong length is then
        # reported as such by the decoder instead of as "neither hex nor base64".
        return bytes.fromhex(text)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} {text[:40]!r} is neither hex nor base64") from None


def _parse_span(span_obj: Any) -> Span:
    if not isinstance(span_obj, dict):
        raise ValueError("span is not a JSON object")
    span_obj = dict(span_obj)
    trace_id = decode_id(_pop(span_obj, "traceId", "trace_id"), 16, "traceId")
    span_id = decode_id(_pop(span_obj, "spanId", "span_id"), 8, "spanId")
    parent_id = decode_id(_pop(span_obj, "parentSpanId", "parent_span_id"), 8, "parentSpanId")
    links = span_obj.pop("links", None) or []
    span = Span()
    json_format.ParseDict(span_obj, span, ignore_unknown_fields=True)
    span.trace_id, span.span_id, span.parent_span_id = trace_id, span_id, parent_id
    if not isinstance(links, list):
        raise ValueError("links must be a list")
    for link_obj in links:
        if not isinstance(link_obj, dict):
            raise ValueError("link is not a JSON object")
        link_obj = dict(link_obj)
        link_trace = decode_id(_pop(link_obj, "traceId", "trace_id"), 16, "link traceId")
        link_span = decode_id(_pop(link_obj, "spanId", "span_id"), 8, "link spanId")
        link = span.links.add()
        json_format.ParseDict(link_obj, link, ignore_unknown_fields=True)
        link.trace_id, link.span_id = link_trace, link_span
    return span


def _parse_log_record(record_obj: Any) -> LogRecord:
    if not isinstance(record_obj, dict):
        raise ValueError("log record is not a JSON object")
    record_obj = dict(record_obj)
    trace_id = decode_id(_pop(record_obj, "traceId", "trace_id"), 16, "traceId")
    span_id = decode_id(_pop(record_obj, "spanId", "span_id"), 8, "spanId")
    record = LogRecord()
    json_format.ParseDict(record_obj, record, ignore_unknown_fields=True)
    record.trace_id, record.span_id = trace_id, span_id
    return record


def _pop(obj: dict[str, Any], camel: str, snake: str) -> Any:
    value = obj.pop(camel, None)
    other = obj.pop(snake, None)
    return other if value is None else value


def _parse_into(target: Message, obj: Any, what: str) -> None:
    if obj is None:
        return
    if not isinstance(obj, dict):
        raise ValueError(f"{what} is not a JSON object")
    json_format.ParseDict(obj, target, ignore_unknown_fields=True)


def _list(obj: dict[str, Any], *names: str) -> list[Any]:
    for name in names:
        value = obj.get(name)
        if value is not None:
            if not isinstance(value, list):
                raise UndecodableBody(f"{name} must be a JSON array")
            return value
    return []


@dataclass(frozen=True)
class _Signal:
    """Where one signal keeps its items, as JSON names (camelCase first) and protobuf fields."""

    resources: tuple[str, ...]
    scopes: tuple[str, ...]
    items: tuple[str, ...]
    resource_field: str
    scope_field: str
    item_field: str
    item: str  # what an item is called in error messages
    parse_item: Callable[[Any], Message]


_SPANS = _Signal(
    ("resourceSpans", "resource_spans"),
    ("scopeSpans", "scope_spans", "instrumentationLibrarySpans"),
    ("spans",),
    "resource_spans",
    "scope_spans",
    "spans",
    "span",
    _parse_span,
)
_LOGS = _Signal(
    ("resourceLogs", "resource_logs"),
    ("scopeLogs", "scope_logs", "instrumentationLibraryLogs"),
    ("logRecords", "log_records"),
    "resource_logs",
    "scope_logs",
    "log_records",
    "log record",
    _parse_log_record,
)


def _parse(body: bytes, parsed: ParsedJson[R], signal: _Signal) -> ParsedJson[R]:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise UndecodableBody(f"body is not valid JSON: {exc}") from None
    resources_name, scopes_name = signal.resources[0], signal.scopes[0]
    if not isinstance(document, dict):
        raise UndecodableBody(f"body must be a JSON object with {resources_name}")
    for rs_obj in _list(document, *signal.resources):
        if not isinstance(rs_obj, dict):
            raise UndecodableBody(f"{resources_name} entries must be JSON objects")
        scope_objs = _list(rs_obj, *signal.scopes)
        if not all(isinstance(ss_obj, dict) for ss_obj in scope_objs):
            raise UndecodableBody(f"{scopes_name} entries must be JSON objects")
        items_per_scope = [_list(ss_obj, *signal.items) for ss_obj in scope_objs]
        resource = Resource()
        try:
            _parse_into(resource, rs_obj.get("resource"), "resource")
        except _PARSE_ERRORS as exc:
            count = sum(len(item_objs) for item_objs in items_per_scope)
            parsed.reject(count, f"resource of {count} {signal.item}(s): {exc}")
            continue
        resource_items = getattr(parsed.request, signal.resource_field).add()
        resource_items.resource.CopyFrom(resource)
        resource_items.schema_url = str(_get(rs_obj, "schemaUrl", "schema_url", ""))
        for ss_obj, item_objs in zip(scope_objs, items_per_scope, strict=True):
            scope = InstrumentationScope()
            try:
                _parse_into(scope, _get(ss_obj, "scope", "instrumentationLibrary"), "scope")
            except _PARSE_ERRORS as exc:
                parsed.reject(len(item_objs), f"scope of {len(item_objs)} {signal.item}(s): {exc}")
                continue
            scope_items = getattr(resource_items, signal.scope_field).add()
            scope_items.scope.CopyFrom(scope)
            items = getattr(scope_items, signal.item_field)
            for item_obj in item_objs:
                try:
                    items.append(signal.parse_item(item_obj))
                except _PARSE_ERRORS as exc:
                    span_id = item_obj.get("spanId", "?") if isinstance(item_obj, dict) else "?"
                    parsed.reject(1, f"{signal.item} {str(span_id)[:32]}: {_reason(exc)}")
    return parsed


def parse_json_request(body: bytes) -> ParsedJson[ExportTraceServiceRequest]:
    """Parse an OTLP/JSON `ExportTraceServiceRequest`; raises UndecodableBody when it is not one."""
    return _parse(body, ParsedJson(ExportTraceServiceRequest()), _SPANS)


def parse_json_logs_request(body: bytes) -> ParsedJson[ExportLogsServiceRequest]:
    """Parse an OTLP/JSON `ExportLogsServiceRequest`; raises UndecodableBody when it is not one."""
    return _parse(body, ParsedJson(ExportLogsServiceRequest()), _LOGS)
