"""Question and answer text out of the JSON payloads frameworks record as span input and output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from semconv.values import is_absent, parse_structured, text

QUESTION_KEYS = (
    "question",
    "query",
    "query_str",
    "input",
    "user_input",
    "str_or_query_bundle",
    "prompt",
    "q",
)
ANSWER_KEYS = ("answer", "output", "result", "response", "text", "content", "output_text", "completion")
# Payload wrappers (LangChain `{"inputs": ...}` / `{"outputs": ...}`); `kwargs` holds call options
# such as the run name, never the question or the answer.
WRAPPER_KEYS = ("inputs", "outputs", "data", "return_values")
IGNORED_KEYS = frozenset({"kwargs", "tags", "metadata", "name", "run_id", "config"})


def message_text(message: Any) -> str | None:
    """The text of a chat message in the plain, OpenAI, LangChain or GenAI parts shape."""
    if not isinstance(message, Mapping):
        return text(message) if isinstance(message, str) else None
    if "parts" in message:
        listed = message["parts"] if isinstance(message["parts"], list) else []
        parts = [text(p.get("content")) for p in listed if isinstance(p, Mapping)]
        joined = "\n".join(p for p in parts if p and p)
        return joined or None
    content = message.get("content")
    if isinstance(content, list):
        pieces = [text(p.get("text")) if isinstance(p, Mapping) else text(p) for p in content]
        joined = "\n".join(p for p in pieces if p)
        return joined or None
    kwargs = message.get("kwargs")
    if isinstance(kwargs, Mapping):  # LangChain serialized message
        return message_text(kwargs)
    return text(content)


def _role(message: Any) -> str:
    if not isinstance(message, Mapping):
        return ""
    role = message.get("role") or message.get("type") or ""
    if isinstance(message.get("kwargs"), Mapping) and not role:
        role = message["kwargs"].get("type", "")
    role = str(role).lower()
    return {"human": "user", "ai": "assistant"}.get(role, role)


def _flat_messages(value: Any) -> list[Any] | None:
    """A message list, unwrapping LangChain's `[[...]]` batches."""
    if not isinstance(value, list) or not value:
        return None
    if isinstance(value[0], list):
        value = value[0]
    if all(
        isinstance(m, Mapping) and ("role" in m or "parts" in m or "kwargs" in m or "type" in m)
        for m in value
    ):
        return value
    return None


def last_message_text(value: Any, role: str) -> str | None:
    messages = _flat_messages(parse_structured(value))
    if not messages:
        return None
    for message in reversed(messages):
        if _role(message) == role:
            return message_text(message)
    return None


def question_text(value: Any, depth: int = 0) -> str | None:
    """The user's question inside an input payload (a string, `{"query": ...}`, args, messages)."""
    value = parse_structured(value)
    if is_absent(value) or depth > 4:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        from_messages = last_message_text(value, "user")
        if from_messages:
            return from_messages
        return question_text(value[0], depth + 1) if len(value) == 1 else None
    if isinstance(value, Mapping):
        for key in QUESTION_KEYS:
            if key in value and not is_absent(value[key]):
                found = question_text(value[key], depth + 1)
                if found:
                    return found
        if "messages" in value:
            return last_message_text(value["messages"], "user")
        args = value.get("args")
        if isinstance(args, list) and args:
            return question_text(args[0], depth + 1)
        for key in WRAPPER_KEYS:
            if key in value and not is_absent(value[key]):
                found = question_text(value[key], depth + 1)
                if found:
                    return found
        payload = [v for k, v in value.items() if k not in IGNORED_KEYS]
        if len(payload) == 1:
            return question_text(payload[0], depth + 1)
    return None


def answer_text(value: Any, depth: int = 0) -> str | None:
    """The answer inside an output payload (a string, `{"answer": ...}`, generations, messages)."""
    value = parse_structured(value)
    if is_absent(value) or depth > 4:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        from_messages = last_message_text(value, "assistant")
        if from_messages:
            return from_messages
        return answer_text(value[0], depth + 1) if len(value) == 1 else None
    if isinstance(value, Mapping):
        if "parts" in value or "role" in value:
            return message_text(value)
        for key in ANSWER_KEYS:
            if key in value and not is_absent(value[key]):
                found = answer_text(value[key], depth + 1)
                if found:
                    return found
        generations = value.get("generations")
        if isinstance(generations, list) and generations:
            return answer_text(generations, depth + 1)
        choices = value.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            return answer_text(choices[0].get("message") or choices[0].get("text"), depth + 1)
        if "message" in value:
            return answer_text(value["message"], depth + 1)
        for key in WRAPPER_KEYS:
            if key in value and not is_absent(value[key]):
                found = answer_text(value[key], depth + 1)
                if found:
                    return found
        payload = [v for k, v in value.items() if k not in IGNORED_KEYS]
        if len(payload) == 1:
            return answer_text(payload[0], depth + 1)
    return None


def messages_text(messages: Any) -> str | None:
    """A chat transcript as `role: text` lines (the step's input as stored in `steps.input`)."""
    listed = _flat_messages(parse_structured(messages))
    if not listed:
        return None
    lines = []
    for message in listed:
        body = message_text(message)
        if body:
            role = _role(message)
            lines.append(f"{role}: {body}" if role else body)
    return "\n".join(lines) or None
