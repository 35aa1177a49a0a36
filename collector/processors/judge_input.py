"""A stored trace as the judge sees it: its span records mapped again, with the expectations the
assembler stored, and `redaction.apply_to: [judge]` applied.

One function for every reader of stored traces that judges them: the judge stage
(`processors/judging.py`), and `ragpulse datasets export --labels` and `ragpulse align`
(`feedback/stored_traces.py`), which must show a judge exactly what the service's judge was shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import orjson

from semconv import RagTrace, SpanRecord, map_trace
from semconv.models import ConversationTurn
from semconv.options import DEFAULT_OPTIONS, MappingOptions

if TYPE_CHECKING:
    from collector.processors.redaction import Redactor


def judge_trace(
    records: Sequence[SpanRecord],
    expected_answer: str | None,
    expected_documents: str | None,
    mapping: MappingOptions = DEFAULT_OPTIONS,
    redactor: Redactor | None = None,
    conversation: Sequence[tuple[str | None, str | None]] = (),
) -> RagTrace:
    """The trace of `records` (one trace's spans) mapped with `mapping`, with the stored
    `expected_answer` and `expected_documents` (JSON text) set, and the `conversation` before it
    (its session's earlier turns, oldest first: question, answer; `Store.earlier_turns`); with
    `redactor`, mapped from redacted copies of the records, the expected answer and the earlier
    turns redacted too."""
    if redactor is not None:
        records = redactor.redact_records(records)
        expected_answer = expected_answer and redactor.redact(expected_answer)
        conversation = [(q and redactor.redact(q), a and redactor.redact(a)) for q, a in conversation]
    trace = map_trace(list(records), mapping)
    trace.expected_documents = orjson.loads(expected_documents) if expected_documents else None
    trace.expected_answer = expected_answer
    trace.conversation = [ConversationTurn(question=q, answer=a) for q, a in conversation]
    return trace
