"""The shop assistant: retrieve store policies, compose an answer, trace every request.

Modes (what the monitor should catch):
- `healthy`: the right index, a grounded answer.
- `degraded`: the retriever is pointed at the wrong index (`store-blog`, a config mistake), so the
  documents that answer the question never come back and the answer is off topic.
- `hallucinate`: retrieval is fine, but the answer adds one confident claim no document supports.

Conventions (how the spans are written; ragpulse maps both to the same steps):
- `ragpulse`: OpenTelemetry GenAI + `rag.*` keys through the `semconv.emit` helpers.
- `openinference`: OpenInference attributes written by hand, as Arize's instrumentations do.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import Span, SpanKind, Tracer

from collector.shop_assistant.knowledge import POLICY_INDEX, WRONG_INDEX, Case, KbDocument, load_indexes
from collector.shop_assistant.llm import Completion, ComposerLLM
from collector.shop_assistant.retriever import Bm25Retriever, Hit
from semconv import emit

MODES = ("healthy", "degraded", "hallucinate")
CONVENTIONS = ("ragpulse", "openinference")
MODE_ATTRIBUTE = "app.mode"
CASE_ATTRIBUTE = "rag.case.id"


@dataclass(frozen=True)
class Answer:
    """One handled request: what was asked, retrieved and answered, and its trace id (hex)."""

    question: str
    text: str
    index: str
    hits: list[Hit]
    completion: Completion
    trace_id: str
    case_id: str | None = None

    @property
    def document_ids(self) -> list[str]:
        return [hit.document.id for hit in self.hits]


class ShopAssistant:
    """The RAG pipeline of the example, instrumented with one of two conventions.

    `latency` scales simulated work (a few ms per step, so latency columns mean something);
    0 makes it instant.
    """

    def __init__(
        self,
        tracer: Tracer,
        mode: str = "healthy",
        convention: str = "ragpulse",
        top_k: int = 3,
        latency: float = 1.0,
        labels: bool = False,
        indexes: Mapping[str, Sequence[KbDocument]] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        if convention not in CONVENTIONS:
            raise ValueError(f"unknown convention {convention!r}; use one of {', '.join(CONVENTIONS)}")
        self.tracer = tracer
        self.mode = mode
        self.convention = convention
        self.top_k = top_k
        self.latency = latency
        # Put the expected documents and answer on the root span too (labelled traffic), for a
        # collector that has not loaded the golden cases.
        self.labels = labels
        indexes = indexes if indexes is not None else load_indexes()
        self.retrievers = {name: Bm25Retriever(name, docs) for name, docs in indexes.items()}
        # The bug of `degraded` mode: the index name comes from a stale setting.
        self.index = WRONG_INDEX if mode == "degraded" else POLICY_INDEX
        self.llm = ComposerLLM(hallucinate=mode == "hallucinate")

    # -- the pipeline, without telemetry ------------------------------------------------------

    def retrieve(self, query: str) -> list[Hit]:
        """Search the configured index."""
        hits = self.retrievers[self.index].search(query, self.top_k)
        self._work(0.004)
        return hits

    def generate(self, question: str, hits: Sequence[Hit]) -> Completion:
        """Compose the answer from the retrieved documents."""
        completion = self.llm.complete(question, hits)
        self._work(0.010 + 0.0005 * completion.output_tokens)
        return completion

    def _work(self, seconds: float) -> None:
        if self.latency > 0:
            time.sleep(seconds * self.latency)

    # -- one traced request ------------------------------------------------------------------

    def answer(self, question: str, case: Case | None = None) -> Answer:
        """Handle one question as one trace (root, retrieval step, LLM step)."""
        root_attributes: dict[str, Any] = {MODE_ATTRIBUTE: self.mode}
        if case is not None:
            root_attributes[CASE_ATTRIBUTE] = case.id
        if self.convention == "ragpulse":
            return self._answer_ragpulse(question, case, root_attributes)
        return self._answer_openinference(question, case, root_attributes)

    def _answer_ragpulse(self, question: str, case: Case | None, root_attributes: dict[str, Any]) -> Answer:
        # emit.request sets rag.case.id itself, so it is passed as case_id, not as an attribute.
        attributes = {k: v for k, v in root_attributes.items() if k != CASE_ATTRIBUTE}
        with emit.request(
            self.tracer,
            question,
            name="shop_assistant.answer",
            case_id=case.id if case else None,
            attributes=attributes,
        ) as request:
            if case is not None and self.labels:
                request.expected(documents=list(case.expected_documents), answer=case.expected_answer)
            with emit.retrieval(self.tracer, question, data_source=self.index, top_k=self.top_k) as step:
                hits = self.retrieve(question)
                step.documents(
                    {
                        "id": h.document.id,
                        "score": h.score,
                        "content": h.document.content,
                        "metadata": {"title": h.document.title, "index": self.index},
                    }
                    for h in hits
                )
            with emit.chat(self.tracer, model=self.llm.model, provider=self.llm.provider) as chat:
                completion = self.generate(question, hits)
                chat.messages([{"role": "user", "content": completion.user}], system=completion.system)
                chat.output(
                    completion.text,
                    input_tokens=completion.input_tokens,
                    output_tokens=completion.output_tokens,
                )
            request.answer(completion.text)
            trace_id = _trace_id(request.span)
        return self._result(question, hits, completion, trace_id, case)

    def _answer_openinference(
        self, question: str, case: Case | None, root_attributes: dict[str, Any]
    ) -> Answer:
        attributes = {
            "openinference.span.kind": "CHAIN",
            "input.value": question,
            "input.mime_type": "text/plain",
            **root_attributes,
        }
        if case is not None and self.labels:
            # OpenInference has no key for reference labels; the ragpulse ones go on any span.
            attributes["rag.expected.documents"] = list(case.expected_documents)
            attributes["rag.expected.answer"] = case.expected_answer
        with self.tracer.start_as_current_span(
            "ShopAssistant.answer", kind=SpanKind.SERVER, attributes=attributes
        ) as root:
            with self.tracer.start_as_current_span(
                "PolicyRetriever.retrieve",
                attributes={
                    "openinference.span.kind": "RETRIEVER",
                    "input.value": question,
                    "metadata": json.dumps({"index": self.index, "top_k": self.top_k}),
                },
            ) as span:
                hits = self.retrieve(question)
                for i, h in enumerate(hits):
                    prefix = f"retrieval.documents.{i}.document"
                    span.set_attribute(f"{prefix}.id", h.document.id)
                    span.set_attribute(f"{prefix}.content", h.document.content)
                    span.set_attribute(f"{prefix}.score", h.score)
                    span.set_attribute(
                        f"{prefix}.metadata", json.dumps({"title": h.document.title, "index": self.index})
                    )
            with self.tracer.start_as_current_span(
                "ShopComposer.chat",
                attributes={
                    "openinference.span.kind": "LLM",
                    "llm.model_name": self.llm.model,
                    "llm.provider": self.llm.provider,
                    "llm.invocation_parameters": json.dumps({"max_sentences": self.llm.max_sentences}),
                },
            ) as span:
                completion = self.generate(question, hits)
                for i, message in enumerate(completion.messages):
                    span.set_attribute(f"llm.input_messages.{i}.message.role", message["role"])
                    span.set_attribute(f"llm.input_messages.{i}.message.content", message["content"])
                span.set_attribute("llm.output_messages.0.message.role", "assistant")
                span.set_attribute("llm.output_messages.0.message.content", completion.text)
                span.set_attribute("llm.token_count.prompt", completion.input_tokens)
                span.set_attribute("llm.token_count.completion", completion.output_tokens)
                span.set_attribute(
                    "llm.token_count.total", completion.input_tokens + completion.output_tokens
                )
                span.set_attribute("input.value", json.dumps({"messages": completion.messages}))
                span.set_attribute("input.mime_type", "application/json")
                span.set_attribute("output.value", completion.text)
                span.set_attribute("output.mime_type", "text/plain")
            root.set_attribute("output.value", completion.text)
            root.set_attribute("output.mime_type", "text/plain")
            trace_id = _trace_id(root)
        return self._result(question, hits, completion, trace_id, case)

    def _result(
        self, question: str, hits: list[Hit], completion: Completion, trace_id: str, case: Case | None
    ) -> Answer:
        case_id = case.id if case else None
        return Answer(question, completion.text, self.index, hits, completion, trace_id, case_id)


def _trace_id(span: Span) -> str:
    return format(span.get_span_context().trace_id, "032x")
