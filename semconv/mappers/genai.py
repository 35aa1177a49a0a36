"""OpenTelemetry GenAI: `gen_ai.operation.name`, retrieval documents (v1.40+), messages in the v1.37
parts shape (on the span, or on a `gen_ai.client.inference.operation.details` event), and the older
per-message events (≤v1.36, content in the body) and `gen_ai.content.*` events (≤v1.26)."""

from __future__ import annotations

from typing import Any

from semconv.documents import documents
from semconv.mappers.text_fields import answer_text, last_message_text, message_text, messages_text
from semconv.models import Document, EventRecord
from semconv.values import as_list, is_absent, lower, parse_structured, text

NAME = "genai"
OPERATIONS = {
    "chat": "llm",
    "text_completion": "llm",
    "generate_content": "llm",
    "completion": "llm",
    "generate": "llm",
    "embeddings": "embedding",
    "retrieval": "retrieval",
    "vector_db_retrieve": "retrieval",
    "search_memory": "retrieval",
    "rerank": "rerank",
    "execute_tool": "tool",
    "invoke_agent": "chain",
    "create_agent": "chain",
    "invoke_workflow": "chain",
    "plan": "chain",
    "execute_task": "chain",
}


def operation_kind(attrs: dict[str, Any]) -> str | None:
    operation = lower(attrs.get("gen_ai.operation.name"))
    return OPERATIONS.get(operation) if operation else None


def evidence_kind(attrs: dict[str, Any]) -> str | None:
    if "gen_ai.retrieval.documents" in attrs or "gen_ai.retrieval.query.text" in attrs:
        return "retrieval"
    if "gen_ai.input.messages" in attrs or "gen_ai.output.messages" in attrs:
        return "llm"
    if "gen_ai.tool.name" in attrs or "gen_ai.tool.call.id" in attrs:
        return "tool"
    return None


def retrieval_query(attrs: dict[str, Any]) -> str | None:
    return text(attrs.get("gen_ai.retrieval.query.text"))


def retrieval_documents(attrs: dict[str, Any]) -> list[Document]:
    return documents(attrs.get("gen_ai.retrieval.documents"))


def llm_output(attrs: dict[str, Any]) -> str | None:
    messages = as_list(attrs.get("gen_ai.output.messages"))
    if messages:
        return message_text(messages[0])
    return None


def llm_input(attrs: dict[str, Any]) -> str | None:
    lines = []
    system = as_list(attrs.get("gen_ai.system_instructions"))
    if system:
        parts = [text(p.get("content")) for p in system if isinstance(p, dict)]
        joined = "\n".join(p for p in parts if p)
        if joined:
            lines.append(f"system: {joined}")
    transcript = messages_text(attrs.get("gen_ai.input.messages"))
    if transcript:
        lines.append(transcript)
    return "\n".join(lines) or None


def first_user_message(attrs: dict[str, Any]) -> str | None:
    messages = as_list(attrs.get("gen_ai.input.messages")) or []
    for message in messages:
        if isinstance(message, dict) and lower(message.get("role")) == "user":
            return message_text(message)
    return None


# The v1.37+ event with the span's own attributes: messages are structured (lists of dicts) on it.
OPERATION_DETAILS_EVENT = "gen_ai.client.inference.operation.details"

# Deprecated content carried in span events.
_MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


def _event_body(event: EventRecord) -> Any:
    attrs = event.attributes
    for key in ("body", "event.body", "message", "content", "gen_ai.event.content"):
        if key in attrs and not is_absent(attrs[key]):
            return parse_structured(attrs[key])
    return None


def event_output(events: list[EventRecord]) -> str | None:
    for event in events:
        if event.name == OPERATION_DETAILS_EVENT:
            found = llm_output(event.attributes)
            if found:
                return found
        if event.name == "gen_ai.choice":
            body = _event_body(event)
            if isinstance(body, dict):
                found = answer_text(body.get("message") or body.get("content"))
                if found:
                    return found
            elif body is not None:
                return text(body)
        if event.name == "gen_ai.content.completion":
            completion = event.attributes.get("gen_ai.completion")
            found = last_message_text(completion, "assistant") or answer_text(completion)
            if found:
                return found
    return None


def event_input(events: list[EventRecord]) -> str | None:
    lines = []
    for event in events:
        if event.name == OPERATION_DETAILS_EVENT:
            # One event holds the whole transcript: it wins over per-message events.
            transcript = llm_input(event.attributes)
            if transcript:
                return transcript
        role = _MESSAGE_EVENTS.get(event.name)
        if role:
            body = _event_body(event)
            content = answer_text(body) if body is not None else None
            if content:
                lines.append(f"{role}: {content}")
        elif event.name == "gen_ai.content.prompt":
            prompt = event.attributes.get("gen_ai.prompt")
            transcript = messages_text(prompt) or text(prompt)
            if transcript:
                lines.append(transcript)
    return "\n".join(lines) or None


def event_first_user_message(events: list[EventRecord]) -> str | None:
    for event in events:
        if event.name == OPERATION_DETAILS_EVENT:
            found = first_user_message(event.attributes)
            if found:
                return found
        if event.name == "gen_ai.user.message":
            body = _event_body(event)
            return answer_text(body) if body is not None else None
        if event.name == "gen_ai.content.prompt":
            return last_message_text(event.attributes.get("gen_ai.prompt"), "user")
    return None
