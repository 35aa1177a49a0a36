"""retrieval.<metric>[@k]: hit, recall, precision, mrr, ndcg and map of the retrieved documents
against the expected ids (the pure functions and their conventions: `evaluators.retrieval`).

`make_retrieval_evaluator(name, min)` checks a config entry such as
`{name: retrieval.recall@5, min: 0.8}` at start-up (ValueError for unknown names, bad k, a bad or
missing `min`) and returns a callable `RagTrace -> Score`; `evaluate_retrieval` does both at once.
The evaluators of a set share one reading of a trace (its deduplicated ranking, and per k the
window, the items and the pieces of the explanations), kept for the last trace scored and keyed
by everything it depends on (the expected ids, each retrieval step's name and documents' ids and
ranks), so a trace changed in place is read again. Each metric's value comes from the same kernel
as the pure function, so both give the same float. Exact rules: no judge variant.

No expected ids: `skipped` (label `no_expected_ids`) online; an `error` where the caller says the
reference is promised (`require_reference=True`; `ragpulse eval` suites get the same effect for
every evaluator from `evaluators.suite`).

Which documents are "retrieved" for a trace: the documents of the trace's `retrieval` steps,
concatenated in step order (each step's documents in its reported rank order), then deduplicated:
several retrieval steps are read in order, so these metrics measure what the retrievers returned;
`rerank` steps are not read (a reranker's output is what `RagTrace.contexts` gives the context_*
evaluators). A rank in evidence and explanations is the position in that combined, deduplicated
ranking; with more than one retrieval step the evidence also names the step and the document's own
rank there.

Thresholds: `pass` when value >= `min`. The default is 1 for hit, and for recall, MRR, nDCG and MAP
as well (every expected document found, ranked first / ideally); precision has none and requires
`min`. 1 is reachable for hit, recall, MRR, nDCG and MAP whenever the expected ids fit in
k, whereas precision@k can reach at most |expected| / k, which is why precision has no default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from semconv.models import RagTrace

from ..metric import Evaluator, Metric, Options, pass_line
from ..retrieval import KERNELS, METRICS, dcg_in, ndcg_of
from ..retrieval import Metric as Measure
from ..scores import Score, ScoreItem, score_items

NAME = "retrieval"
DEFAULT_MIN: dict[Measure, float | None] = {
    "hit": 1.0,
    "recall": 1.0,
    "precision": None,  # required: see the module docstring
    "mrr": 1.0,
    "ndcg": 1.0,
    "map": 1.0,
}
_NAME = re.compile(r"retrieval\.(?P<metric>[a-z]+)(?:@(?P<k>[0-9]+))?")


# --------------------------------------------------------------------------- names


def parse_name(name: str) -> tuple[Measure, int | None]:
    """`retrieval.recall@5` -> ("recall", 5); `retrieval.ndcg` -> ("ndcg", None). ValueError otherwise."""
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValueError(
            f"unknown retrieval score name {name!r}: expected retrieval.<metric> or retrieval.<metric>@<k> "
            f"with metric one of {', '.join(METRICS)} and k a positive integer"
        )
    metric = match.group("metric")
    if metric not in METRICS:
        raise ValueError(f"unknown retrieval metric {metric!r} in {name!r}; known: {', '.join(METRICS)}")
    k_text = match.group("k")
    k = int(k_text) if k_text is not None else None
    if k is not None and k < 1:
        raise ValueError(f"k must be at least 1 in {name!r}")
    return metric, k  # narrowed to Measure by the `in METRICS` check


@dataclass(frozen=True, slots=True)
class _Retrieved:
    """A trace's combined ranking, with where each document came from (for evidence)."""

    ranked: list[str]
    origin: list[str]  # per ranked position: "" or " (step 2 'faq-search', rank 1)"
    duplicates: int
    steps: int
    position: dict[str, int]  # id -> index in `ranked`


def _read_trace(trace: RagTrace) -> _Retrieved | str:
    """The trace's retrieval steps' documents in step order, deduplicated; or an error explanation."""
    steps = trace.steps_of("retrieval")
    several = len(steps) > 1
    position: dict[str, int] = {}
    ranked: list[str] = []
    origin: list[str] = []
    duplicates = 0
    for step_number, step in enumerate(steps, start=1):
        for doc in step.documents:
            if doc.id is None:
                where = f"step {step_number} ({step.name!r})" if several else f"step {step.name!r}"
                return (
                    f"the document at rank {doc.rank} of retrieval {where} has no id; retrieval metrics "
                    "match document ids against the expected ids, so every retrieved document needs one"
                )
            if doc.id in position:
                duplicates += 1
                continue
            position[doc.id] = len(ranked)
            ranked.append(doc.id)
            origin.append(f" (step {step_number} {step.name!r}, rank {doc.rank})" if several else "")
    return _Retrieved(ranked, origin, duplicates, len(steps), position)


def _ranks(ids: list[str]) -> str:
    return ", ".join(ids)


@dataclass(frozen=True, slots=True)
class _Window:
    """What every metric at one cutoff k shares for one trace."""

    window: list[str]  # the top k of the ranking
    found: list[tuple[int, str]]  # (rank, id) of the expected ids in the window
    items: list[ScoreItem]  # failing first; frozen, so every score at this cutoff shares them
    extra: list[str]  # ids in the window that were not expected
    scope: str
    at_ranks: str
    tail: str  # "; missing: ..." or ""


@dataclass(slots=True)
class _Reading:
    """One trace read against its expected ids: shared by every retrieval evaluator scoring it."""

    expected: list[str]  # distinct, in given order
    retrieved: _Retrieved | str | None  # None: not read (no expected ids); str: the error explanation
    windows: dict[int | None, _Window] = field(default_factory=dict)
    gains: dict[str, float] = field(default_factory=dict)  # binary gains, for nDCG
    dcg: dict[int | None, tuple[float, float]] = field(default_factory=dict)

    def window(self, read: _Retrieved, k: int | None) -> _Window:
        cached = self.windows.get(k)
        if cached is None:
            cached = self.windows[k] = _make_window(read, self.expected, k)
        return cached

    def dcg_parts(self, read: _Retrieved, k: int | None) -> tuple[float, float]:
        parts = self.dcg.get(k)
        if parts is None:
            if not self.gains:
                self.gains = dict.fromkeys(self.expected, 1.0)
            window = read.ranked if k is None else read.ranked[:k]
            parts = self.dcg[k] = dcg_in(window, self.gains, k)
        return parts


def _make_window(read: _Retrieved, expected: list[str], k: int | None) -> _Window:
    ranked, origin, position = read.ranked, read.origin, read.position
    n = len(ranked)
    cutoff = n if k is None else min(k, n)
    window = ranked if k is None else ranked[:k]
    relevant = set(expected)
    # Items: one per expected id, then one per retrieved document in the window that was not
    # expected; failing ones first (the order `Score` keeps them in), each group in that order.
    failing: list[tuple[str, bool, str]] = []
    passing: list[tuple[str, bool, str]] = []
    for doc_id in expected:
        i = position.get(doc_id)
        if i is None:
            failing.append((doc_id, False, "not retrieved"))
        elif i < cutoff:
            passing.append((doc_id, True, f"rank {i + 1}{origin[i]}"))
        else:
            failing.append((doc_id, False, f"rank {i + 1}{origin[i]}, outside the top {k}"))
    extra = []
    for i, doc_id in enumerate(window):
        if doc_id not in relevant:
            extra.append(doc_id)
            failing.append((doc_id, False, f"rank {i + 1}{origin[i]}, not an expected document"))
    found = [(i + 1, doc_id) for i, doc_id in enumerate(window) if doc_id in relevant]
    found_ids = {doc_id for _, doc_id in found}
    missing = [doc_id for doc_id in expected if doc_id not in found_ids]
    scope = f"the top {k}" if k is not None else f"the {n} retrieved documents"
    if k is not None and n < k:
        scope += f" (only {n} retrieved)"
    return _Window(
        window=window,
        found=found,
        items=score_items([*failing, *passing]),
        extra=extra,
        scope=scope,
        at_ranks=", ".join(str(rank) for rank, _ in found),
        tail=f"; missing: {_ranks(missing)}" if missing else "",
    )


# The reading of the last trace scored, keyed by everything it depends on: the expected ids and, per
# retrieval step, its name and its documents' ids and ranks. The evaluators of a set score one trace
# in turn, so they share one reading; a trace changed in place has another key and is read again.
# Keys compare by value, so two equal traces share a reading too.
_TraceKey = tuple[object, ...]


class _ReadingMemo:
    """The last (key, reading); swapped whole, so concurrent callers at worst read a trace twice."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: tuple[_TraceKey, _Reading] | None = None

    def cache_clear(self) -> None:
        self.last = None


_reading_memo = _ReadingMemo()


def _trace_key(trace: RagTrace) -> _TraceKey:
    expected = trace.expected_documents
    key: list[object] = [None if expected is None else tuple(expected)]
    for step in trace.steps:
        if step.kind == "retrieval":
            key.append(step.name)
            key.append([(doc.id, doc.rank) for doc in step.documents])
    return tuple(key)


def _reading(trace: RagTrace) -> _Reading:
    if not trace.expected_documents:
        # Nothing to compare with (most traces online): the reading depends on nothing else.
        return _Reading([], None)
    key = _trace_key(trace)
    last = _reading_memo.last
    if last is not None and last[0] == key:
        return last[1]
    expected = list(dict.fromkeys(trace.expected_documents or ()))  # distinct, in given order
    reading = _Reading(expected, _read_trace(trace) if expected else None)
    _reading_memo.last = (key, reading)
    return reading


@dataclass(frozen=True)
class RetrievalEvaluator:
    """One configured retrieval score (e.g. `retrieval.recall@5`, min 0.8); call it on a trace."""

    name: str
    metric: Measure
    k: int | None
    threshold: float
    require_reference: bool = False

    def __call__(self, trace: RagTrace) -> Score:
        reading = _reading(trace)
        read = reading.retrieved
        if read is None:
            explanation = "the trace has no expected document ids to compare the retrieved documents with"
            if self.require_reference:
                return Score.fail_error(self.name, "no_expected_ids", explanation, threshold=self.threshold)
            return Score.skip(self.name, "no_expected_ids", explanation, threshold=self.threshold)
        if isinstance(read, str):
            return Score.fail_error(self.name, "missing_document_id", read, threshold=self.threshold)
        k = self.k
        window = reading.window(read, k)
        if self.metric == "ndcg":
            value = ndcg_of(reading.dcg_parts(read, k))
        else:
            value = KERNELS[self.metric](window.window, reading.expected, k)
        explanation = self._explain(reading, read, window)
        return Score.judged(self.name, value, self.threshold, explanation=explanation, items=window.items)

    def _explain(self, reading: _Reading, read: _Retrieved, w: _Window) -> str:
        k = self.k
        n = len(read.ranked)
        expected = reading.expected
        if n == 0:
            why = "no retrieval step" if read.steps == 0 else "the retrieval returned nothing"
            return f"no documents retrieved ({why}); expected: {_ranks(expected)}"
        found, scope = w.found, w.scope
        metric = self.metric
        if metric == "hit":
            text = (
                f"expected document {found[0][1]} at rank {found[0][0]} in {scope}"
                if found
                else f"none of the {len(expected)} expected documents in {scope}"
            )
        elif metric == "recall":
            text = f"{len(found)} of {len(expected)} expected documents in {scope}{w.tail}"
        elif metric == "precision":
            denominator = k if k is not None else n
            text = f"{len(found)} of {denominator} ranks in {scope} hold an expected document"
            if k is not None and n < k:
                text += f" (precision@{k} divides by {k})"
            if w.extra:
                text += f"; not expected: {_ranks(w.extra)}"
        elif metric == "mrr":
            text = (
                f"first expected document ({found[0][1]}) at rank {found[0][0]}"
                if found
                else f"no expected document in {scope}"
            )
        elif metric == "ndcg":
            dcg, idcg = reading.dcg_parts(read, k)
            ranks = f"expected at ranks {w.at_ranks}" if found else f"no expected document in {scope}"
            text = f"DCG {dcg:.3f} of ideal {idcg:.3f}; {ranks}{w.tail}"
        else:  # map
            ranks = f"expected at ranks {w.at_ranks}" if found else f"no expected document in {scope}"
            text = f"average precision over {len(expected)} expected documents; {ranks}{w.tail}"
        if read.duplicates:
            text += f"; {read.duplicates} duplicate id(s) ignored (first occurrence kept)"
        return text


def make_retrieval_evaluator(
    name: str, min: float | None = None, *, require_reference: bool = False
) -> RetrievalEvaluator:
    """Check a retrieval evaluator entry at config time and build it.

    Raises ValueError for an unknown name, a bad k, a `min` outside 0..1, or precision without `min`.
    `require_reference=True` turns "no expected ids" into an error (eval suites promise a reference).
    """
    metric, k = parse_name(name)
    default = DEFAULT_MIN[metric]
    if min is None and default is None:
        raise ValueError(
            f"{name} needs a `min` threshold: precision@k is at most (number of expected ids) / k, "
            f"so there is no sensible default (e.g. {{name: {name}, min: 0.4}})"
        )
    threshold = pass_line(name, min, default)
    assert threshold is not None
    return RetrievalEvaluator(
        name=name, metric=metric, k=k, threshold=threshold, require_reference=require_reference
    )


def evaluate_retrieval(
    name: str, trace: RagTrace, min: float | None = None, *, require_reference: bool = False
) -> Score:
    """Score `trace` with the retrieval metric `name` (e.g. `retrieval.recall@5`) against `min`."""
    return make_retrieval_evaluator(name, min, require_reference=require_reference)(trace)


@dataclass(frozen=True)
class RetrievalOptions(Options):
    """None: every key is refused, the alphabetically first one named."""

    @classmethod
    def parse(cls, name: str, options: Mapping[str, Any]) -> Self:
        return super().parse(name, dict(sorted(options.items())))


def _build(name: str, min: float | None, options: RetrievalOptions) -> Evaluator:
    return make_retrieval_evaluator(name, min)


METRIC = Metric(
    name=NAME,
    doc="Whether the expected documents were retrieved, and how high (hit, recall, precision, MRR, ...).",
    evaluates="retrieval",
    order=0,
    build=_build,
    options=RetrievalOptions,
    family=METRICS,
    # Precision@k is left out of the default set: it requires an explicit `min` (its reachable
    # maximum depends on k and the case).
    defaults=tuple(f"{NAME}.{measure}@5" for measure in METRICS if measure != "precision"),
)
