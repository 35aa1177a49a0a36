"""context_precision: are the useful documents ranked first?

Both variants score the RAGAS / DeepEval rank-aware average precision of the useful documents
(`rank_aware_precision`; not `map@k`); what differs is how a document is found useful:

- No judge: it contains at least `useful` (default 0.3) of the content words of the question and
  the expected answer together.
- Judge: one usefulness verdict per document ("useful for arriving at the reference answer"),
  against the expected answer, or the answer when none is known.

Default `min` 0.5.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from semconv.models import RagTrace

from .. import textutil as tu
from ..judge.asking import (
    ONE_VERDICT_PER_DOCUMENT,
    Asker,
    context_gate,
    documents,
    explain,
    messages,
    verdict_count,
    with_judge,
)
from ..judge.fence import FencedInputs, fence_inputs
from ..lexical import no_document_text, no_retrieval, overlap, read_context
from ..metric import Evaluator, JudgeVariant, Metric, Options, check_fraction, doc_label, pass_line
from ..scores import Score, ScoreItem, score_items

if TYPE_CHECKING:
    from ..judge.client import JudgeClient

NAME = "context_precision"
DEFAULT_MIN = 0.5


def rank_aware_precision(useful: Sequence[bool]) -> float:
    """RAGAS / DeepEval context precision: mean over useful positions k of precision@k.

    `sum_k (useful in 1..k / k) * v_k / (number useful)`, 0.0 when nothing is useful. Unlike `map@k`
    (evaluators.retrieval), the denominator is the number of useful *retrieved* documents, not the
    number of expected ones, so one useful document at rank 1 scores 1 whatever was missed
    (docs/scores.md, "context_precision"); and there is no epsilon, so a perfect list scores exactly 1.
    """
    hits = 0
    total = 0.0
    for k, ok in enumerate(useful, start=1):
        if ok:
            hits += 1
            total += hits / k
    return total / hits if hits else 0.0


@dataclass(frozen=True)
class ContextPrecisionOptions(Options):
    useful: float = 0.3

    def check(self, name: str) -> None:
        check_fraction(name, "useful", self.useful)


# --------------------------------------------------------------------------- no judge


def make_context_precision(min: float | None = None, *, useful: float = 0.3) -> Evaluator:
    """No-judge context precision: `rank_aware_precision` of the documents in context order, a
    document being *useful* when it contains at least `useful` (default 0.3) of the content words of
    the question and the expected answer together. Default `min` 0.5.

    Needs the question and the expected answer (`no_question` / `no_reference`; the judge version
    can fall back on the answer, this one does not). No documents -> 0. Items: one per document,
    evidence its rank and overlap.
    """
    return _build(NAME, min, ContextPrecisionOptions(useful))


def _build(name: str, min: float | None, options: ContextPrecisionOptions) -> Evaluator:
    threshold = pass_line(name, min, DEFAULT_MIN)
    options.check(name)
    useful = options.useful
    below = f"(below {useful:.0%})"

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        if tu.blank(trace.question):
            return Score.skip(name, "no_question", "the trace has no question", threshold=threshold)
        if tu.blank(trace.expected_answer):
            return Score.skip(
                name,
                "no_reference",
                "the trace has no expected answer to judge usefulness by",
                threshold=threshold,
            )
        context = read_context(trace)
        if context is None:
            return no_document_text(name, threshold)
        if not context.docs:
            return Score.judged(name, 0.0, threshold, explanation="no documents retrieved")
        wanted = tu.content_words(f"{trace.question}\n{trace.expected_answer}")
        shares = [overlap(wanted, doc.words) for doc in context.docs]
        verdicts = [share >= useful - 1e-9 for share in shares]
        items = score_items(
            (
                doc.label,
                ok,
                f"rank {rank}: {share:.0%} of question + expected-answer words "
                + ("(useful)" if ok else below),
            )
            for rank, (doc, share, ok) in enumerate(zip(context.docs, shares, verdicts, strict=True), start=1)
        )
        ranks = [str(rank) for rank, ok in enumerate(verdicts, start=1) if ok]
        explanation = (
            f"{len(ranks)} of {len(verdicts)} documents useful"
            + (f" (ranks {', '.join(ranks)})" if ranks else "")
            + "; rank-aware average precision over the useful documents (not map@k)"
            + context.note()
        )
        return Score.judged(
            name, rank_aware_precision(verdicts), threshold, explanation=explanation, items=items
        )

    return evaluate


# --------------------------------------------------------------------------- judge

CONTEXT_PRECISION_VERSION = "context_precision/3"

CONTEXT_PRECISION_PROMPT = f"""\
Rate whether each retrieved document was useful for arriving at the reference answer to the \
question: it states information the reference uses. Not useful: about something else, \
only sharing words with the question, or empty. Judge each document on its own, by its text, the \
question and the reference only, not your knowledge.
{ONE_VERDICT_PER_DOCUMENT}"""


class UsefulnessVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rank: int = Field(ge=1)
    useful: bool
    reason: str = ""


class ContextPrecisionVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    documents: list[UsefulnessVerdict]


def context_precision_messages(fenced: FencedInputs, count: int) -> list[dict[str, str]]:
    return messages(
        CONTEXT_PRECISION_PROMPT, fenced, "question", "reference", "documents", note=verdict_count(count)
    )


def make_judge_context_precision(client: JudgeClient, min: float | None = None) -> Evaluator:
    """Judge context precision in one call: one usefulness verdict per document ("useful for
    arriving at the reference answer"), then the RAGAS / DeepEval rank-aware average precision over
    the useful documents (`rank_aware_precision`, no epsilon; not `map@k`). The reference is the
    expected answer, or the app's answer when none is known (RAGAS's context utilization); the
    explanation says which. Default `min` 0.5.

    No question -> `skipped` `no_question`; neither expected answer nor answer -> `no_reference`;
    no documents -> 0 without a call; a verdict list that does not cover ranks 1..n -> `error`
    `bad_verdict`.
    """
    name = NAME
    threshold = pass_line(name, min, DEFAULT_MIN)

    judge = Asker(client, name, threshold)

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        if tu.blank(trace.question):
            return Score.skip(name, "no_question", "the trace has no question", threshold=threshold)
        expected, answer = trace.expected_answer, trace.answer
        reference, which = (expected, "expected answer") if not tu.blank(expected) else (answer, "answer")
        if tu.blank(reference):
            return Score.skip(
                name, "no_reference", "the trace has no expected answer or answer", threshold=threshold
            )
        contexts = trace.contexts
        gate = context_gate(name, contexts, threshold, "nothing useful")
        if gate is not None:
            return gate
        fenced = fence_inputs(documents=documents(trace), question=trace.question, reference=reference)
        asked = judge.per_document(
            context_precision_messages(fenced, len(contexts)),
            ContextPrecisionVerdict,
            CONTEXT_PRECISION_VERSION,
            fenced,
            len(contexts),
        )
        if isinstance(asked, Score):
            return asked
        ordered, fields = asked
        labels = [v.useful for v in ordered]
        items = [
            ScoreItem(text=doc_label(doc.id, rank), ok=v.useful, evidence=f"rank {rank}: {v.reason or '-'}")
            for rank, (doc, v) in enumerate(zip(contexts, ordered, strict=True), start=1)
        ]
        useful = [str(rank) for rank, ok in enumerate(labels, start=1) if ok]
        text = (
            f"{len(useful)} of {len(labels)} documents useful for the {which} per the judge"
            + (f" (ranks {', '.join(useful)})" if useful else "")
            + "; rank-aware average precision over the useful documents (not map@k)"
        )
        score = Score.judged(
            name, rank_aware_precision(labels), threshold, explanation=explain(text, fenced), items=items
        )
        return with_judge(score, fields)

    return evaluate


def _judge(
    client: JudgeClient, name: str, min: float | None, mode: str | None, options: dict[str, Any]
) -> Evaluator:
    return make_judge_context_precision(client, min)


METRIC = Metric(
    name=NAME,
    doc="Whether the useful documents are ranked first (rank-aware average precision).",
    evaluates="retrieval",
    order=50,
    build=_build,
    options=ContextPrecisionOptions,
    judge=JudgeVariant(_judge),
)
