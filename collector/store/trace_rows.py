"""Assembled `RagTrace`s as Arrow tables of the `traces`, `steps` and `documents` shapes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from semconv import RagTrace

_TS = pa.timestamp("us")

TRACES_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("service_name", pa.string()),
        ("root_span_id", pa.string()),
        ("start_time", _TS),
        ("end_time", _TS),
        ("duration_ms", pa.float64()),
        ("question", pa.string()),
        ("answer", pa.string()),
        ("convention", pa.string()),
        ("status", pa.string()),
        ("retrieval_ms", pa.float64()),
        ("generation_ms", pa.float64()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("span_count", pa.int32()),
        ("step_count", pa.int32()),
        ("case_id", pa.string()),
        ("case_match", pa.string()),
        ("expected_documents", pa.string()),
        ("expected_answer", pa.string()),
        ("session_id", pa.string()),
        ("mapping_error", pa.string()),
        ("assembled_at", _TS),
        ("assembly_reason", pa.string()),
        ("assembly_count", pa.int32()),
        ("last_received_at", _TS),
    ]
)
STEPS_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_span_id", pa.string()),
        ("position", pa.int32()),
        ("kind", pa.string()),
        ("name", pa.string()),
        ("convention", pa.string()),
        ("model", pa.string()),
        ("provider", pa.string()),
        ("query", pa.string()),
        ("input", pa.string()),
        ("output", pa.string()),
        ("start_time", _TS),
        ("end_time", _TS),
        ("duration_ms", pa.float64()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("total_tokens", pa.int64()),
        ("status", pa.string()),
        ("span_ids", pa.list_(pa.string())),
    ]
)
DOCUMENTS_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("stage", pa.string()),
        ("rank", pa.int32()),
        ("doc_id", pa.string()),
        ("content", pa.string()),
        ("score", pa.float64()),
        ("distance", pa.float64()),
        ("metadata", pa.string()),
    ]
)


@dataclass
class AssembledTrace:
    """A mapped trace plus what the assembler knows about how it was assembled."""

    trace: RagTrace
    reason: str
    assembly_count: int = 1
    last_received_us: int | None = None
    case_match: str | None = None


@dataclass
class TraceTables:
    traces: pa.Table
    steps: pa.Table
    documents: pa.Table


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def trace_tables(assembled: Sequence[AssembledTrace], now_us: int) -> TraceTables:
    """Column-wise tables of many assembled traces (one Arrow insert per table)."""
    traces: dict[str, list[Any]] = {name: [] for name in TRACES_SCHEMA.names}
    steps: dict[str, list[Any]] = {name: [] for name in STEPS_SCHEMA.names}
    docs: dict[str, list[Any]] = {name: [] for name in DOCUMENTS_SCHEMA.names}
    for item in assembled:
        t = item.trace
        row: dict[str, Any] = {
            "trace_id": t.trace_id,
            "service_name": t.service_name,
            "root_span_id": t.root_span_id,
            "start_time": t.start_us,
            "end_time": t.end_us,
            "duration_ms": t.duration_ms,
            "question": t.question,
            "answer": t.answer,
            "convention": t.convention,
            "status": t.status,
            "retrieval_ms": t.retrieval_ms,
            "generation_ms": t.generation_ms,
            "input_tokens": t.input_tokens,
            "output_tokens": t.output_tokens,
            "span_count": t.span_count,
            "step_count": len(t.steps),
            "case_id": t.case_id,
            "case_match": item.case_match,
            "expected_documents": _json(t.expected_documents),
            "expected_answer": t.expected_answer,
            "session_id": t.session_id,
            "mapping_error": t.mapping_error,
            "assembled_at": now_us,
            "assembly_reason": item.reason,
            "assembly_count": item.assembly_count,
            "last_received_at": item.last_received_us,
        }
        for name, value in row.items():
            traces[name].append(value)
        for step in t.steps:
            step_row: dict[str, Any] = {
                "trace_id": t.trace_id,
                "span_id": step.span_id,
                "parent_span_id": step.parent_span_id,
                "position": step.position,
                "kind": step.kind,
                "name": step.name,
                "convention": step.convention,
                "model": step.model,
                "provider": step.provider,
                "query": step.query,
                "input": step.input,
                "output": step.output,
                "start_time": step.start_us,
                "end_time": step.end_us,
                "duration_ms": step.duration_ms,
                "input_tokens": step.input_tokens,
                "output_tokens": step.output_tokens,
                "total_tokens": step.total_tokens,
                "status": step.status,
                "span_ids": step.span_ids,
            }
            for name, value in step_row.items():
                steps[name].append(value)
            for stage, documents in (("retrieved", step.documents), ("rerank_input", step.input_documents)):
                for doc in documents:
                    doc_row: dict[str, Any] = {
                        "trace_id": t.trace_id,
                        "span_id": step.span_id,
                        "stage": stage,
                        "rank": doc.rank,
                        "doc_id": doc.id,
                        "content": doc.content,
                        "score": doc.score,
                        "distance": doc.distance,
                        "metadata": _json(doc.metadata),
                    }
                    for name, value in doc_row.items():
                        docs[name].append(value)
    return TraceTables(
        traces=pa.table(traces, schema=TRACES_SCHEMA),
        steps=pa.table(steps, schema=STEPS_SCHEMA),
        documents=pa.table(docs, schema=DOCUMENTS_SCHEMA),
    )
