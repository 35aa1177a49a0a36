"""Question and answer text out of the JSON payloads frameworks record as span input and output."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from semconv.reprs import looks_like_repr
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
    "task",  # smolagents' `agent.run(task)`
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


Search = Callable[[Any], str | None]


def _search(
    value: Any,
    depth: int,
    role: str,
    keys: tuple[str, ...],
    specific: Callable[[Mapping[str, Any], Search], tuple[bool, str | None]],
) -> str | None:
    """The walk `question_text` and `answer_text` share: text as it is; a message list by `role`; a
    single message by its text; a mapping by `keys`, then the caller's `specific` shapes, then the
    payload wrappers, then its only payload."""
    value = parse_structured(value)
    if is_absent(value) or depth > 4:
        return None
    if isinstance(value, str):
        return value

    def again(inner: Any) -> str | None:
        return _search(inner, depth + 1, role, keys, specific)

    if isinstance(value, list):
        return last_message_text(value, role) or (again(value[0]) if len(value) == 1 else None)
    if not isinstance(value, Mapping):
        return None
    if "parts" in value or "role" in value:
        return message_text(value)
    for key in keys:
        if key in value and not is_absent(value[key]) and (found := again(value[key])):
            return found
    handled, found = specific(value, again)
    if handled:
        return found
    for key in WRAPPER_KEYS:
        if key in value and not is_absent(value[key]) and (found := again(value[key])):
            return found
    payload = [v for k, v in value.items() if k not in IGNORED_KEYS]
    if len(payload) == 1:
        return again(payload[0])
    # A pipeline's inputs or outputs by component (`{"retriever": {"query": ...}, "llm": {...}}`):
    # the first component that has one of `keys`.
    if payload and all(isinstance(v, Mapping) for v in payload):
        for component in payload:
            for key in keys:
                if key in component and not is_absent(component[key]) and (found := again(component[key])):
                    return found
    return None


def _question_shapes(value: Mapping[str, Any], again: Search) -> tuple[bool, str | None]:
    if "messages" in value:
        return True, last_message_text(value["messages"], "user")
    args = value.get("args")  # traceloop decorators: {"args": [...], "kwargs": {...}}
    if isinstance(args, list) and args:
        return True, again(args[0])
    return False, None


def _answer_shapes(value: Mapping[str, Any], again: Search) -> tuple[bool, str | None]:
    generations = value.get("generations")  # LangChain LLM output
    if isinstance(generations, list) and generations:
        return True, again(generations)
    choices = value.get("choices")  # OpenAI completion
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        return True, again(choices[0].get("message") or choices[0].get("text"))
    if "message" in value:
        return True, again(value["message"])
    return False, None


def question_text(value: Any) -> str | None:
    """The user's question inside an input payload (a string, `{"query": ...}`, args, messages)."""
    return _search(value, 0, "user", QUESTION_KEYS, _question_shapes)


def answer_text(value: Any) -> str | None:
    """The answer inside an output payload (a string, `{"answer": ...}`, generations, messages)."""
    return _search(value, 0, "assistant", ANSWER_KEYS, _answer_shapes)


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


def plain_text(value: str | None) -> str | None:
    """`value` when it reads as prose; None when it is a JSON object or array, or a framework
    object's repr (`ChatMessage(_role=..., ...)`): a payload an answer could not be read from."""
    if value is None or ("(" not in value and value.lstrip()[:1] not in ("{", "[")):
        return value  # most answers: no bracket to look into
    if isinstance(parse_structured(value), Mapping | list) or looks_like_repr(value):
        return None
    return value
