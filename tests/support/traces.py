"""Traces built by hand, as `SpanRecord`s: the shape the collector hands the mapper."""

from __future__ import annotations

from typing import Any

from semconv import EventRecord, RagTrace, SpanRecord
from semconv.mapping import map_trace


class TraceBuilder:
    """SpanRecords of one trace, in start order: ids are counters, each span starts 1 ms after the
    previous one, and a parent ends after its last descendant (as real nested spans do)."""

    def __init__(self, trace_id: str = "0af7651916cd43dd8448eb211c80319c", service: str = "rag-app") -> None:
        self.trace_id = trace_id
        self.service = service
        self.spans: list[SpanRecord] = []

    def span(
        self,
        name: str,
        attributes: dict[str, Any] | None = None,
        parent: SpanRecord | None = None,
        kind: str = "INTERNAL",
        events: list[tuple[str, dict[str, Any]]] | None = None,
        status: str = "UNSET",
    ) -> SpanRecord:
        index = len(self.spans) + 1
        start = 1_767_000_000_000_000 + index * 1_000
        record = SpanRecord(
            trace_id=self.trace_id,
            span_id=f"{index:016x}",
            parent_span_id=parent.span_id if parent else None,
            name=name,
            kind=kind,
            start_us=start,
            end_us=start + 500,
            status_code=status,
            attributes=dict(attributes or {}),
            service_name=self.service,
            scope_name="wire-test",
            events=[EventRecord(n, start + 100 + i, dict(a)) for i, (n, a) in enumerate(events or [])],
        )
        self.spans.append(record)
        self._extend_ancestors(record)
        return record

    def _extend_ancestors(self, record: SpanRecord) -> None:
        by_id = {s.span_id: s for s in self.spans}
        child, parent_id = record, record.parent_span_id
        while parent_id is not None and parent_id in by_id:
            parent = by_id[parent_id]
            assert child.end_us is not None and parent.end_us is not None
            parent.end_us = max(parent.end_us, child.end_us + 100)
            child, parent_id = parent, parent.parent_span_id

    def map(self) -> RagTrace:
        return map_trace(list(self.spans))
