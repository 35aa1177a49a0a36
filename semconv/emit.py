"""Emit the ragpulse convention with the plain OpenTelemetry API: one context manager per step.

tracer = trace.get_tracer("my-rag-app")
with emit.request(tracer, question) as req:
    with emit.retrieval(tracer, question, data_source="kb") as step:
        step.documents([{"id": "refunds", "score": 0.82, "content": "..."}])
    with emit.chat(tracer, model="gpt-4o-mini", provider="openai") as step:
        step.messages([{"role": "user", "content": prompt}])
        step.output(answer, input_tokens=812, output_tokens=64)
    req.answer(answer)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry.trace import Span, SpanKind, Tracer

from semconv import names


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


class RequestSpan:
    """The root span of one RAG request."""

    def __init__(self, span: Span) -> None:
        self.span = span

    def answer(self, text: str) -> None:
        self.span.set_attribute(names.RAG_ANSWER, text)

    def expected(self, documents: Sequence[str] | None = None, answer: str | None = None) -> None:
        """Label the request (test or labelled traffic): relevant document ids, reference answer."""
        if documents is not None:
            self.span.set_attribute(names.RAG_EXPECTED_DOCUMENTS, list(documents))
        if answer is not None:
            self.span.set_attribute(names.RAG_EXPECTED_ANSWER, answer)


class RetrievalSpan:
    def __init__(self, span: Span) -> None:
        self.span = span

    def documents(self, documents: Iterable[Mapping[str, Any]]) -> None:
        """Ranked documents, best first: `{"id", "score", "content", "metadata"}` (all optional)."""
        self.span.set_attribute(names.RETRIEVAL_DOCUMENTS, _json([dict(d) for d in documents]))


class ChatSpan:
    def __init__(self, span: Span) -> None:
        self.span = span

    def messages(self, messages: Iterable[Mapping[str, str]], system: str | None = None) -> None:
        """Chat input as `{"role", "content"}` pairs, recorded in the GenAI parts shape."""
        parts = [{"role": m["role"], "parts": [{"type": "text", "content": m["content"]}]} for m in messages]
        self.span.set_attribute(names.INPUT_MESSAGES, _json(parts))
        if system is not None:
            self.span.set_attribute(names.SYSTEM_INSTRUCTIONS, _json([{"type": "text", "content": system}]))

    def output(
        self,
        text: str,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        finish_reason: str = "stop",
        response_model: str | None = None,
    ) -> None:
        message = {
            "role": "assistant",
            "parts": [{"type": "text", "content": text}],
            "finish_reason": finish_reason,
        }
        self.span.set_attribute(names.OUTPUT_MESSAGES, _json([message]))
        if input_tokens is not None:
            self.span.set_attribute(names.USAGE_INPUT_TOKENS, input_tokens)
        if output_tokens is not None:
            self.span.set_attribute(names.USAGE_OUTPUT_TOKENS, output_tokens)
        if response_model is not None:
            self.span.set_attribute(names.RESPONSE_MODEL, response_model)


@contextmanager
def request(
    tracer: Tracer,
    question: str,
    name: str = "rag.request",
    case_id: str | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[RequestSpan]:
    """The root span of a request, carrying `rag.question` (and `rag.case.id` when given)."""
    attrs: dict[str, Any] = {names.RAG_STEP: "chain", names.RAG_QUESTION: question, **(attributes or {})}
    if case_id is not None:
        attrs[names.RAG_CASE_ID] = case_id
    with tracer.start_as_current_span(name, kind=SpanKind.SERVER, attributes=attrs) as span:
        yield RequestSpan(span)


@contextmanager
def retrieval(
    tracer: Tracer, query: str, data_source: str | None = None, top_k: int | None = None, rerank: bool = False
) -> Iterator[RetrievalSpan]:
    """A retrieval (or, with `rerank=True`, a rerank) step with its query."""
    operation = names.OP_RERANK if rerank else names.OP_RETRIEVAL
    attrs: dict[str, Any] = {names.OPERATION_NAME: operation, names.RETRIEVAL_QUERY_TEXT: query}
    if data_source is not None:
        attrs[names.DATA_SOURCE_ID] = data_source
    if top_k is not None:
        attrs[names.RETRIEVAL_TOP_K] = top_k
    span_name = f"{operation} {data_source}" if data_source else operation
    with tracer.start_as_current_span(span_name, kind=SpanKind.CLIENT, attributes=attrs) as span:
        yield RetrievalSpan(span)


@contextmanager
def chat(tracer: Tracer, model: str, provider: str | None = None) -> Iterator[ChatSpan]:
    """An LLM chat step (`gen_ai.operation.name = chat`)."""
    attrs: dict[str, Any] = {names.OPERATION_NAME: names.OP_CHAT, names.REQUEST_MODEL: model}
    if provider is not None:
        attrs[names.PROVIDER_NAME] = provider
    with tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attrs) as span:
        yield ChatSpan(span)
