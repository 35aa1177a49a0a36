"""Scores an app sent itself: `gen_ai.evaluation.result` events on its spans, read at assembly.

An app (or an evaluation tool in it) that scores its own answers can say so in the OpenTelemetry
GenAI way: a `gen_ai.evaluation.result` event on the span it evaluated, either as a span event or
as a log record carrying that span's trace and span ids (both reach the mapper as events of the
span). Each becomes a `scores` row with `evaluator = 'external'`:

- `name` from `gen_ai.evaluation.name` (an event without it is not a score and is left alone);
- `value` from `gen_ai.evaluation.score.value` (a number), `label` from `.score.label`,
  `explanation` from `gen_ai.evaluation.explanation`;
- `status` `error` when the event has `error.type`, else as the label or value says (`verdicts.py`);
- `source`: the service that sent the span; `span_id`: the span the event is on.

An evaluation sent as a log record with no span, but naming the response it evaluates
(`gen_ai.response.id`), is kept as a `feedback` row (`response_evaluations`): it becomes a score of
the trace whose LLM call gave that response, on the trace's root span, when both are stored.

The events ragpulse writes back carry `ragpulse.evaluator`: those are never read in again (a
deployment that forwards ragpulse's evaluation spans back to it would otherwise count every score
twice). Pure logic, run in the mapping worker.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
import pyarrow as pa

from collector.feedback.items import EXTERNAL
from collector.feedback.verdicts import value_of, verdict
from collector.schema.tables import EVALUATION_EVENT, FEEDBACK, SCORES
from collector.schema.windows import floor_minute_us
from semconv import RagTrace, SpanRecord

NAME = "gen_ai.evaluation.name"
VALUE = "gen_ai.evaluation.score.value"
LABEL = "gen_ai.evaluation.score.label"
EXPLANATION = "gen_ai.evaluation.explanation"
ERROR_TYPE = "error.type"
OURS = "ragpulse.evaluator"  # on every event ragpulse writes back
RESPONSE_ID = "gen_ai.response.id"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def response_ids(spans: Iterable[SpanRecord]) -> list[str] | None:
    """The `gen_ai.response.id` of a trace's spans, each once, in span order (None: none)."""
    found = dict.fromkeys(
        value for span in spans if isinstance(value := span.attributes.get(RESPONSE_ID), str) and value
    )
    return list(found) or None


def external_scores(
    scored: Iterable[tuple[RagTrace, int, Sequence[SpanRecord]]], now_us: int
) -> pa.Table | None:
    """`scores` rows of the evaluation events on the spans of many traces (`(trace, revision,
    spans)` each); None when there are none."""
    columns: dict[str, list[Any]] = {name: [] for name in _COLUMNS}
    for trace, revision, spans in scored:
        bucket = floor_minute_us(trace.start_us if trace.start_us is not None else now_us)
        for span in spans:
            for event in span.events:
                if event.name != EVALUATION_EVENT or OURS in event.attributes:
                    continue
                name = _text(event.attributes.get(NAME))
                if name is None:
                    continue
                _add(columns, trace, revision, bucket, span, event.attributes, name)
                columns["created_at"].append(event.time_us if event.time_us is not None else now_us)
    n = len(columns["trace_id"])
    return SCORES.arrow_table(columns, n) if n else None


_COLUMNS = (
    "trace_id", "span_id", "name", "value", "status", "label", "explanation", "items", "created_at",
    "service_name", "bucket", "evaluator", "revision", "source",
)  # fmt: skip


def _add(
    columns: dict[str, list[Any]],
    trace: RagTrace,
    revision: int,
    bucket: int,
    span: SpanRecord,
    attributes: dict[str, Any],
    name: str,
) -> None:
    value, label = _number(attributes.get(VALUE)), _text(attributes.get(LABEL))
    status = "error" if attributes.get(ERROR_TYPE) else verdict(value, label)
    columns["trace_id"].append(trace.trace_id)
    columns["span_id"].append(span.span_id)
    columns["name"].append(name)
    columns["value"].append(value_of(value, status))
    columns["status"].append(status)
    columns["label"].append(label)
    columns["explanation"].append(_text(attributes.get(EXPLANATION)))
    columns["items"].append("[]")
    columns["service_name"].append(trace.service_name)
    columns["bucket"].append(bucket)
    columns["evaluator"].append(EXTERNAL)
    columns["revision"].append(revision)
    columns["source"].append(span.service_name)


def response_evaluations(evaluations: Sequence[dict[str, Any]], now_us: int) -> pa.Table:
    """`feedback` rows (evaluator `external`) of evaluation events sent as log records that name a
    response instead of a span (`attributes`, `time_us`, `service` each, as the logs decoder keeps
    them); events without a name are left out. Each row's id is a digest of the event, so an export
    sent again replaces its rows instead of adding them twice."""
    rows: dict[str, list[Any]] = {name: [] for name in FEEDBACK.column_names}
    for event in evaluations:
        attributes = event["attributes"]
        name = _text(attributes.get(NAME))
        if name is None:
            continue
        value, label = _number(attributes.get(VALUE)), _text(attributes.get(LABEL))
        status = "error" if attributes.get(ERROR_TYPE) else verdict(value, label)
        identity = orjson.dumps([event["time_us"], attributes], option=orjson.OPT_SORT_KEYS)
        rows["feedback_id"].append("event-" + hashlib.sha256(identity).hexdigest()[:32])
        rows["trace_id"].append(None)
        rows["response_id"].append(attributes[RESPONSE_ID])
        rows["span_id"].append(None)
        rows["name"].append(name)
        rows["value"].append(value_of(value, status))
        rows["label"].append(label)
        rows["status"].append(status)
        rows["comment"].append(_text(attributes.get(EXPLANATION)))
        rows["author"].append(event["service"])
        rows["evaluator"].append(EXTERNAL)
        rows["created_at"].append(event["time_us"] if event["time_us"] is not None else now_us)
        rows["received_at"].append(now_us)
    return FEEDBACK.arrow_table(rows, len(rows["name"]))
