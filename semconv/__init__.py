"""The small RAG semantic convention: names, models, and the mappers from other conventions to steps."""

from semconv.mapping import map_trace
from semconv.models import (
    RAG_STEP_KINDS,
    STEP_KINDS,
    Document,
    EventRecord,
    RagTrace,
    SpanRecord,
    Step,
    StepKind,
)

__all__ = [
    "RAG_STEP_KINDS",
    "STEP_KINDS",
    "Document",
    "EventRecord",
    "RagTrace",
    "SpanRecord",
    "Step",
    "StepKind",
    "map_trace",
]
