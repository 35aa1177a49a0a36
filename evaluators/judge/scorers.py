"""Judge evaluators: `Callable[[RagTrace], Score]` built on the fail-closed `JudgeClient`.

One judge call per evaluator per trace (DESIGN.md section 6):

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

Rules shared by both:

- The answer is pre-checked with the deterministic `claims()`: a refusal or pleasantry-only answer is
  `skipped` `no_claims` without a call; no answer -> `skipped` `no_answer`.
- No documents -> value 0, `fail`, without a call: an empty context supports nothing and contains
  nothing relevant. Documents that all lack text -> `skipped` `no_document_text` (as without a judge).
- A judge error (transport, malformed, schema-violating, refused, truncated) -> `error` with the
  client's `error_kind` as label; a verdict that passes the schema but not our checks (wrong number
  of document verdicts, ranks that do not match) -> `error` `bad_verdict`. An error never passes.
- Verdicts are checked beyond the schema: a "supported" claim whose `doc_id` is not one of the
  trace's documents, or whose quote does not occur in that document, is counted as unsupported, and
  the item says why (a judge cannot make a claim pass by citing a document that does not say it).
- Every judge score carries `client.score_fields(result, PROMPT_VERSION)`; clipping of long
  documents is reported in the explanation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

from semconv.models import Document, RagTrace

from ..scores import Score, ScoreItem
from ..text import FAITHFULNESS_ALIASES, claims
from .client import JudgeClient, JudgeResult
from .fence import FencedInputs, fence_inputs
from .prompts import (
    CONTEXT_RELEVANCE_VERSION,
    FAITHFULNESS_VERSION,
    ContextRelevanceVerdict,
    FaithfulnessVerdict,
    context_relevance_messages,
    faithfulness_messages,
)

Evaluator = Callable[[RagTrace], Score]
FaithfulnessMode = Literal["claims", "answer"]
FAITHFULNESS_MODES = ("claims", "answer")
_METRIC = re.compile(r"(?P<metric>share|precision|ndcg|mrr)(?:@(?P<k>[0-9]+))?")


# --------------------------------------------------------------------------- shared pieces


def _check_min(name: str, min: float | None) -> None:
    if min is None:
        return
    if isinstance(min, bool) or not isinstance(min, int | float) or not 0.0 <= float(min) <= 1.0:
        raise ValueError(f"{name}: min must be a number between 0 and 1, got {min!r}")


def _label(doc: Document, position: int) -> str:
    return doc.id if doc.id is not None else f"rank {position}"


def _with_judge(score: Score, fields: dict[str, Any]) -> Score:
    return Score.model_validate({**score.model_dump(), **fields})


def _explain(text: str, fenced: FencedInputs) -> str:
    clipped = fenced.clip.summary()
    return f"{text}; {clipped}" if clipped else text


def _error(
    name: str, client: JudgeClient, result: JudgeResult[Any], version: str, threshold: float | None
) -> Score:
    kind = result.error_kind or "bad_response"
    score = Score.fail_error(name, kind, f"judge error ({kind}): {result.error}", threshold=threshold)
    return _with_judge(score, client.score_fields(result, version))


def _squash(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.casefold()))


def _no_text(name: str, threshold: float | None) -> Score:
    return Score.skip(
        name,
        "no_document_text",
        "the retrieved documents have no recorded text, so nothing can be checked against them",
        threshold=threshold,
    )


# --------------------------------------------------------------------------- faithfulness


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

    def evaluate(trace: RagTrace) -> Score:
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
        if not documents:
            return Score.judged(
                name,
                0.0,
                threshold,
                explanation="no documents retrieved: an empty context supports no claim (no judge call)",
            )
        if all(doc.content is None for doc in documents):
            return _no_text(name, threshold)
        fenced = fence_inputs(
            documents=[(doc.id, doc.content or "") for doc in documents],
            question=trace.question if trace.question and trace.question.strip() else None,
            answer=answer,
        )
        result = client.judge(
            faithfulness_messages(fenced),
            FaithfulnessVerdict,
            prompt_version=FAITHFULNESS_VERSION,
            fence_token=fenced.fence.token,
        )
        if result.parsed is None:
            return _error(name, client, result, FAITHFULNESS_VERSION, threshold)
        fields = client.score_fields(result, FAITHFULNESS_VERSION)
        verdicts = result.parsed.claims
        if not verdicts:
            score = Score.skip(
                name,
                "no_claims",
                _explain("the judge found no claim in the answer", fenced),
                threshold=threshold,
            )
            return _with_judge(score, fields)

        # id -> text; a document without an id is cited by its rank ("2" or "rank 2").
        by_ref: dict[str, tuple[str, str]] = {}
        for position, doc in enumerate(documents, start=1):
            entry = (_label(doc, position), doc.content or "")
            by_ref.setdefault(str(position), entry)
            by_ref.setdefault(f"rank {position}", entry)
            if doc.id is not None:
                by_ref[doc.id] = entry

        items: list[ScoreItem] = []
        supported = unsupported = contradicted = overruled = 0
        for verdict in verdicts:
            kind = verdict.verdict
            evidence = verdict.reason or kind
            if kind in ("supported", "contradicted"):
                ref = by_ref.get((verdict.doc_id or "").strip())
                quote = (verdict.quote or "").strip()
                problem = None
                if ref is None:
                    problem = f"the judge cited document {verdict.doc_id!r}, which the trace does not have"
                elif not quote or _squash(quote) not in _squash(ref[1]):
                    problem = f"the judge's quote does not occur in doc {ref[0]}"
                if problem is not None:
                    overruled += 1
                    kind = "unsupported"
                    evidence = f"{verdict.verdict} by the judge, counted unsupported: {problem}"
                else:
                    assert ref is not None
                    evidence = f"doc {ref[0]}: {quote}"
                    if verdict.verdict == "contradicted":
                        evidence = f"contradicted by {evidence}" + (
                            f" ({verdict.reason})" if verdict.reason else ""
                        )
            if kind == "supported":
                supported += 1
            elif kind == "contradicted":
                contradicted += 1
            else:
                unsupported += 1
                if verdict.verdict == "unsupported":
                    evidence = f"unsupported: {verdict.reason or 'not stated in the documents'}"
            items.append(ScoreItem(text=verdict.claim, ok=kind == "supported", evidence=evidence))

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

    def evaluate(trace: RagTrace) -> Score:
        question = trace.question
        if question is None or not question.strip():
            return Score.skip(name, "no_question", "the trace has no question", threshold=threshold)
        documents = trace.contexts
        if not documents:
            return Score.judged(
                name,
                0.0,
                threshold if threshold is not None else 1.0,
                explanation="no documents retrieved: nothing relevant (no judge call)",
            )
        if all(doc.content is None for doc in documents):
            return _no_text(name, threshold)
        fenced = fence_inputs(documents=[(doc.id, doc.content or "") for doc in documents], question=question)
        result = client.judge(
            context_relevance_messages(fenced, len(documents)),
            ContextRelevanceVerdict,
            prompt_version=CONTEXT_RELEVANCE_VERSION,
            fence_token=fenced.fence.token,
        )
        if result.parsed is None:
            return _error(name, client, result, CONTEXT_RELEVANCE_VERSION, threshold)
        fields = client.score_fields(result, CONTEXT_RELEVANCE_VERSION)
        verdicts = result.parsed.documents
        ranks = sorted(v.rank for v in verdicts)
        if ranks != list(range(1, len(documents) + 1)):
            score = Score.fail_error(
                name,
                "bad_verdict",
                f"the judge returned {len(verdicts)} verdict(s) with ranks {ranks} for "
                f"{len(documents)} document(s) (ranks 1..{len(documents)} expected)",
                threshold=threshold,
            )
            return _with_judge(score, fields)
        by_rank = {v.rank: v for v in verdicts}
        ordered = [by_rank[rank] for rank in range(1, len(documents) + 1)]
        labels = [v.relevant for v in ordered]
        items = [
            ScoreItem(text=_label(doc, rank), ok=v.relevant, evidence=v.reason or None)
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
