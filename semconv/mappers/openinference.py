"""OpenInference (Arize): `openinference.span.kind`, flattened `retrieval.documents.<i>.document.*`,
`llm.*` messages and token counts, `input.value` / `output.value` with a mime type."""

from __future__ import annotations

from typing import Any

from semconv.documents import documents
from semconv.mappers.text_fields import answer_text, question_text
from semconv.models import Document
from semconv.values import as_mapping, is_absent, lower, text, unflatten

NAME = "openinference"
SPAN_KIND = "openinference.span.kind"
KINDS = {
    "llm": "llm",
    "retriever": "retrieval",
    "reranker": "rerank",
    "embedding": "embedding",
    "tool": "tool",
    "evaluator": "evaluator",
}


def explicit_kind(attrs: dict[str, Any]) -> str | None:
    kind = lower(attrs.get(SPAN_KIND))
    if kind is None:
        return None
    return KINDS.get(kind, "chain")  # CHAIN, AGENT, PROMPT, GUARDRAIL, UNKNOWN


def evidence_kind(attrs: dict[str, Any]) -> str | None:
    for key in attrs:
        if key.startswith("retrieval.documents."):
            return "retrieval"
        if key.startswith("reranker."):
            return "rerank"
        if key.startswith("embedding.embeddings."):
            return "embedding"
        if key.startswith(("llm.input_messages.", "llm.output_messages.", "llm.token_count.")):
            return "llm"
    return None


def invocation_parameters(attrs: dict[str, Any]) -> dict[str, Any] | None:
    return as_mapping(attrs.get("llm.invocation_parameters"))


def _is_json(attrs: dict[str, Any], which: str) -> bool:
    return lower(attrs.get(f"{which}.mime_type")) == "application/json"


def input_value(attrs: dict[str, Any]) -> Any:
    return attrs.get("input.value")


def output_value(attrs: dict[str, Any]) -> Any:
    return attrs.get("output.value")


def retrieval_query(attrs: dict[str, Any]) -> str | None:
    return question_text(attrs.get("input.value"))


def retrieval_documents(attrs: dict[str, Any]) -> list[Document]:
    return _flattened_documents(attrs, "retrieval.documents.")


def reranker_documents(attrs: dict[str, Any], which: str) -> list[Document]:
    return _flattened_documents(attrs, f"reranker.{which}_documents.")


def _flattened_documents(attrs: dict[str, Any], prefix: str) -> list[Document]:
    # The suffixes (`document.id`, `document.content`, ...) are field names `documents` knows.
    return documents(unflatten(attrs, prefix))


def output_documents(attrs: dict[str, Any]) -> list[Document]:
    """Documents in `output.value` JSON (LangChain retriever output: `{"documents": [...]}`)."""
    value = attrs.get("output.value")
    return documents(value) if isinstance(value, str) and value.lstrip()[:1] in "[{" else []


def _message_content(message: dict[str, Any]) -> str | None:
    content = message.get("message.content")
    if not is_absent(content):
        return text(content)
    parts = unflatten(message, "message.contents.")
    texts = [text(p.get("message_content.text")) for p in parts]
    joined = "\n".join(t for t in texts if t)
    return joined or None


def _messages(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    return unflatten(attrs, prefix)


def llm_output(attrs: dict[str, Any]) -> str | None:
    messages = _messages(attrs, "llm.output_messages.")
    if len(messages) > 1:  # a response with items (a hosted tool's call and result, then the answer)
        for index in range(len(messages) - 1, -1, -1):  # mypyc cannot compile reversed() here
            message = messages[index]
            if lower(message.get("message.role")) in (None, "assistant"):
                content = _message_content(message)
                if content:
                    return content
    if messages:
        return _message_content(messages[0])
    choices = unflatten(attrs, "llm.choices.")
    if choices:
        return text(choices[0].get("completion.text"))
    return None


def llm_output_value(attrs: dict[str, Any]) -> str | None:
    """`output.value` as the answer: only when it is plain text (else it is a raw provider payload)."""
    value = attrs.get("output.value")
    if is_absent(value) or _is_json(attrs, "output"):
        return None
    answer = text(value)
    if answer and answer.startswith("assistant: "):  # LlamaIndex client spans
        answer = answer.removeprefix("assistant: ")
        if answer == "None":  # a turn with tool calls and no text: `assistant: None`
            return None
    return answer


def llm_input(attrs: dict[str, Any]) -> str | None:
    messages = _messages(attrs, "llm.input_messages.")
    if messages:
        lines = []
        for message in messages:
            content = _message_content(message)
            if content:
                role = text(message.get("message.role"))
                lines.append(f"{role}: {content}" if role else content)
        return "\n".join(lines) or None
    prompts = unflatten(attrs, "llm.prompts.")
    texts = [text(p.get("prompt.text")) for p in prompts]
    return "\n".join(t for t in texts if t) or None


def first_user_message(attrs: dict[str, Any]) -> str | None:
    for message in _messages(attrs, "llm.input_messages."):
        if lower(message.get("message.role")) == "user":
            return _message_content(message)
    return None


def trace_question(attrs: dict[str, Any]) -> str | None:
    return question_text(attrs.get("input.value"))


def trace_answer(attrs: dict[str, Any]) -> str | None:
    return answer_text(attrs.get("output.value"))
