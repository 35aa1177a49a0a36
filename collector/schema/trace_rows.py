"""Assembled `RagTrace`s as Arrow tables of the `traces`, `steps` and `documents` shapes, with the
rows their online scores add (`scores`, and `evaluation_outbox` when scores are exported)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

from collector.schema.tables import DOCUMENTS, STEPS, TRACES
from semconv import RagTrace

# The value a dimension's rare values are counted under, past its cap (`monitoring.dimensions`).
OTHER = "other"


@dataclass
class TraceSlices:
    """One trace's probe marks and dimension values (None: not set), as its `traces` row holds them
    (collector/processors/slices.py finds them)."""

    probe: str | None = None
    probe_run: str | None = None
    values: dict[str, str | None] = field(default_factory=dict)


@dataclass
class AssembledTrace:
    """A mapped trace plus what the assembler knows about how it was assembled."""

    trace: RagTrace
    reason: str
    assembly_count: int = 1
    last_received_us: int | None = None
    case_match: str | None = None
    sample_decision: str | None = None
    sample_reason: str | None = None
    judge_status: str | None = None
    scored: bool = False
    slices: TraceSlices | None = None
    response_ids: list[str] | None = None  # `gen_ai.response.id` of its LLM calls


@dataclass
class TraceTables:
    """The rows of one assembly round; `write_traces` stores them in one transaction."""

    traces: pa.Table
    steps: pa.Table
    documents: pa.Table
    scores: pa.Table | None = None
    outbox: pa.Table | None = None  # their `gen_ai.evaluation.result` events, waiting for OTLP export

    # The mapping worker sends these back to the service pickled. pyarrow pickles a table buffer
    # by buffer, which cost more than a millisecond per megabyte at each end; one Arrow IPC stream
    # per table carries the same columns (schema, values, nulls) for a tenth of that.
    def __getstate__(self) -> dict[str, bytes | None]:
        return {name: None if table is None else _ipc_bytes(table) for name, table in vars(self).items()}

    def __setstate__(self, state: dict[str, bytes | None]) -> None:
        for name, data in state.items():
            setattr(self, name, None if data is None else _ipc_table(data))


def concat_trace_tables(parts: Sequence[TraceTables]) -> TraceTables:
    """The rows of several TraceTables (one or more, of the same schemas) as one; a part without
    scores or outbox rows adds none, and they stay absent if every part lacks them."""
    if not parts:
        raise ValueError("concat_trace_tables needs at least one part")

    def joined(tables: list[pa.Table]) -> pa.Table:
        # One chunk per column: DuckDB inserts a table of many small chunks about 10 % slower.
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables).combine_chunks()

    def optional(tables: list[pa.Table | None]) -> pa.Table | None:
        present = [table for table in tables if table is not None]
        return joined(present) if present else None

    return TraceTables(
        traces=joined([p.traces for p in parts]),
        steps=joined([p.steps for p in parts]),
        documents=joined([p.documents for p in parts]),
        scores=optional([p.scores for p in parts]),
        outbox=optional([p.outbox for p in parts]),
    )


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _ipc_table(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def trace_tables(
    assembled: Sequence[AssembledTrace], now_us: int, dimensions: Sequence[str] = ()
) -> TraceTables:
    """Column-wise tables of many assembled traces (one Arrow insert per table); the `traces` rows
    get a column per slice dimension after the table's own."""
    traces = [a.trace for a in assembled]
    slices = [a.slices or TraceSlices() for a in assembled]
    steps = [(t.trace_id, step) for t in traces for step in t.steps]
    docs = [
        (trace_id, step.span_id, stage, doc)
        for trace_id, step in steps
        for stage, documents in (("retrieved", step.documents), ("rerank_input", step.input_documents))
        for doc in documents
    ]
    trace_columns: dict[str, list[Any]] = {
        "trace_id": [t.trace_id for t in traces],
        "service_name": [t.service_name for t in traces],
        "root_span_id": [t.root_span_id for t in traces],
        "start_time": [t.start_us for t in traces],
        "end_time": [t.end_us for t in traces],
        "duration_ms": [t.duration_ms for t in traces],
        "question": [t.question for t in traces],
        "answer": [t.answer for t in traces],
        "convention": [t.convention for t in traces],
        "status": [t.status for t in traces],
        "retrieval_ms": [t.retrieval_ms for t in traces],
        "generation_ms": [t.generation_ms for t in traces],
        "input_tokens": [t.input_tokens for t in traces],
        "output_tokens": [t.output_tokens for t in traces],
        "span_count": [t.span_count for t in traces],
        "step_count": [len(t.steps) for t in traces],
        "case_id": [t.case_id for t in traces],
        "case_match": [a.case_match for a in assembled],
        "expected_documents": [_json(t.expected_documents) for t in traces],
        "expected_answer": [t.expected_answer for t in traces],
        "session_id": [t.session_id for t in traces],
        "user_id": [t.user_id for t in traces],
        "mapping_error": [t.mapping_error for t in traces],
        "assembled_at": [now_us] * len(traces),
        "assembly_reason": [a.reason for a in assembled],
        "assembly_count": [a.assembly_count for a in assembled],
        "last_received_at": [a.last_received_us for a in assembled],
        "sample_decision": [a.sample_decision for a in assembled],
        "sample_reason": [a.sample_reason for a in assembled],
        "judge_status": [a.judge_status for a in assembled],
        "scored_at": [now_us if a.scored else None for a in assembled],
        "probe": [s.probe for s in slices],
        "probe_run": [s.probe_run for s in slices],
        "tool_calls": [t.tool_calls for t in traces],
        "tool_errors": [t.tool_errors for t in traces],
        "retrieval_rounds": [t.retrieval_rounds for t in traces],
        "llm_calls": [t.llm_calls for t in traces],
        "response_ids": [a.response_ids for a in assembled],
    }
    step_columns: dict[str, list[Any]] = {
        "trace_id": [trace_id for trace_id, _ in steps],
        "span_id": [s.span_id for _, s in steps],
        "parent_span_id": [s.parent_span_id for _, s in steps],
        "position": [s.position for _, s in steps],
        "kind": [s.kind for _, s in steps],
        "name": [s.name for _, s in steps],
        "convention": [s.convention for _, s in steps],
        "model": [s.model for _, s in steps],
        "provider": [s.provider for _, s in steps],
        "query": [s.query for _, s in steps],
        "input": [s.input for _, s in steps],
        "output": [s.output for _, s in steps],
        "start_time": [s.start_us for _, s in steps],
        "end_time": [s.end_us for _, s in steps],
        "duration_ms": [s.duration_ms for _, s in steps],
        "input_tokens": [s.input_tokens for _, s in steps],
        "output_tokens": [s.output_tokens for _, s in steps],
        "total_tokens": [s.total_tokens for _, s in steps],
        "status": [s.status for _, s in steps],
        "span_ids": [s.span_ids for _, s in steps],
        "tool_name": [s.tool_name for _, s in steps],
        "result_size": [s.result_size for _, s in steps],
    }
    doc_columns: dict[str, list[Any]] = {
        "trace_id": [d[0] for d in docs],
        "span_id": [d[1] for d in docs],
        "stage": [d[2] for d in docs],
        "rank": [d[3].rank for d in docs],
        "doc_id": [d[3].id for d in docs],
        "content": [d[3].content for d in docs],
        "score": [d[3].score for d in docs],
        "distance": [d[3].distance for d in docs],
        "metadata": [_json(d[3].metadata) for d in docs],
    }
    trace_rows = TRACES.arrow_table(trace_columns, len(traces))
    for name in dimensions:
        trace_rows = trace_rows.append_column(
            name, pa.array([s.values.get(name) for s in slices], pa.string())
        )
    return TraceTables(
        traces=trace_rows,
        steps=STEPS.arrow_table(step_columns, len(steps)),
        documents=DOCUMENTS.arrow_table(doc_columns, len(docs)),
    )
