"""OpenLLMetry / Traceloop: both attribute eras (flattened `gen_ai.prompt.<i>.*` up to 0.54, upstream
messages JSON from 0.55), `traceloop.entity.*` / `gen_ai.task.*` payloads, and vector-DB results in
`db.query.result` / `db.search.result` span events."""

from __future__ import annotations

import re
from typing import Any

from semconv.documents import document, documents
from semconv.mappers.text_fields import answer_text, question_text
from semconv.models import Document, EventRecord
from semconv.values import lower, text, unflatten

NAME = "openllmetry"
REQUEST_TYPES = {"chat": "llm", "completion": "llm", "embedding": "embedding", "rerank": "rerank"}
RESULT_EVENTS = ("db.query.result", "db.search.result")
VECTOR_DBS = frozenset(
    {
        "chroma",
        "pinecone",
        "qdrant",
        "milvus",
        "weaviate",
        "lancedb",
        "marqo",
        "pgvector",
        "elasticsearch",
        "opensearch",
        "redis",
        "faiss",
    }
)
FILTERED = "FILTERED"  # the ≤0.54 content filter's placeholder
# Only numbered keys are messages: `gen_ai.prompt.name` (OTel) and the exact `gen_ai.prompt`
# (LangSmith) are not.
NUMBERED_MESSAGE = re.compile(r"^gen_ai\.(?:prompt|completion)\.\d+\.")


def is_openllmetry(attrs: dict[str, Any]) -> bool:
    """Keys only Traceloop instrumentations write."""
    for key in attrs:
        if key.startswith(("traceloop.", "gen_ai.task.", "llm.request.type", "llm.usage.", "db.vector.")):
            return True
        if NUMBERED_MESSAGE.match(key):
            return True
    return lower(attrs.get("gen_ai.operation.name")) in ("vector_db_retrieve", "execute_task")


def legacy_kind(attrs: dict[str, Any]) -> str | None:
    request_type = lower(attrs.get("llm.request.type"))
    if request_type in REQUEST_TYPES:
        return REQUEST_TYPES[request_type]
    if lower(attrs.get("traceloop.span.kind")) == "tool":
        return "tool"
    return None


def evidence_kind(attrs: dict[str, Any], events: list[EventRecord]) -> str | None:
    if any(e.name in RESULT_EVENTS for e in events):
        return "retrieval"
    for key in attrs:
        if key.startswith("db.vector.query."):
            return "retrieval"
        if NUMBERED_MESSAGE.match(key):
            return "llm"
    system = lower(attrs.get("db.system") or attrs.get("db.system.name"))
    operation = lower(attrs.get("db.operation") or attrs.get("db.operation.name")) or ""
    if system in VECTOR_DBS and any(word in operation for word in ("query", "search")):
        return "retrieval"
    return None


def entity_input(attrs: dict[str, Any]) -> Any:
    return attrs.get("traceloop.entity.input", attrs.get("gen_ai.task.input"))


def entity_output(attrs: dict[str, Any]) -> Any:
    return attrs.get("traceloop.entity.output", attrs.get("gen_ai.task.output"))


def retrieval_query(attrs: dict[str, Any]) -> str | None:
    return question_text(entity_input(attrs))


def entity_documents(attrs: dict[str, Any]) -> list[Document]:
    return documents(entity_output(attrs))


def event_documents(events: list[EventRecord]) -> list[Document]:
    """One document per result event, in event order (the database's rank order)."""
    result: list[Document] = []
    for event in events:
        if event.name in RESULT_EVENTS:
            doc = document(event.attributes, len(result) + 1)
            if doc is not None:
                result.append(doc)
    return result


def _content(value: Any) -> str | None:
    result = text(value)
    return None if result == FILTERED else result


def llm_output(attrs: dict[str, Any]) -> str | None:
    completions = unflatten(attrs, "gen_ai.completion.")
    return _content(completions[0].get("content")) if completions else None


def llm_input(attrs: dict[str, Any]) -> str | None:
    lines = []
    for prompt in unflatten(attrs, "gen_ai.prompt."):
        content = _content(prompt.get("content"))
        if content:
            role = text(prompt.get("role"))
            lines.append(f"{role}: {content}" if role else content)
    return "\n".join(lines) or None


def first_user_message(attrs: dict[str, Any]) -> str | None:
    for prompt in unflatten(attrs, "gen_ai.prompt."):
        if lower(prompt.get("role")) == "user":
            return _content(prompt.get("content"))
    return None


def trace_question(attrs: dict[str, Any]) -> str | None:
    return question_text(entity_input(attrs))


def trace_answer(attrs: dict[str, Any]) -> str | None:
    return answer_text(entity_output(attrs))
