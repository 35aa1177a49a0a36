"""The records the mappers read and write: spans in, RAG traces out.

`SpanRecord` is the plain input (what the collector decoded; attributes already JSON values).
`Document`, `Step` and `RagTrace` are the convention's output models, the boundary between the
mapper and everything downstream (tables, evaluators, the demo).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from .values import Attributes

StepKind = Literal["retrieval", "rerank", "llm", "embedding", "tool", "chain", "evaluator"]
STEP_KINDS: tuple[str, ...] = ("retrieval", "rerank", "llm", "embedding", "tool", "chain", "evaluator")
# Steps that make a trace a RAG request; a trace with none of them has convention 'unknown'.
RAG_STEP_KINDS = frozenset({"retrieval", "rerank", "llm", "embedding"})


@dataclass(slots=True)
class EventRecord:
    """A span event: name, time (µs since the epoch) and attributes."""

    name: str
    time_us: int | None = None
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class SpanRecord:
    """One received span, as the mapper reads it. Times are microseconds since the epoch."""

    trace_id: str
    span_id: str
    parent_span_id: str | None = None
    name: str = ""
    kind: str = "INTERNAL"
    start_us: int | None = None
    end_us: int | None = None
    status_code: str = "UNSET"
    status_message: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    service_name: str | None = None
    scope_name: str | None = None
    events: list[EventRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.attributes, Attributes):
            self.attributes = Attributes(self.attributes)

    @property
    def duration_ms(self) -> float | None:
        if self.start_us is None or self.end_us is None:
            return None
        return (self.end_us - self.start_us) / 1000.0


class Document(BaseModel):
    """A retrieved (or reranked) document, in rank order. `id` is never invented."""

    rank: int = Field(ge=1, description="1-based position in the step's result list")
    id: str | None = None
    content: str | None = None
    score: float | None = Field(None, description="higher is better; never a distance")
    distance: float | None = Field(None, description="lower is closer; kept apart from score")
    metadata: dict[str, Any] | None = None


class Step(BaseModel):
    """One step of a RAG request: a span, or a chain of nested same-kind spans collapsed into one."""

    span_id: str
    parent_span_id: str | None = None
    position: int = 0
    kind: StepKind = "chain"
    name: str = ""
    convention: str = "unknown"
    model: str | None = None
    provider: str | None = None
    input: str | None = None
    output: str | None = None
    query: str | None = None
    documents: list[Document] = Field(default_factory=list)
    input_documents: list[Document] = Field(default_factory=list, description="rerank input")
    start_us: int | None = None
    end_us: int | None = None
    duration_ms: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    status: str = "UNSET"
    span_ids: list[str] = Field(default_factory=list, description="every span collapsed into this step")
    tool_name: str | None = Field(None, description="the tool called (tool steps, and retrievals by tool)")
    result_size: int | None = Field(None, description="characters of the tool's result as recorded")


class ConversationTurn(BaseModel):
    """An earlier turn of a trace's conversation (its session), as a judge is shown it."""

    question: str | None = None
    answer: str | None = None


class RagTrace(BaseModel):
    """One assembled request: question, answer, steps with documents, and what it was read with."""

    trace_id: str
    service_name: str | None = None
    root_span_id: str | None = None
    start_us: int | None = None
    end_us: int | None = None
    duration_ms: float | None = None
    question: str | None = None
    answer: str | None = None
    convention: str = "unknown"
    status: Literal["ok", "error"] = "ok"
    steps: list[Step] = Field(default_factory=list)
    case_id: str | None = None
    expected_documents: list[str] | None = None
    expected_answer: str | None = None
    session_id: str | None = None
    user_id: str | None = None
    retrieval_ms: float | None = None
    generation_ms: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    span_count: int = 0
    tool_calls: int = Field(0, description="tool calls, retrievals through tools included")
    tool_errors: int = Field(0, description="tool calls whose span has an error status")
    retrieval_rounds: int = Field(0, description="retrieval steps")
    llm_calls: int = Field(0, description="LLM steps")
    mapping_error: str | None = Field(None, description="set when a mapper bug cut the mapping short")
    conversation: list[ConversationTurn] = Field(
        default_factory=list,
        description="the earlier turns of its session, oldest first: set by whoever judges the trace "
        "(the judge stage, a case's `conversation`), never by the mapping",
    )

    def steps_of(self, *kinds: str) -> list[Step]:
        return [s for s in self.steps if s.kind in kinds]

    @property
    def has_retrieval(self) -> bool:
        """Whether the trace retrieved at all (a retrieval or rerank step, even one that found
        nothing). Scores that read documents do not apply to a trace without: `no_retrieval`."""
        return any(step.kind == "retrieval" or step.kind == "rerank" for step in self.steps)

    @property
    def contexts(self) -> list[Document]:
        """The documents the answer was generated from (`context_documents` of the steps)."""
        return context_documents(self.steps)

    @property
    def retrieved_ids(self) -> list[str | None]:
        return [d.id for d in self.contexts]


def context_documents(steps: list[Step]) -> list[Document]:
    """The documents the answer was generated from: every retrieval round's documents in step
    order, where a rerank step's output replaces the documents retrieved since the previous rerank
    (or, right after another rerank, that rerank's output); rounds that start after the last LLM
    step ended came after the answer and are left out; a document retrieved again (the same id and
    text, or the same text without an id) counts once, at its first place.

    Plain loops: several evaluators read it for every scored trace."""
    answer_end = None
    for step in reversed(steps):
        if step.kind == "llm":
            answer_end = step.end_us
            break
    rounds: list[list[Document]] = []
    since_rerank = False  # the last round holds retrievals made since the last rerank
    for step in steps:
        kind = step.kind
        if kind != "retrieval" and kind != "rerank":
            continue
        if answer_end is not None and step.start_us is not None and step.start_us >= answer_end:
            continue
        if kind == "retrieval":
            if since_rerank:
                rounds[-1].extend(step.documents)
            else:
                rounds.append(list(step.documents))
                since_rerank = True
        elif step.documents:
            if rounds:
                rounds[-1] = list(step.documents)
            else:
                rounds.append(list(step.documents))
            since_rerank = False
    if not rounds:
        return []
    docs = rounds[0] if len(rounds) == 1 else [d for found in rounds for d in found]
    return _first_of_each(docs) if len(docs) > 1 else docs


def _first_of_each(docs: list[Document]) -> list[Document]:
    seen: set[tuple[str | None, str | None]] = set()
    kept = []
    for doc in docs:
        key = (doc.id, doc.content)
        if key in seen and key != (None, None):
            continue
        seen.add(key)
        kept.append(doc)
    return kept if len(kept) < len(docs) else docs
