"""context_relevance: are the retrieved documents about the question?

- No judge: the share of documents containing at least `relevant` (default 0.5) of the question's
  topic words (`question_words`).
- Judge: one relevance verdict per document (by rank) in one call. Option `metric`: `share` (score
  `context_relevance`), the share of relevant documents; or a reference-free ranking metric from the
  same labels: `precision@k`, `ndcg@k`, `mrr` (scores `context_relevance.precision@5`, ...). The
  prompt (and so the client's content-hash cache key) is the same for every metric, so several
  metrics on one trace cost one call.

Default: pass when at least one document is relevant (recorded as threshold 1/n for n documents).
"""

from __future__ import annotations

import math
import re
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
    earlier_turns,
    explain,
    messages,
    rewritten_question,
    verdict_count,
    with_judge,
)
from ..judge.fence import FencedInputs, fence_inputs
from ..lexical import no_document_text, no_retrieval, overlap, read_context
from ..metric import Evaluator, JudgeVariant, Metric, Options, check_fraction, doc_label, pass_line
from ..scores import Score, ScoreItem, score_items

if TYPE_CHECKING:
    from ..judge.client import JudgeClient

NAME = "context_relevance"
DEFAULT_MIN = None  # at least one relevant document
_METRIC = re.compile(r"(?P<metric>share|precision|ndcg|mrr)(?:@(?P<k>[0-9]+))?")


def question_words(question: str) -> frozenset[str]:
    """The question's topic words: content words minus question-form words (how, many, ...)."""
    return frozenset(w for w in tu.content_words(question) if w not in tu.QUESTION_WORDS)


@dataclass(frozen=True)
class ContextRelevanceOptions(Options):
    relevant: float = 0.5

    def check(self, name: str) -> None:
        check_fraction(name, "relevant", self.relevant)


# --------------------------------------------------------------------------- no judge


def make_context_relevance(min: float | None = None, *, relevant: float = 0.5) -> Evaluator:
    """No-judge context relevance: the share of documents containing at least `relevant` (default 0.5)
    of the question's topic words (`question_words`).

    Default: pass when at least one document is relevant, recorded as threshold 1/n for n
    documents; with `min`, pass when the share >= `min`. No documents -> 0 (fail). A question with no
    topic word -> `skipped` `no_question_words`. Items: one per document.
    """
    return _build(NAME, min, ContextRelevanceOptions(relevant))


def _build(name: str, min: float | None, options: ContextRelevanceOptions) -> Evaluator:
    threshold = pass_line(name, min, DEFAULT_MIN)
    options.check(name)
    relevant = options.relevant

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        if tu.blank(trace.question):
            return Score.skip(name, "no_question", "the trace has no question", threshold=threshold)
        assert trace.question is not None
        wanted = question_words(trace.question)
        if not wanted:
            return Score.skip(
                name, "no_question_words", "the question has no topic words", threshold=threshold
            )
        context = read_context(trace)
        if context is None:
            return no_document_text(name, threshold)
        docs = context.docs
        if not docs:
            return Score.judged(
                name, 0.0, threshold if threshold is not None else 1.0, explanation="no documents retrieved"
            )
        bar = threshold if threshold is not None else 1.0 / len(docs)
        shares = [overlap(wanted, doc.words) for doc in docs]
        oks = [share >= relevant - 1e-9 for share in shares]
        items = score_items(
            (
                doc.label,
                ok,
                f"rank {rank}: {share:.0%} of the question's words ("
                + ", ".join(tu.as_written(sorted(wanted & doc.words), trace.question) or ["none"])
                + ")",
            )
            for rank, (doc, share, ok) in enumerate(zip(docs, shares, oks, strict=True), start=1)
        )
        count = sum(oks)
        rule = "at least one relevant" if threshold is None else f"share >= {threshold:g}"
        explanation = (
            f"{count} of {len(docs)} documents share >= {relevant:.0%} of the question's words ({rule})"
            + context.note()
        )
        return Score.judged(name, count / len(docs), bar, explanation=explanation, items=items)

    return evaluate


# --------------------------------------------------------------------------- judge

CONTEXT_RELEVANCE_VERSION = "context_relevance/4"
# After the version when a follow-up turn was judged against the question the app searched with
# (the same prompt, another question: agreement and calibration keep the two apart).
SEARCHED_VERSION = "+searched/1"

CONTEXT_RELEVANCE_PROMPT = f"""\
Rate whether each retrieved document is relevant to the question: it contains information that helps \
answer it, even in part. Not relevant: about something else, only sharing words with the question, or \
empty. Judge each document on its own, by its text and the question only, not your knowledge.
{ONE_VERDICT_PER_DOCUMENT}"""


class DocumentVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rank: int = Field(ge=1)
    relevant: bool
    reason: str = ""


class ContextRelevanceVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    documents: list[DocumentVerdict]


def context_relevance_messages(fenced: FencedInputs, count: int) -> list[dict[str, str]]:
    return messages(CONTEXT_RELEVANCE_PROMPT, fenced, "question", "documents", note=verdict_count(count))


def parse_metric(metric: str) -> tuple[str, int | None]:
    """`share` | `precision@k` | `ndcg@k` | `ndcg` | `mrr` | `mrr@k` -> (metric, k)."""
    match = _METRIC.fullmatch(metric) if isinstance(metric, str) else None
    if match is None:
        raise ValueError(f"metric: must be share, precision@k, ndcg@k or mrr, got {metric!r}")
    base, k = match["metric"], (int(match["k"]) if match["k"] else None)
    if k is not None and k < 1:
        raise ValueError(f"metric: k must be at least 1, got {metric!r}")
    if base == "share" and k is not None:
        raise ValueError(f"metric: share takes no @k, got {metric!r}")
    if base == "precision" and k is None:
        raise ValueError(f"metric: precision needs @k, got {metric!r}")
    return base, k


def label_metric(metric: str, k: int | None, relevant: Sequence[bool]) -> float:
    """A reference-free ranking metric from per-document relevance labels (rank order).

    precision@k: relevant share of the top min(k, n) documents (so a short, fully relevant list is 1);
    ndcg@k: binary gains, log2 discount, ideal = the same labels sorted relevant-first;
    mrr (@k): 1 / rank of the first relevant document (within the top k), 0 when none.
    """
    top = list(relevant[:k] if k is not None else relevant)
    if not top:
        return 0.0
    if metric == "share":
        return sum(relevant) / len(relevant)
    if metric == "precision":
        return sum(top) / len(top)
    if metric == "mrr":
        return next((1.0 / rank for rank, ok in enumerate(top, start=1) if ok), 0.0)
    dcg = sum(1.0 / math.log2(rank + 1) for rank, ok in enumerate(top, start=1) if ok)
    ideal_count = min(len(top), sum(relevant))
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, ideal_count + 1))
    return dcg / ideal if ideal else 0.0


def make_judge_context_relevance(
    client: JudgeClient, min: float | None = None, *, metric: str = "share"
) -> Evaluator:
    """Judge context relevance in one call (one verdict per document); see the module docstring.

    Default pass line: `share` passes when at least one document is relevant (recorded as threshold
    1/n); `ndcg` and `mrr` default to `min` 1; `precision@k` needs an explicit `min` (its reachable
    maximum depends on the case), like `retrieval.precision@k`.
    """
    base, k = parse_metric(metric)
    name = NAME if base == "share" else f"{NAME}.{metric}"
    threshold = pass_line(name, min, None if base == "share" else 1.0)
    if base == "precision" and min is None:
        raise ValueError(f"min: {name} needs a `min` (its reachable maximum depends on k and the case)")

    judge = Asker(client, name, threshold)

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        question = trace.question
        if question is None or not question.strip():
            return Score.skip(name, "no_question", "the trace has no question", threshold=threshold)
        contexts = trace.contexts
        gate = context_gate(name, contexts, threshold, "nothing relevant")
        if gate is not None:
            return gate
        # Retrieval is judged against what the app searched with: its rewritten, standalone question
        # when it rewrote the user's words, else the question read in the light of the conversation.
        # A follow-up turn only: a trace alone is judged against its question as before.
        searched = rewritten_question(trace) if trace.conversation else None
        if searched is not None:
            fenced = fence_inputs(documents=documents(trace), question=searched)
        else:
            fenced = fence_inputs(
                documents=documents(trace), question=question, conversation=earlier_turns(trace)
            )
        asked = judge.per_document(
            context_relevance_messages(fenced, len(contexts)),
            ContextRelevanceVerdict,
            CONTEXT_RELEVANCE_VERSION + (SEARCHED_VERSION if searched is not None else ""),
            fenced,
            len(contexts),
        )
        if isinstance(asked, Score):
            return asked
        ordered, fields = asked
        labels = [v.relevant for v in ordered]
        items = [
            ScoreItem(text=doc_label(doc.id, rank), ok=v.relevant, evidence=v.reason or None)
            for rank, (doc, v) in enumerate(zip(contexts, ordered, strict=True), start=1)
        ]
        value = label_metric(base, k, labels)
        bar = threshold if threshold is not None else 1.0 / len(contexts)
        rule = "at least one relevant" if threshold is None else f">= {threshold:g}"
        text = (
            f"{sum(labels)} of {len(labels)} documents relevant per the judge; {metric} {value:.3g} ({rule})"
        )
        if searched is not None:
            text += f"; judged against the question the app searched with: {searched[:200]!r}"
        score = Score.judged(name, value, bar, explanation=explain(text, fenced), items=items)
        return with_judge(score, fields)

    return evaluate


def _judge(
    client: JudgeClient, name: str, min: float | None, mode: str | None, options: dict[str, Any]
) -> Evaluator:
    return make_judge_context_relevance(client, min, metric=options.get("metric", "share"))


METRIC = Metric(
    name=NAME,
    doc="Whether the retrieved documents are about the question (the share relevant, or a ranking metric).",
    evaluates="retrieval",
    order=60,
    build=_build,
    options=ContextRelevanceOptions,
    judge=JudgeVariant(
        _judge, options=("metric",), mode_hint=" (use metric: share | precision@k | ndcg@k | mrr)"
    ),
)
