"""LangSmith's OTel exporter: `langsmith.span.kind` (the LangChain run type) and the whole run
inputs / outputs as JSON in the exact keys `gen_ai.prompt` / `gen_ai.completion`."""

from __future__ import annotations

from typing import Any

from semconv.documents import documents
from semconv.mappers.text_fields import answer_text, messages_text, question_text
from semconv.models import Document
from semconv.values import lower, parse_structured

NAME = "langsmith"
SPAN_KIND = "langsmith.span.kind"
KINDS = {"llm": "llm", "retriever": "retrieval", "embedding": "embedding", "tool": "tool"}


def explicit_kind(attrs: dict[str, Any]) -> str | None:
    kind = lower(attrs.get(SPAN_KIND))
    if kind is None:
        return None
    return KINDS.get(kind, "chain")


def retrieval_query(attrs: dict[str, Any]) -> str | None:
    return question_text(attrs.get("gen_ai.prompt"))


def completion_documents(attrs: dict[str, Any]) -> list[Document]:
    return documents(attrs.get("gen_ai.completion"))


def llm_output(attrs: dict[str, Any]) -> str | None:
    return answer_text(attrs.get("gen_ai.completion"))


def llm_input(attrs: dict[str, Any]) -> str | None:
    prompt = parse_structured(attrs.get("gen_ai.prompt"))
    if isinstance(prompt, dict) and "messages" in prompt:
        return messages_text(prompt["messages"])
    return None


def trace_question(attrs: dict[str, Any]) -> str | None:
    """The run inputs of a LangSmith root run (only when the span is one)."""
    return question_text(attrs.get("gen_ai.prompt")) if SPAN_KIND in attrs else None


def trace_answer(attrs: dict[str, Any]) -> str | None:
    return answer_text(attrs.get("gen_ai.completion")) if SPAN_KIND in attrs else None
