"""Decoding one OTLP `ExportLogsServiceRequest` into span events.

GenAI events are LogRecords with an event name (semconv: `LogRecord.event_name`, or the older
`event.name` attribute) whose trace and span ids tie them to a span. Those records become rows of
the events table, exactly like span events, so the mapper reads them from the span they belong
to; the body, where the deprecated message events keep their content, is stored as the `body`
attribute. One kind of event outside any span is kept too: a `gen_ai.evaluation.result` that names
the response it evaluates (`gen_ai.response.id`), which becomes an external score of the trace
holding that response (`LogBatch.evaluations`, collector/feedback/events.py). Everything else a log
export carries (application logs, other events outside any span) is not ours to keep: it is
ignored and counted, not rejected. A record that names an event but breaks
the OTLP rules (ids of the wrong length, a timestamp past int64, values nested absurdly deep) is
rejected alone, like a span.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from collector.otlp.batch import (
    _ZERO_SPAN_ID,
    _ZERO_TRACE_ID,
    EVENTS_SCHEMA,
    MAX_REPORTED_ERRORS,
    SPANS_SCHEMA,
    Redactor,
    SpanBatch,
    SpanRejected,
    _check_id,
    _check_time,
    any_value,
    attributes_dict,
    json_column,
)
from collector.schema.tables import EVALUATION_EVENT

EVENT_NAME_ATTRIBUTE = "event.name"
RESPONSE_ID = "gen_ai.response.id"
BODY_ATTRIBUTE = "body"  # where semconv.mappers.genai looks for an event's body


@dataclass
class LogBatch(SpanBatch):
    """The events of one log export (its spans table is empty), plus the records ignored, and the
    evaluation events that name a response instead of a span (`response_evaluation`'s dicts)."""

    ignored: int = 0
    evaluations: list[dict[str, Any]] = field(default_factory=list)

    @property
    def received(self) -> int:
        return self.events.num_rows + self.rejected + self.ignored + len(self.evaluations)

    def error_message(self) -> str:
        """The partial-success message: rejected records and why, and how many were ignored.

        OTLP lets a server send a message with nothing rejected as a warning, which is what the
        ignored count is: those records were fine, just not events of a span.
        """
        parts = []
        if self.rejected:
            more = "" if len(self.errors) >= self.rejected else f" (first {len(self.errors)} shown)"
            parts.append(f"{self.rejected} log record(s) rejected{more}: " + "; ".join(self.errors))
        if self.ignored:
            parts.append(
                f"{self.ignored} log record(s) ignored: only events (an event name) of a span "
                "(trace and span id) are kept"
            )
        return "; ".join(parts)


def _event_name(record: LogRecord) -> str:
    if record.event_name:
        return record.event_name
    # Before `event_name` (proto v1.5.0) the name was the `event.name` attribute.
    for kv in record.attributes:
        if kv.key == EVENT_NAME_ATTRIBUTE and kv.value.WhichOneof("value") == "string_value":
            return kv.value.string_value
    return ""


def _event_row(record: LogRecord) -> tuple[str, str, int | None, dict[str, Any]] | None:
    """(trace id, span id, time, attributes) of a span's event, None for any other record."""
    trace_id = _check_id(record.trace_id, 16, _ZERO_TRACE_ID, "trace_id", False)
    span_id = _check_id(record.span_id, 8, _ZERO_SPAN_ID, "span_id", False)
    if trace_id is None or span_id is None:
        return None
    ns = record.time_unix_nano or record.observed_time_unix_nano
    event_time = _check_time(ns, "time_unix_nano") if ns else None
    attributes: dict[str, Any] = attributes_dict(record.attributes)
    # The SDK sends an empty AnyValue when a record has no body: that is no body, not a null one.
    if record.body.WhichOneof("value") is not None:
        attributes[BODY_ATTRIBUTE] = any_value(record.body)
    return trace_id, span_id, event_time, attributes


def _response_evaluation(record: LogRecord, name: str, service: str | None) -> dict[str, Any] | None:
    """An evaluation event with no span that names the response it evaluates, as a dict (the
    attributes, `time_us`, `service`), or None for any other record."""
    if name != EVALUATION_EVENT:
        return None
    attributes = attributes_dict(record.attributes)
    if not isinstance(attributes.get(RESPONSE_ID), str) or not attributes[RESPONSE_ID]:
        return None
    ns = record.time_unix_nano or record.observed_time_unix_nano
    return {"attributes": attributes, "time_us": ns // 1000 if ns else None, "service": service}


def _service_name(resource_logs: Any) -> str | None:
    for kv in resource_logs.resource.attributes:
        if kv.key == "service.name" and kv.value.WhichOneof("value") == "string_value":
            return str(kv.value.string_value)
    return None


def decode_logs_request(
    request: ExportLogsServiceRequest, source: str = "log", redactor: Redactor | None = None
) -> LogBatch:
    """Decode the span events of a log export; invalid ones are rejected one by one, the rest of
    the records (no event name, or no span) are ignored. With a `redactor`, attribute values and
    the body are redacted before they reach the table."""
    events: dict[str, list[Any]] = {name: [] for name in EVENTS_SCHEMA.names}
    rejected = ignored = 0
    errors: list[str] = []
    evaluations: list[dict[str, Any]] = []
    received_at = time.time_ns()

    for resource_logs in request.resource_logs:
        # The resource is read only for an evaluation of a response (its sender): a span event has
        # no resource of its own (its span has one).
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                name = _event_name(record)
                if not name:
                    ignored += 1
                    continue
                try:
                    row = _event_row(record)
                except SpanRejected as exc:
                    rejected += 1
                    if len(errors) < MAX_REPORTED_ERRORS:
                        errors.append(f"log record {record.span_id.hex() or '?'} ({name}): {exc}")
                    continue
                if row is None:
                    evaluation = _response_evaluation(record, name, None)
                    if evaluation is None:
                        ignored += 1
                    else:
                        evaluation["service"] = _service_name(resource_logs)
                        evaluations.append(evaluation)
                    continue
                trace_id, span_id, event_time, attributes = row
                events["trace_id"].append(trace_id)
                events["span_id"].append(span_id)
                # A record without either timestamp is placed at its arrival.
                events["time"].append(received_at if event_time is None else event_time)
                events["name"].append(name)
                events["attributes"].append(attributes)
                events["source"].append(source)
                events["received_at"].append(received_at)

    if redactor is not None:
        redactor.redact_dicts(events["attributes"])
        redactor.redact_dicts([e["attributes"] for e in evaluations])
    events["attributes"] = json_column(events["attributes"])
    return LogBatch(
        spans=SPANS_SCHEMA.empty_table(),
        events=pa.table(events, schema=EVENTS_SCHEMA),
        rejected=rejected,
        errors=errors,
        ignored=ignored,
        evaluations=evaluations,
    )


__all__ = ["LogBatch", "decode_logs_request"]
