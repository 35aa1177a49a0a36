"""Retrieval metrics as pure functions: hit, recall, precision, MRR, nDCG and MAP, at k or over the
whole list. The retrieval scores (`retrieval.recall@5`, ...) are built on the same kernels in
`evaluators.metrics.retrieval`, so a score and its function give the same float.

The functions take a ranked list of retrieved ids (`list[str | None]`, rank 1 first) and the
expected ids: `hit`, `recall`, `precision`, `mrr`, `ndcg`, `average_precision` (score name `map`).
`k=None` means the whole list. They return None when there are no expected ids (the reference is
absent: a null, never a 0 that would drag means down) and raise `MissingDocumentIdError` when a
retrieved document has no id.

Conventions (docs/scores.md, "Retrieval conventions", with worked examples):

- Rank order as reported, never re-sorted by score (we accept ranked lists, so ties never arise).
- Duplicates: each id counted once, the first occurrence kept, before any cut at k, so
  `[a, a, b]` ranks b second and `precision@2` is 2/2 when both are expected.
- precision@k divides by k, also when fewer than k documents were retrieved (as trec_eval, ranx and
  Phoenix do). Whole-list precision divides by the number of (distinct) retrieved documents, as ranx
  does for k=0; an empty ranking gives 0.
- recall and AP divide by the number of distinct expected ids, retrievable within k or not.
- MRR is cut at k: 1/rank of the first expected id within the top k, else 0 (ranx cuts too;
  trec_eval's recip_rank does not).
- nDCG: DCG = sum of gain / log2(rank + 1); binary gains, or linear graded gains when `expected` is a
  mapping id -> grade (linear, as trec_eval `ndcg_cut` and ranx `ndcg`); the ideal DCG sorts all
  expected ids by gain and cuts at k, so expected documents that were never retrieved lower the
  score (unlike Phoenix, which normalises by the retrieved labels only).
- An empty ranking (a retrieval that returned nothing, or no retrieval step at all) scores 0 on every
  metric (as trec_eval's "all 0"): the expected documents were not found.
- A retrieved document without an id is an error for retrieval metrics: anywhere in the list, also
  past k, because an id-less document cannot be deduplicated or matched and the ranking is then not
  the one the app produced.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Literal

Metric = Literal["hit", "recall", "precision", "mrr", "ndcg", "map"]
METRICS: tuple[Metric, ...] = ("hit", "recall", "precision", "mrr", "ndcg", "map")


class MissingDocumentIdError(ValueError):
    """A retrieved document has no id, so it cannot be matched against the expected ids."""

    def __init__(self, position: int) -> None:
        super().__init__(f"the retrieved document at position {position} has no id")
        self.position = position  # 1-based, in the list as given (before deduplication)


# --------------------------------------------------------------------------- pure functions


def _check_k(k: int | None) -> None:
    # bool is an int; `k=True` is a bug at the call site, not k=1.
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"k must be a positive integer or None (whole list), got {k!r}")


def dedupe(retrieved: Sequence[str | None]) -> list[str]:
    """The ranking with each id kept at its first occurrence; raises `MissingDocumentIdError`."""
    seen: set[str] = set()
    ranked: list[str] = []
    for position, doc_id in enumerate(retrieved, start=1):
        if doc_id is None:
            raise MissingDocumentIdError(position)
        if doc_id not in seen:
            seen.add(doc_id)
            ranked.append(doc_id)
    return ranked


def _prepare(
    retrieved: Sequence[str | None], expected: Collection[str], k: int | None
) -> tuple[list[str], frozenset[str]] | None:
    """(top k of the deduplicated ranking, distinct expected ids), or None without expected ids."""
    _check_k(k)
    ranked = dedupe(retrieved)  # checks ids even when there is no reference, so bad input is loud
    relevant = frozenset(expected)
    if not relevant:
        return None
    return (ranked if k is None else ranked[:k]), relevant


# Each metric is a kernel over the deduplicated top k and the distinct expected ids, shared by the
# public function below and the evaluator layer (so both give the same float, bit for bit).


def _hit_in(window: Sequence[str], relevant: Collection[str], k: int | None) -> float:
    return 1.0 if any(doc_id in relevant for doc_id in window) else 0.0


def _recall_in(window: Sequence[str], relevant: Collection[str], k: int | None) -> float:
    return sum(1 for doc_id in window if doc_id in relevant) / len(relevant)


def _precision_in(window: Sequence[str], relevant: Collection[str], k: int | None) -> float:
    hits = sum(1 for doc_id in window if doc_id in relevant)
    denominator = k if k is not None else len(window)
    return hits / denominator if denominator else 0.0


def _mrr_in(window: Sequence[str], relevant: Collection[str], k: int | None) -> float:
    for rank, doc_id in enumerate(window, start=1):
        if doc_id in relevant:
            return 1.0 / rank
    return 0.0


def _average_precision_in(window: Sequence[str], relevant: Collection[str], k: int | None) -> float:
    hits = 0
    total = 0.0
    for rank, doc_id in enumerate(window, start=1):
        if doc_id in relevant:
            hits += 1
            total += hits / rank
    return total / len(relevant)


def hit(retrieved: Sequence[str | None], expected: Collection[str], k: int | None = None) -> float | None:
    """1.0 when at least one expected id is in the top k, else 0.0."""
    prepared = _prepare(retrieved, expected, k)
    return None if prepared is None else _hit_in(*prepared, k)


def recall(retrieved: Sequence[str | None], expected: Collection[str], k: int | None = None) -> float | None:
    """|expected ∩ top k| / |expected|."""
    prepared = _prepare(retrieved, expected, k)
    return None if prepared is None else _recall_in(*prepared, k)


def precision(
    retrieved: Sequence[str | None], expected: Collection[str], k: int | None = None
) -> float | None:
    """|expected ∩ top k| / k (k even when fewer were retrieved); whole list: / number retrieved."""
    prepared = _prepare(retrieved, expected, k)
    return None if prepared is None else _precision_in(*prepared, k)


def mrr(retrieved: Sequence[str | None], expected: Collection[str], k: int | None = None) -> float | None:
    """1 / rank of the first expected id within the top k, else 0.0 (reciprocal rank of one query)."""
    prepared = _prepare(retrieved, expected, k)
    return None if prepared is None else _mrr_in(*prepared, k)


def average_precision(
    retrieved: Sequence[str | None], expected: Collection[str], k: int | None = None
) -> float | None:
    """AP@k = sum over expected ids at rank i <= k of precision@i, divided by |expected| (score `map`)."""
    prepared = _prepare(retrieved, expected, k)
    return None if prepared is None else _average_precision_in(*prepared, k)


def _gains(expected: Collection[str] | Mapping[str, float]) -> dict[str, float]:
    """Gain per judged id: the grade for a mapping (grade <= 0: judged not relevant), else 1."""
    if isinstance(expected, Mapping):
        gains: dict[str, float] = {}
        for doc_id, grade in expected.items():
            grade = float(grade)
            if not math.isfinite(grade) or grade < 0:
                raise ValueError(f"relevance grade of {doc_id!r} must be a finite number >= 0, got {grade!r}")
            if grade > 0:
                gains[doc_id] = grade
        return gains
    return dict.fromkeys(expected, 1.0)


def _discount(rank: int) -> float:
    return math.log2(rank + 1)


def dcg_in(window: Sequence[str], gains: dict[str, float], k: int | None) -> tuple[float, float]:
    """(DCG of the top k, ideal DCG@k) for non-empty `gains`."""
    dcg = sum(gains.get(doc_id, 0.0) / _discount(rank) for rank, doc_id in enumerate(window, start=1))
    ideal = sorted(gains.values(), reverse=True)
    if k is not None:
        ideal = ideal[:k]
    idcg = sum(gain / _discount(rank) for rank, gain in enumerate(ideal, start=1))
    return dcg, idcg


def ndcg_of(parts: tuple[float, float]) -> float:
    dcg, idcg = parts
    # idcg > 0 whenever there is a positive gain; min() absorbs float noise at the ideal ranking.
    return min(1.0, dcg / idcg)


def dcg_parts(
    retrieved: Sequence[str | None], expected: Collection[str] | Mapping[str, float], k: int | None = None
) -> tuple[float, float] | None:
    """(DCG@k, ideal DCG@k), or None without a relevant expected id. See `ndcg`."""
    _check_k(k)
    ranked = dedupe(retrieved)
    gains = _gains(expected)
    if not gains:
        return None
    return dcg_in(ranked if k is None else ranked[:k], gains, k)


def ndcg(
    retrieved: Sequence[str | None], expected: Collection[str] | Mapping[str, float], k: int | None = None
) -> float | None:
    """DCG@k / IDCG@k, log2 discount, ideal ranking of all expected ids (cut at k).

    `expected` as a collection of ids gives binary gains; as a mapping id -> grade it gives linear
    graded gains (grade 0 = judged not relevant; negative grades are refused).
    """
    parts = dcg_parts(retrieved, expected, k)
    return None if parts is None else ndcg_of(parts)


MetricFunction = Callable[[Sequence[str | None], Collection[str], int | None], float | None]
METRIC_FUNCTIONS: dict[Metric, MetricFunction] = {
    "hit": hit,
    "recall": recall,
    "precision": precision,
    "mrr": mrr,
    "ndcg": ndcg,
    "map": average_precision,
}

# The kernels over the deduplicated top k and the distinct expected ids, by metric (nDCG: `dcg_in`).
KERNELS: dict[Metric, Callable[[Sequence[str], Collection[str], int | None], float]] = {
    "hit": _hit_in,
    "recall": _recall_in,
    "precision": _precision_in,
    "mrr": _mrr_in,
    "map": _average_precision_in,
}
