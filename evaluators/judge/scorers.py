"""Judge evaluators: `Callable[[RagTrace], Score]` built on the fail-closed `JudgeClient`.
Default pass lines are those of the no-judge variants (`evaluators.text.DEFAULT_MIN`).

One judge call per evaluator per trace (docs/scores.md, "The judge", and each score's section):

- `make_judge_faithfulness`: the judge extracts the answer's claims AND gives each a verdict
  (supported / unsupported / contradicted) with the supporting document's id and a short quote, in
  one call. "Not stated" is unsupported. Mode `claims`: value = supported fraction, pass when
  >= `min` (default 1). Mode `answer`: value 1 when every claim is supported, else 0; pass when 1.
  Label `hallucination` when at least one claim is contradicted (a categorical indicator, on pass
  or fail); the explanation counts unsupported and contradicted claims separately.
- `make_judge_context_relevance`: one verdict per document (by rank) in one call. Metric `share`
  (score `context_relevance`): share of relevant documents, pass when at least one is relevant (or
  share >= `min`). Reference-free ranking metrics from the same labels: `precision@k`, `ndcg@k`,
  `mrr` (scores `context_relevance.precision@5`, ...). The prompt (and so the client's content-hash
  cache key) is the same for every metric, so several metrics on one trace cost one call.
- `make_judge_context_recall`: the judge splits the EXPECTED answer into claims and judges each
  against the documents (the faithfulness check, other text); value = supported share.
- `make_judge_context_precision`: one usefulness verdict per document against the expected answer
  (or the answer when none is known), then the rank-aware average precision of the useful ones.
- `make_judge_answer_relevance`: the question's parts, each addressed or not, and a noncommittal flag.
- `make_judge_answer_correctness`: answer claims judged against the expected answer and, in mode
  `f1`, the expected statements found in the answer or not; F1 (mode `precision`: precision).

Rules shared by all (where they apply):

- The answer is pre-checked with the deterministic `claims()`: a refusal or pleasantry-only answer is
  `skipped` `no_claims` without a call; no answer -> `skipped` `no_answer`.
- No documents -> value 0, `fail`, without a call: an empty context supports nothing and contains
  nothing relevant. Documents that all lack text -> `skipped` `no_document_text` (as without a judge).
- A judge error (transport, malformed, schema-violating, refused, truncated) -> `error` with the
  client's `error_kind` as label; a verdict that passes the schema but not our checks (ranks that do
  not cover 1..n once each, no claim / statement / part where the input has some) -> `error`
  `bad_verdict`. An error never passes. These checks go to the client as its `check`, which runs
  them before caching: a rejected verdict is never cached, so the next run (or the next metric
  sharing the call) asks the judge again instead of replaying it.
- Verdicts are checked beyond the schema: a "supported" claim whose `doc_id` is not one of the
  trace's documents, or whose quote is not whole words of that document's text as the judge saw it
  (clipped), at least 3 of them unless the whole text, is counted as unsupported, and the item says
  why (a judge cannot make a claim pass by citing a document that does not say it).
- Every judge score carries `client.score_fields(result, PROMPT_VERSION)`; clipping of long
  documents is reported in the explanation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from semconv.models import Document, RagTrace

from ..scores import Score, ScoreItem
from ..text import (
    DEFAULT_MIN,
    FAITHFULNESS_ALIASES,
    claims,
    no_document_text,
    no_retrieval,
    rank_aware_precision,
)
from .client import JudgeClient, JudgeResult
from .fence import ClippedDocument, FencedInputs, fence_inputs, neutralize
from .prompts import (
    ANSWER_CORRECTNESS_VERSION,
    ANSWER_PRECISION_VERSION,
    ANSWER_RELEVANCE_VERSION,
    CONTEXT_PRECISION_VERSION,
    CONTEXT_RECALL_VERSION,
    CONTEXT_RELEVANCE_VERSION,
    FAITHFULNESS_VERSION,
    AnswerCorrectnessVerdict,
    AnswerPrecisionVerdict,
    AnswerRelevanceVerdict,
    ClaimVerdict,
    ContextPrecisionVerdict,
    ContextRelevanceVerdict,
    DocumentVerdict,
    FaithfulnessVerdict,
    UsefulnessVerdict,
    answer_correctness_messages,
    answer_relevance_messages,
    context_precision_messages,
    context_recall_messages,
    context_relevance_messages,
    faithfulness_messages,
)

Evaluator = Callable[[RagTrace], Score]
FAITHFULNESS_MODES = ("claims", "answer")
_METRIC = re.compile(r"(?P<metric>share|precision|ndcg|mrr)(?:@(?P<k>[0-9]+))?")


# --------------------------------------------------------------------------- shared pieces


def _check_min(name: str, min: float | None) -> None:
    if min is None:
        return
    if isinstance(min, bool) or not isinstance(min, int | float) or not 0.0 <= float(min) <= 1.0:
        raise ValueError(f"{name}: min must be a number between 0 and 1, got {min!r}")


def _label(doc_id: str | None, rank: int) -> str:
    """How an item or a piece of evidence names a document: its id, else its rank."""
    return doc_id if doc_id is not None else f"rank {rank}"


def _with_judge(score: Score, fields: dict[str, Any]) -> Score:
    return Score.model_validate({**score.model_dump(), **fields})


def _explain(text: str, fenced: FencedInputs) -> str:
    clipped = fenced.clip.summary()
    return f"{text}; {clipped}" if clipped else text


def _error(
    name: str, client: JudgeClient, result: JudgeResult[Any], version: str, threshold: float | None
) -> Score:
    kind = result.error_kind or "bad_response"
    # A rejected verdict's reason is ours and says what was wrong with the reply; the call did not fail.
    explanation = result.error if kind == "bad_verdict" else f"judge error ({kind}): {result.error}"
    score = Score.fail_error(name, kind, explanation or kind, threshold=threshold)
    return _with_judge(score, client.score_fields(result, version))


_Verdict = TypeVar("_Verdict", bound=BaseModel)
_PerDocument = TypeVar("_PerDocument", ContextRelevanceVerdict, ContextPrecisionVerdict)


@dataclass(frozen=True)
class _Asker:
    """One evaluator's judge calls: the client, the score name and pass line its errors carry."""

    client: JudgeClient
    name: str
    threshold: float | None

    def ask(
        self,
        messages: list[dict[str, str]],
        schema: type[_Verdict],
        version: str,
        fenced: FencedInputs,
        check: Callable[[_Verdict], str | None],
    ) -> tuple[_Verdict, dict[str, Any]] | Score:
        """One call: (the parsed verdict, the score's judge fields), or the `error` score.

        `check` is the scorer's verdict check (None: usable, else why not). The client runs it before
        caching, so a rejected verdict (`error` `bad_verdict`) is never replayed from the cache."""
        result = self.client.judge(
            messages, schema, prompt_version=version, fence_token=fenced.fence.token, check=check
        )
        if result.parsed is None:
            return _error(self.name, self.client, result, version, self.threshold)
        return result.parsed, self.client.score_fields(result, version)

    def per_document(
        self,
        messages: list[dict[str, str]],
        schema: type[_PerDocument],
        version: str,
        fenced: FencedInputs,
        count: int,
    ) -> tuple[list[Any], dict[str, Any]] | Score:
        """One call for a verdict per document: (the verdicts in rank order, the judge fields), or
        the `error` score (a judge fault, or `bad_verdict` when the ranks do not cover 1..count)."""

        def check(parsed: _PerDocument) -> str | None:
            ordered = in_rank_order(parsed.documents, count)
            return ordered if isinstance(ordered, str) else None

        asked = self.ask(messages, schema, version, fenced, check)
        if isinstance(asked, Score):
            return asked
        parsed, fields = asked
        ordered = in_rank_order(parsed.documents, count)
        assert not isinstance(ordered, str)  # the check passed
        return ordered, fields


def _present(text: str | None) -> str | None:
    return None if text is None or not text.strip() else text


# A quote shorter than this (in words) is too common to prove anything ("is", "30 days" occur in
# many documents); it counts only when it is the document's whole text.
MIN_QUOTE_WORDS = 3


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


def quote_problem(quote: str, text: str, label: str) -> str | None:
    """Why `quote` is no evidence from document `label` whose shown text is `text`, or None when it is:
    whole words of the text, in order (as stored or as the judge saw it, neutralised), at least
    `MIN_QUOTE_WORDS` of them unless they are the whole text."""
    wanted = _words(quote)
    if not wanted:
        return "the judge gave no quote"
    for form in (text, neutralize(text)):
        words = _words(form)
        if len(wanted) < MIN_QUOTE_WORDS and wanted != words:
            return (
                f"the judge's quote is too short to check ({len(wanted)} word(s), {MIN_QUOTE_WORDS} needed)"
            )
        if f" {' '.join(wanted)} " in f" {' '.join(words)} ":
            return None
    return f"the judge's quote does not occur in doc {label}"


def _context_gate(
    name: str, documents: Sequence[Document], threshold: float | None, nothing: str
) -> Score | None:
    """The score when the documents cannot be judged (no call made), else None: no documents ->
    0 `fail` (`nothing` says what an empty context means), none with text -> `skipped`."""
    if not documents:
        explanation = f"no documents retrieved: {nothing} (no judge call)"
        # No pass line ("at least one relevant"): 0 of nothing fails against 1.
        return Score.judged(name, 0.0, 1.0 if threshold is None else threshold, explanation=explanation)
    if all(doc.content is None for doc in documents):
        return no_document_text(name, threshold)
    return None


def _blank(text: str | None) -> bool:
    return text is None or not text.strip()


def _default_min(name: str, min: float | None) -> float:
    _check_min(name, min)
    default = DEFAULT_MIN[name]
    assert default is not None
    return default if min is None else float(min)


def _documents(trace: RagTrace) -> list[tuple[str | None, str]]:
    return [(doc.id, doc.content or "") for doc in trace.contexts]


@dataclass
class ClaimTally:
    """Claim verdicts after our own evidence check (see `check_claims`)."""

    items: list[ScoreItem]
    supported: int = 0
    unsupported: int = 0
    contradicted: int = 0
    overruled: int = 0

    @property
    def total(self) -> int:
        return self.supported + self.unsupported + self.contradicted


def check_claims(verdicts: Sequence[ClaimVerdict], shown: Sequence[ClippedDocument]) -> ClaimTally:
    """Count claim verdicts, overruling to `unsupported` any supported or contradicted verdict whose
    cited document is not one the judge was `shown`, or whose quote is not evidence from it
    (`quote_problem`, against the text as shown: a quote from a clipped-off part was not seen).
    A document is cited by its id (as stored or as shown, neutralised) or its rank ("2", "rank 2");
    a reference that several documents answer to (a shared id, an id that is another's rank) is
    looked up in each. Items carry the evidence (document and quote, or the judge's reason, or why
    the verdict was overruled)."""
    by_ref: dict[str, list[ClippedDocument]] = {}
    for doc in shown:
        refs = {str(doc.rank), f"rank {doc.rank}"}
        if doc.id is not None:
            refs |= {doc.id, neutralize(doc.id)}
        for ref in refs:
            by_ref.setdefault(ref, []).append(doc)

    tally = ClaimTally(items=[])
    for verdict in verdicts:
        kind = verdict.verdict
        evidence = verdict.reason or kind
        if kind in ("supported", "contradicted"):
            quote = (verdict.quote or "").strip()
            cited, problem = _find_evidence(by_ref.get((verdict.doc_id or "").strip(), []), quote)
            if cited is None:
                tally.overruled += 1
                kind = "unsupported"
                problem = (
                    problem or f"the judge cited document {verdict.doc_id!r}, which the trace does not have"
                )
                evidence = f"{verdict.verdict} by the judge, counted unsupported: {problem}"
            else:
                evidence = f"doc {_label(cited.id, cited.rank)}: {quote}"
                if verdict.verdict == "contradicted":
                    because = f" ({verdict.reason})" if verdict.reason else ""
                    evidence = f"contradicted by {evidence}{because}"
        if kind == "supported":
            tally.supported += 1
        elif kind == "contradicted":
            tally.contradicted += 1
        else:
            tally.unsupported += 1
            if verdict.verdict == "unsupported":
                evidence = f"unsupported: {verdict.reason or 'not stated in the documents'}"
        tally.items.append(ScoreItem(text=verdict.claim, ok=kind == "supported", evidence=evidence))
    return tally


def _find_evidence(
    candidates: Sequence[ClippedDocument], quote: str
) -> tuple[ClippedDocument | None, str | None]:
    """The first candidate document the quote is evidence from, or (None, why not; None when there
    is no candidate)."""
    problem = None
    for doc in candidates:
        problem = quote_problem(quote, doc.text, _label(doc.id, doc.rank))
        if problem is None:
            return doc, None
    return None, problem


_Ranked = TypeVar("_Ranked", DocumentVerdict, UsefulnessVerdict)


def in_rank_order(verdicts: Sequence[_Ranked], count: int) -> list[_Ranked] | str:
    """The per-document verdicts ordered by rank, or why they cannot be used: exactly one verdict
    per rank 1..count is required (a judge that skips or repeats a document gives no verdict)."""
    ranks = sorted(v.rank for v in verdicts)
    if ranks != list(range(1, count + 1)):
        return (
            f"the judge returned {len(verdicts)} verdict(s) with ranks {ranks} for "
            f"{count} document(s) (ranks 1..{count} expected)"
        )
    by_rank = {v.rank: v for v in verdicts}
    return [by_rank[rank] for rank in range(1, count + 1)]


# --------------------------------------------------------------------------- faithfulness


def _claims_found(verdict: FaithfulnessVerdict) -> str | None:
    # Asked only when the answer has checkable sentences (a refusal is skipped before the call), so
    # no claim at all is an unusable verdict, never a skip: a skip does not fail a suite case, and a
    # broken or manipulated judge answering `{"claims": []}` would pass every case.
    return None if verdict.claims else "the judge found no claim in an answer that has checkable sentences"


def make_judge_faithfulness(
    client: JudgeClient,
    min: float | None = None,
    *,
    mode: str = "claims",
    name: str = "faithfulness",
) -> Evaluator:
    """Judge faithfulness in one call (claims + verdicts); see the module docstring."""
    if name not in FAITHFULNESS_ALIASES:
        raise ValueError(f"faithfulness name must be one of {', '.join(FAITHFULNESS_ALIASES)}, got {name!r}")
    if mode not in FAITHFULNESS_MODES:
        raise ValueError(f"mode: must be one of {', '.join(FAITHFULNESS_MODES)} for {name}, got {mode!r}")
    _check_min(name, min)
    if mode == "answer" and min is not None and float(min) != 1.0:
        raise ValueError(f"min: mode answer scores 1 or 0 and passes at 1; drop min for {name}")
    threshold = 1.0 if min is None else float(min)

    judge = _Asker(client, name, threshold)

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        answer = trace.answer
        if answer is None or not answer.strip():
            return Score.skip(name, "no_answer", "the trace has no answer to check", threshold=threshold)
        if not claims(answer):
            return Score.skip(
                name,
                "no_claims",
                "the answer states nothing checkable (a refusal, a question or a pleasantry)",
                threshold=threshold,
            )
        documents = trace.contexts
        gate = _context_gate(name, documents, threshold, "an empty context supports no claim")
        if gate is not None:
            return gate
        fenced = fence_inputs(
            documents=_documents(trace),
            question=_present(trace.question),
            answer=answer,
        )
        asked = judge.ask(
            faithfulness_messages(fenced), FaithfulnessVerdict, FAITHFULNESS_VERSION, fenced, _claims_found
        )
        if isinstance(asked, Score):
            return asked
        parsed, fields = asked
        verdicts = parsed.claims
        tally = check_claims(verdicts, fenced.clip.documents)
        supported, unsupported, contradicted = tally.supported, tally.unsupported, tally.contradicted
        items, overruled = tally.items, tally.overruled

        total = len(verdicts)
        fraction = supported / total
        value = fraction if mode == "claims" else (1.0 if supported == total else 0.0)
        text = (
            f"{supported} of {total} claims supported, {unsupported} unsupported, "
            f"{contradicted} contradicted (mode {mode})"
        )
        if overruled:
            text += f"; {overruled} verdict(s) overruled to unsupported (evidence not in the documents)"
        score = Score.judged(
            name,
            value,
            threshold,
            explanation=_explain(text, fenced),
            items=items,
            label="hallucination" if contradicted else None,
        )
        return _with_judge(score, fields)

    return evaluate


# --------------------------------------------------------------------------- context relevance


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
    name = "context_relevance" if base == "share" else f"context_relevance.{metric}"
    _check_min(name, min)
    if base == "precision" and min is None:
        raise ValueError(f"min: {name} needs a `min` (its reachable maximum depends on k and the case)")
    threshold: float | None = float(min) if min is not None else (None if base == "share" else 1.0)

    judge = _Asker(client, name, threshold)

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        question = trace.question
        if question is None or not question.strip():
            return Score.skip(name, "no_question", "the trace has no question", threshold=threshold)
        documents = trace.contexts
        gate = _context_gate(name, documents, threshold, "nothing relevant")
        if gate is not None:
            return gate
        fenced = fence_inputs(documents=_documents(trace), question=question)
        asked = judge.per_document(
            context_relevance_messages(fenced, len(documents)),
            ContextRelevanceVerdict,
            CONTEXT_RELEVANCE_VERSION,
            fenced,
            len(documents),
        )
        if isinstance(asked, Score):
            return asked
        ordered, fields = asked
        labels = [v.relevant for v in ordered]
        items = [
            ScoreItem(text=_label(doc.id, rank), ok=v.relevant, evidence=v.reason or None)
            for rank, (doc, v) in enumerate(zip(documents, ordered, strict=True), start=1)
        ]
        value = label_metric(base, k, labels)
        bar = threshold if threshold is not None else 1.0 / len(documents)
        rule = "at least one relevant" if threshold is None else f">= {threshold:g}"
        text = (
            f"{sum(labels)} of {len(labels)} documents relevant per the judge; {metric} {value:.3g} ({rule})"
        )
        score = Score.judged(name, value, bar, explanation=_explain(text, fenced), items=items)
        return _with_judge(score, fields)

    return evaluate


# --------------------------------------------------------------------------- context recall


def _statements_found(verdict: FaithfulnessVerdict) -> str | None:
    # The expected answer has checkable sentences (checked before the call).
    return None if verdict.claims else "the judge found no statement in the expected answer"


def make_judge_context_recall(client: JudgeClient, min: float | None = None) -> Evaluator:
    """Judge context recall in one call: the judge splits the EXPECTED answer into claims and gives
    each a verdict against the documents (with doc id and quote, checked like faithfulness).
    Value = share of expected-answer claims the documents support; default `min` 0.8.

    No expected answer -> `skipped` `no_reference` (an error in suites); an expected answer with
    nothing checkable -> `skipped` `no_claims`; no documents -> 0 without a call.
    """
    name = "context_recall"
    threshold = _default_min(name, min)

    judge = _Asker(client, name, threshold)

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        expected = trace.expected_answer
        if _blank(expected):
            return Score.skip(name, "no_reference", "the trace has no expected answer", threshold=threshold)
        assert expected is not None
        if not claims(expected):
            return Score.skip(
                name, "no_claims", "the expected answer states nothing checkable", threshold=threshold
            )
        gate = _context_gate(name, trace.contexts, threshold, "it contains none of the expected answer")
        if gate is not None:
            return gate
        fenced = fence_inputs(
            documents=_documents(trace),
            question=_present(trace.question),
            reference=expected,
        )
        asked = judge.ask(
            context_recall_messages(fenced),
            FaithfulnessVerdict,
            CONTEXT_RECALL_VERSION,
            fenced,
            _statements_found,
        )
        if isinstance(asked, Score):
            return asked
        parsed, fields = asked
        tally = check_claims(parsed.claims, fenced.clip.documents)
        text = (
            f"{tally.supported} of {tally.total} expected-answer statements found in the documents, "
            f"{tally.unsupported} missing, {tally.contradicted} contradicted by them"
        )
        if tally.overruled:
            text += f"; {tally.overruled} verdict(s) overruled to missing (evidence not in the documents)"
        value = tally.supported / tally.total
        score = Score.judged(name, value, threshold, explanation=_explain(text, fenced), items=tally.items)
        return _with_judge(score, fields)

    return evaluate


# --------------------------------------------------------------------------- context precision


def make_judge_context_precision(client: JudgeClient, min: float | None = None) -> Evaluator:
    """Judge context precision in one call: one usefulness verdict per document ("useful for
    arriving at the reference answer"), then the RAGAS / DeepEval rank-aware average precision over
    the useful documents (`evaluators.text.rank_aware_precision`, no epsilon; not `map@k`). The
    reference is the expected answer, or the app's answer when none is known (RAGAS's
    context utilization); the explanation says which. Default `min` 0.5.

    No question -> `skipped` `no_question`; neither expected answer nor answer -> `no_reference`;
    no documents -> 0 without a call; a verdict list that does not cover ranks 1..n -> `error`
    `bad_verdict`.
    """
    name = "context_precision"
    threshold = _default_min(name, min)

    judge = _Asker(client, name, threshold)

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        if _blank(trace.question):
            return Score.skip(name, "no_question", "the trace has no question", threshold=threshold)
        expected, answer = trace.expected_answer, trace.answer
        reference, which = (expected, "expected answer") if not _blank(expected) else (answer, "answer")
        if _blank(reference):
            return Score.skip(
                name, "no_reference", "the trace has no expected answer or answer", threshold=threshold
            )
        documents = trace.contexts
        gate = _context_gate(name, documents, threshold, "nothing useful")
        if gate is not None:
            return gate
        fenced = fence_inputs(documents=_documents(trace), question=trace.question, reference=reference)
        asked = judge.per_document(
            context_precision_messages(fenced, len(documents)),
            ContextPrecisionVerdict,
            CONTEXT_PRECISION_VERSION,
            fenced,
            len(documents),
        )
        if isinstance(asked, Score):
            return asked
        ordered, fields = asked
        labels = [v.useful for v in ordered]
        items = [
            ScoreItem(text=_label(doc.id, rank), ok=v.useful, evidence=f"rank {rank}: {v.reason or '-'}")
            for rank, (doc, v) in enumerate(zip(documents, ordered, strict=True), start=1)
        ]
        useful = [str(rank) for rank, ok in enumerate(labels, start=1) if ok]
        text = (
            f"{len(useful)} of {len(labels)} documents useful for the {which} per the judge"
            + (f" (ranks {', '.join(useful)})" if useful else "")
            + "; rank-aware average precision over the useful documents (not map@k)"
        )
        score = Score.judged(
            name, rank_aware_precision(labels), threshold, explanation=_explain(text, fenced), items=items
        )
        return _with_judge(score, fields)

    return evaluate


# --------------------------------------------------------------------------- answer relevance


def _parts_found(verdict: AnswerRelevanceVerdict) -> str | None:
    return None if verdict.parts else "the judge found no part in the question"


def make_judge_answer_relevance(client: JudgeClient, min: float | None = None) -> Evaluator:
    """Judge answer relevance in one call: the judge splits the question into the parts a complete
    answer must address and says for each whether the answer addresses it (truth is not judged),
    and whether the answer is noncommittal. Value = share of parts addressed, 0 (label
    `noncommittal`) for an evasive answer; default `min` 0.5. Items: the parts, unanswered first.

    An answer with nothing checkable (a refusal) is 0 `noncommittal` without a call, as without a
    judge; no question / no answer -> skipped.
    """
    name = "answer_relevance"
    threshold = _default_min(name, min)

    judge = _Asker(client, name, threshold)

    def evaluate(trace: RagTrace) -> Score:
        question, answer = trace.question, trace.answer
        if _blank(question):
            return Score.skip(name, "no_question", "the trace has no question", threshold=threshold)
        if _blank(answer):
            return Score.skip(name, "no_answer", "the trace has no answer", threshold=threshold)
        assert answer is not None
        if not claims(answer):
            return Score.judged(
                name,
                0.0,
                threshold,
                label="noncommittal",
                explanation="the answer is a refusal or states nothing checkable (no judge call)",
            )
        fenced = fence_inputs(question=question, answer=answer)
        asked = judge.ask(
            answer_relevance_messages(fenced),
            AnswerRelevanceVerdict,
            ANSWER_RELEVANCE_VERSION,
            fenced,
            _parts_found,
        )
        if isinstance(asked, Score):
            return asked
        verdict, fields = asked
        items = [
            ScoreItem(
                text=part.part,
                ok=part.addressed,
                evidence=part.reason or ("addressed" if part.addressed else "not addressed"),
            )
            for part in verdict.parts
        ]
        addressed = sum(part.addressed for part in verdict.parts)
        text = f"{addressed} of {len(verdict.parts)} parts of the question addressed per the judge"
        if verdict.noncommittal:
            text += "; the answer is noncommittal (evades or does not know), so 0"
        value = 0.0 if verdict.noncommittal else addressed / len(verdict.parts)
        label = "noncommittal" if verdict.noncommittal else None
        score = Score.judged(name, value, threshold, explanation=text, items=items, label=label)
        return _with_judge(score, fields)

    return evaluate


# --------------------------------------------------------------------------- answer correctness

ANSWER_CORRECTNESS_MODES = ("f1", "precision")


def _correctness_found(verdict: AnswerPrecisionVerdict) -> str | None:
    # Both texts are non-blank and the answer has checkable sentences (checked before the call), so
    # an empty list is an unusable verdict, not a skip (see `_claims_found`).
    if not verdict.answer_claims:
        return "the judge found no claim in an answer that has checkable sentences"
    if isinstance(verdict, AnswerCorrectnessVerdict) and not verdict.reference_statements:
        return "the judge found no statement in the expected answer"
    return None


def make_judge_answer_correctness(
    client: JudgeClient, min: float | None = None, *, mode: str = "f1"
) -> Evaluator:
    """Judge answer correctness in one call, the expected answer as the reference.

    Mode `f1` (default): the judge splits the answer into claims (each supported / unsupported /
    contradicted by the reference) and the reference into statements (each present in the answer or
    not); precision = supported claims / claims, recall = present statements / statements, value =
    their F1 (RAGAS's factuality, without its embedding-similarity blend). Mode `precision`: answer
    claims only, value = precision (a shorter reply; misses no wrong claim, but not an omission).
    Default `min` 0.7. Label `contradiction` when a claim contradicts the reference.

    A refusal or pleasantry-only answer while an expected answer exists is 0 (`noncommittal`)
    without a call; no answer / no expected answer -> skipped (`no_reference` is an error in suites).
    """
    name = "answer_correctness"
    if mode not in ANSWER_CORRECTNESS_MODES:
        modes = ", ".join(ANSWER_CORRECTNESS_MODES)
        raise ValueError(f"mode: must be one of {modes} for {name}, got {mode!r}")
    threshold = _default_min(name, min)
    precision_only = mode == "precision"
    version = ANSWER_PRECISION_VERSION if precision_only else ANSWER_CORRECTNESS_VERSION
    schema: type[AnswerPrecisionVerdict] = (
        AnswerPrecisionVerdict if precision_only else AnswerCorrectnessVerdict
    )

    judge = _Asker(client, name, threshold)

    def evaluate(trace: RagTrace) -> Score:
        answer, expected = trace.answer, trace.expected_answer
        if _blank(answer):
            return Score.skip(name, "no_answer", "the trace has no answer", threshold=threshold)
        if _blank(expected):
            return Score.skip(name, "no_reference", "the trace has no expected answer", threshold=threshold)
        assert answer is not None and expected is not None
        if not claims(answer):
            return Score.judged(
                name,
                0.0,
                threshold,
                label="noncommittal",
                explanation="the answer states nothing checkable while an answer is expected (no judge call)",
            )
        fenced = fence_inputs(question=_present(trace.question), answer=answer, reference=expected)
        asked = judge.ask(
            answer_correctness_messages(fenced, precision_only=precision_only),
            schema,
            version,
            fenced,
            _correctness_found,
        )
        if isinstance(asked, Score):
            return asked
        parsed, fields = asked
        answer_claims = parsed.answer_claims
        items = [
            ScoreItem(
                text=f"answer: {c.claim}",
                ok=c.verdict == "supported",
                evidence=f"{c.verdict} by the expected answer" + (f": {c.reason}" if c.reason else ""),
            )
            for c in answer_claims
        ]
        supported = sum(c.verdict == "supported" for c in answer_claims)
        contradicted = sum(c.verdict == "contradicted" for c in answer_claims)
        precision = supported / len(answer_claims)
        text = (
            f"{supported} of {len(answer_claims)} answer claims supported by the expected answer "
            f"({contradicted} contradicted)"
        )
        value = precision
        if isinstance(parsed, AnswerCorrectnessVerdict):
            statements = parsed.reference_statements
            items += [
                ScoreItem(
                    text=f"expected: {st.statement}",
                    ok=st.present,
                    evidence=st.reason or ("in the answer" if st.present else "missing from the answer"),
                )
                for st in statements
            ]
            present = sum(st.present for st in statements)
            recall = present / len(statements)
            value = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
            text += f"; {present} of {len(statements)} expected statements in the answer; F1 {value:.2f}"
        else:
            text += f"; precision {value:.2f} (mode precision: omissions not judged)"
        label = "contradiction" if contradicted else None
        score = Score.judged(name, value, threshold, explanation=text, items=items, label=label)
        return _with_judge(score, fields)

    return evaluate
