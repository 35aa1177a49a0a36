"""Langfuse SDK v3+ attributes: `langfuse.observation.*` and trace-level `langfuse.trace.*`."""

from __future__ import annotations

from typing import Any

from semconv.documents import documents
from semconv.mappers.text_fields import answer_text, messages_text, question_text
from semconv.models import Document
from semconv.values import as_mapping, integer, lower, text

NAME = "langfuse"
OBSERVATION_TYPE = "langfuse.observation.type"
KINDS = {
    "generation": "llm",
    "retriever": "retrieval",
    "embedding": "embedding",
    "tool": "tool",
    "evaluator": "evaluator",
}


def explicit_kind(attrs: dict[str, Any]) -> str | None:
    kind = lower(attrs.get(OBSERVATION_TYPE))
    if kind is None:
        return None
    return KINDS.get(kind, "chain")


def observation_input(attrs: dict[str, Any]) -> Any:
    return attrs.get("langfuse.observation.input")


def observation_output(attrs: dict[str, Any]) -> Any:
    return attrs.get("langfuse.observation.output")


def retrieval_query(attrs: dict[str, Any]) -> str | None:
    return question_text(observation_input(attrs))


def output_documents(attrs: dict[str, Any]) -> list[Document]:
    return documents(observation_output(attrs))


def llm_output(attrs: dict[str, Any]) -> str | None:
    return answer_text(observation_output(attrs))


def llm_input(attrs: dict[str, Any]) -> str | None:
    value = observation_input(attrs)
    return messages_text(value) or text(value)


# Langfuse's own names first, then the OpenAI names its `langfuse.openai` wrapper records.
USAGE_KEYS = {
    "input": ("input", "prompt_tokens", "input_tokens"),
    "output": ("output", "completion_tokens", "output_tokens"),
    "total": ("total", "total_tokens"),
}


def usage(attrs: dict[str, Any], which: str) -> int | None:
    details = as_mapping(attrs.get("langfuse.observation.usage_details"))
    if not details:
        return None
    for key in USAGE_KEYS[which]:
        found = integer(details.get(key))
        if found is not None:
            return found
    return None


def trace_question(attrs: dict[str, Any]) -> str | None:
    return question_text(attrs.get("langfuse.trace.input"))


def trace_answer(attrs: dict[str, Any]) -> str | None:
    return answer_text(attrs.get("langfuse.trace.output"))


def root_question(attrs: dict[str, Any]) -> str | None:
    """Langfuse SDKs since v4 set no trace-level input; the root observation's input is it."""
    return question_text(observation_input(attrs)) if OBSERVATION_TYPE in attrs else None


def root_answer(attrs: dict[str, Any]) -> str | None:
    return answer_text(observation_output(attrs)) if OBSERVATION_TYPE in attrs else None
