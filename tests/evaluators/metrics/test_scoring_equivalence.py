"""The deterministic evaluators' output is pinned: fast paths must not change a byte of any score.

The guards:

- A golden file (tests/data/scoring_golden.json), written by the code as it was before the
  evaluators were optimised: ~220 traces (the scoring benchmark's generator, with and without text,
  plus seeded edge cases: duplicate ids, id-less documents, rerank steps, empty or missing retrieval,
  missing references, blank answers) and, per trace and evaluator configuration, a digest of the
  score's `model_dump()`, `model_dump_json()` and the fields set on the score and its items. The
  traces themselves are stored, so the file does not depend on the example knowledge base.
  Regenerate (only when a score is *meant* to change) with
  `.venv/bin/python -m tests.evaluators.metrics.test_scoring_equivalence --write`.
- A hypothesis property: every retrieval evaluator agrees, record for record, with a straightforward
  reference implementation (the evaluator as first written, kept below), also when several
  evaluators score one trace in turn and the trace is changed in place between calls (the per-trace
  reading is shared between evaluators, so a stale reading would show here).
- For every configuration (text ones included, whose context is shared too): a trace changed in
  place, at random and in each part a shared reading depends on, scores as it does from scratch.
- The records `Score.judged` / `skip` / `fail_error` and `score_item(s)` build directly equal the
  validated ones (values, fields set, repr, JSON), and other argument types are still validated.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
from collections.abc import Callable, Collection, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from evaluators import lexical
from evaluators import scores as scores_module
from evaluators.metrics import all_metrics
from evaluators.metrics import retrieval as retrieval_module
from evaluators.metrics.answer_correctness import make_answer_correctness
from evaluators.metrics.answer_relevance import make_answer_relevance
from evaluators.metrics.citation import make_citation
from evaluators.metrics.context_entity_recall import make_context_entity_recall
from evaluators.metrics.context_precision import make_context_precision
from evaluators.metrics.context_recall import make_context_recall
from evaluators.metrics.context_relevance import make_context_relevance
from evaluators.metrics.faithfulness import make_faithfulness
from evaluators.metrics.retrieval import make_retrieval_evaluator
from evaluators.retrieval import METRICS
from evaluators.scores import THRESHOLD_TOLERANCE, Score, ScoreItem, score_item, score_items
from semconv.models import Document, RagTrace, Step
from tests.support.helpers import REPO

GOLDEN = REPO / "tests" / "data" / "scoring_golden.json"

# --------------------------------------------------------------------------- evaluator configurations


def _retrieval_configs() -> dict[str, Callable[[RagTrace], Score]]:
    configs: dict[str, Callable[[RagTrace], Score]] = {}
    for metric in METRICS:
        for suffix in ("@1", "@3", "@5", "@10", ""):
            name = f"retrieval.{metric}{suffix}"
            minimum = 0.2 if metric == "precision" else None
            configs[name] = make_retrieval_evaluator(name, minimum)
        name = f"retrieval.{metric}@5"
        configs[f"{name} min=0.5 require_reference"] = make_retrieval_evaluator(
            name, 0.5, require_reference=True
        )
    return configs


def _text_configs() -> dict[str, Callable[[RagTrace], Score]]:
    configs: dict[str, Callable[[RagTrace], Score]] = {
        metric.name: metric.deterministic(metric.name, None, {})
        for metric in all_metrics()
        if not metric.family
    }
    configs["groundedness coverage=0.5"] = make_faithfulness(0.5, coverage=0.5, name="groundedness")
    configs["context_recall min=0.5"] = make_context_recall(0.5)
    configs["context_entity_recall entities"] = make_context_entity_recall(
        entities=["30 days", "Acme", "$25"]
    )
    configs["citation ranks"] = make_citation(ranks=True)
    configs["context_precision useful=0.5"] = make_context_precision(0.3, useful=0.5)
    configs["context_relevance min=0.5"] = make_context_relevance(0.5)
    configs["answer_correctness min=0.4"] = make_answer_correctness(0.4, coverage=0.5)
    configs["answer_relevance min=0.9"] = make_answer_relevance(0.9)
    return configs


def all_configs() -> dict[str, Callable[[RagTrace], Score]]:
    return {**_retrieval_configs(), **_text_configs()}


def fingerprint(score: Score) -> str:
    """A short digest of everything observable about a score record."""
    payload = {
        "dump": score.model_dump(),
        "json": score.model_dump_json(),
        "fields_set": sorted(score.model_fields_set),
        "item_fields_set": [sorted(item.model_fields_set) for item in score.items],
        "types": [type(score).__name__, *(type(item).__name__ for item in score.items)],
    }
    text = json.dumps(payload, sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# --------------------------------------------------------------------------- golden traces (storage)


_TEXT_FIELDS = ("question", "answer", "expected_answer")


def _encode(traces: list[RagTrace]) -> dict[str, Any]:
    """Traces as compact JSON: texts stored once in a table (they repeat across traces), documents
    as `[rank, id, text index or null, score]`."""
    table: dict[str, int] = {}

    def ref(text: str | None) -> int | None:
        return None if text is None else table.setdefault(text, len(table))

    encoded = []
    for trace in traces:
        data = trace.model_dump(exclude_defaults=True)
        for field in _TEXT_FIELDS:
            if field in data:
                data[field] = ref(data[field])
        for step in data.get("steps", []):
            step["documents"] = [
                [d["rank"], d.get("id"), ref(d.get("content")), d.get("score")]
                for d in step.get("documents", [])
            ]
        encoded.append(data)
    return {"texts": list(table), "traces": encoded}


def _decode(data: dict[str, Any]) -> list[RagTrace]:
    texts = data["texts"]
    traces = []
    for raw in data["traces"]:
        raw = json.loads(json.dumps(raw))
        for field in _TEXT_FIELDS:
            if raw.get(field) is not None:
                raw[field] = texts[raw[field]]
        for step in raw.get("steps", []):
            step["documents"] = [
                {"rank": rank, "id": doc_id, "content": None if text is None else texts[text], "score": score}
                for rank, doc_id, text, score in step["documents"]
            ]
        traces.append(RagTrace.model_validate(raw))
    return traces


def _edge_traces(source: list[RagTrace], seed: int) -> list[RagTrace]:
    """Seeded oddities built from the benchmark traces' documents and texts."""
    rng = random.Random(seed)
    docs = [d for t in source for s in t.steps for d in s.documents]
    ids = sorted({d.id for d in docs if d.id})[:8]
    texts = [d.content for d in docs if d.content]
    answers = [t.answer for t in source if t.answer]
    questions = [t.question for t in source if t.question]
    references = [t.expected_answer for t in source if t.expected_answer]
    traces = []
    for i in range(60):
        steps = []
        for position in range(rng.choice((0, 1, 1, 2, 3))):
            kind = rng.choice(("retrieval", "retrieval", "retrieval", "rerank", "llm"))
            documents = []
            for rank in range(1, rng.randint(0, 9) + 1):
                doc_id = None if rng.random() < 0.04 else rng.choice(ids)  # small pool: duplicates
                content = None if rng.random() < 0.15 else rng.choice(texts)
                documents.append(Document(rank=rank, id=doc_id, content=content))
            steps.append(
                Step(
                    span_id=f"e{i}-{position}",
                    kind=kind,
                    name=rng.choice(("search", "faq-search", "bm25")),
                    position=position,
                    documents=documents,
                )
            )
        expected: list[str] | None = rng.choice(
            (None, [], rng.sample(ids, rng.randint(1, 4)), [rng.choice(ids)] * 2 + [rng.choice(ids)])
        )
        answer = rng.choice((None, "", "  ", "I'm sorry, I could not find that.", *answers[:40]))
        if answer and rng.random() < 0.4:
            cited = rng.choice((*ids, "1", "2", "99", "nope", "a, b"))
            answer = f"{answer} [{cited}]"
        traces.append(
            RagTrace(
                trace_id=f"edge-{i}",
                steps=steps,
                expected_documents=expected,
                question=rng.choice((None, "", "How?", *questions)),
                answer=answer,
                expected_answer=rng.choice((None, "", "No.", *references)),
            )
        )
    return traces


def build_golden_traces() -> list[RagTrace]:
    sys.path.insert(0, str(REPO / "bench"))
    import scoring  # bench/scoring.py: the benchmark's own trace generator

    with_text = scoring.build_traces(120, seed=11, text=True)
    without_text = scoring.build_traces(40, seed=12, text=False)
    return [*with_text, *without_text, *_edge_traces(with_text, seed=13)]


def write_golden() -> None:
    traces = build_golden_traces()
    configs = all_configs()
    scores = {
        label: " ".join(fingerprint(evaluate(t)) for t in traces) for label, evaluate in configs.items()
    }
    GOLDEN.parent.mkdir(exist_ok=True)
    data = {**_encode(traces), "scores": scores}
    GOLDEN.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"wrote {GOLDEN} ({len(traces)} traces, {len(configs)} evaluator configurations)")


# --------------------------------------------------------------------------- the golden test


@pytest.fixture(scope="module")
def golden() -> tuple[list[RagTrace], dict[str, list[str]]]:
    data = json.loads(GOLDEN.read_text())
    return _decode(data), {label: digests.split() for label, digests in data["scores"].items()}


def test_golden_covers_every_configuration(golden: tuple[list[RagTrace], dict[str, list[str]]]) -> None:
    traces, scores = golden
    assert sorted(scores) == sorted(all_configs())
    assert all(len(digests) == len(traces) for digests in scores.values())


def test_scores_match_the_golden_file(golden: tuple[list[RagTrace], dict[str, list[str]]]) -> None:
    traces, scores = golden
    configs = all_configs()
    mismatches = []
    for index, trace in enumerate(traces):  # trace-major, as the service and the benchmark call them
        for label, evaluate in configs.items():
            score = evaluate(trace)
            if fingerprint(score) != scores[label][index]:
                mismatches.append(f"{trace.trace_id} {label}: {score.model_dump()}")
    assert not mismatches, f"{len(mismatches)} score(s) changed; first: {mismatches[:3]}"


def test_scores_match_the_golden_file_evaluator_major(
    golden: tuple[list[RagTrace], dict[str, list[str]]],
) -> None:
    """The same in the other order (one evaluator over every trace): no per-trace state leaks."""
    traces, scores = golden
    for label, evaluate in configs_subset(all_configs()).items():
        got = [fingerprint(evaluate(t)) for t in traces]
        assert got == scores[label], label


def configs_subset(configs: dict[str, Callable[[RagTrace], Score]]) -> dict[str, Callable[[RagTrace], Score]]:
    return {label: e for label, e in configs.items() if "@5" in label or not label.startswith("retrieval.")}


# --------------------------------------------------------------------------- reference implementation
# The retrieval evaluator as first written (evaluators/retrieval.py before the shared per-trace
# reading and the fast score construction), building scores through pydantic validation.


def _ref_judged(
    name: str, value: float | None, threshold: float, explanation: str, items: list[ScoreItem]
) -> Score:
    if value is None or not math.isfinite(value):
        return Score(
            name=name,
            status="error",
            label="no_value",
            explanation=explanation,
            threshold=threshold,
            items=items,
        )
    value = min(1.0, max(0.0, value))
    status = "pass" if value >= threshold - THRESHOLD_TOLERANCE else "fail"
    return Score(
        name=name,
        value=value,
        status=status,
        threshold=threshold,
        label=None,
        explanation=explanation,
        items=items or [],
    )


def _ref_dedupe(retrieved: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(retrieved))


def _ref_value(metric: str, ranked: list[str], expected: Collection[str], k: int | None) -> float:
    window = ranked if k is None else ranked[:k]
    relevant = frozenset(expected)
    if metric == "hit":
        return 1.0 if any(d in relevant for d in window) else 0.0
    if metric == "recall":
        return sum(1 for d in window if d in relevant) / len(relevant)
    if metric == "precision":
        hits = sum(1 for d in window if d in relevant)
        denominator = k if k is not None else len(window)
        return hits / denominator if denominator else 0.0
    if metric == "mrr":
        for rank, d in enumerate(window, start=1):
            if d in relevant:
                return 1.0 / rank
        return 0.0
    if metric == "map":
        hits = 0
        total = 0.0
        for rank, d in enumerate(window, start=1):
            if d in relevant:
                hits += 1
                total += hits / rank
        return total / len(relevant)
    dcg, idcg = _ref_dcg(ranked, expected, k)
    return min(1.0, dcg / idcg)


def _ref_dcg(ranked: list[str], expected: Collection[str], k: int | None) -> tuple[float, float]:
    gains = dict.fromkeys(expected, 1.0)
    window = ranked if k is None else ranked[:k]
    dcg = sum(gains.get(d, 0.0) / math.log2(rank + 1) for rank, d in enumerate(window, start=1))
    ideal = sorted(gains.values(), reverse=True)
    if k is not None:
        ideal = ideal[:k]
    idcg = sum(gain / math.log2(rank + 1) for rank, gain in enumerate(ideal, start=1))
    return dcg, idcg


def reference_score(
    name: str, metric: str, k: int | None, threshold: float, require_reference: bool, trace: RagTrace
) -> Score:
    expected = list(dict.fromkeys(trace.expected_documents or ()))
    if not expected:
        explanation = "the trace has no expected document ids to compare the retrieved documents with"
        status = "error" if require_reference else "skipped"
        kwargs: dict[str, Any] = {"items": []} if require_reference else {}
        return Score(
            name=name,
            status=status,
            label="no_expected_ids",
            explanation=explanation,
            threshold=threshold,
            **kwargs,
        )
    steps = trace.steps_of("retrieval")
    several = len(steps) > 1
    seen: set[str] = set()
    ranked: list[str] = []
    origin: list[str] = []
    duplicates = 0
    for step_number, step in enumerate(steps, start=1):
        for doc in step.documents:
            if doc.id is None:
                where = f"step {step_number} ({step.name!r})" if several else f"step {step.name!r}"
                return Score(
                    name=name,
                    status="error",
                    label="missing_document_id",
                    explanation=(
                        f"the document at rank {doc.rank} of retrieval {where} has no id; retrieval "
                        "metrics match document ids against the expected ids, so every retrieved "
                        "document needs one"
                    ),
                    threshold=threshold,
                    items=[],
                )
            if doc.id in seen:
                duplicates += 1
                continue
            seen.add(doc.id)
            ranked.append(doc.id)
            origin.append(f" (step {step_number} {step.name!r}, rank {doc.rank})" if several else "")
    value = _ref_value(metric, _ref_dedupe(ranked), expected, k)
    n = len(ranked)
    cutoff = n if k is None else min(k, n)
    position = {d: i for i, d in enumerate(ranked)}
    relevant = set(expected)
    items = []
    for d in expected:
        i = position.get(d)
        if i is None:
            items.append(ScoreItem(text=d, ok=False, evidence="not retrieved"))
        elif i < cutoff:
            items.append(ScoreItem(text=d, ok=True, evidence=f"rank {i + 1}{origin[i]}"))
        else:
            items.append(
                ScoreItem(text=d, ok=False, evidence=f"rank {i + 1}{origin[i]}, outside the top {k}")
            )
    for i, d in enumerate(ranked[:cutoff]):
        if d not in relevant:
            items.append(
                ScoreItem(text=d, ok=False, evidence=f"rank {i + 1}{origin[i]}, not an expected document")
            )
    window = ranked if k is None else ranked[:k]
    found = [(i + 1, d) for i, d in enumerate(window) if d in relevant]
    found_ids = {d for _, d in found}
    missing = [d for d in expected if d not in found_ids]
    if n == 0:
        why = "no retrieval step" if not steps else "the retrieval returned nothing"
        return _ref_judged(
            name, value, threshold, f"no documents retrieved ({why}); expected: {', '.join(expected)}", items
        )
    scope = f"the top {k}" if k is not None else f"the {n} retrieved documents"
    if k is not None and n < k:
        scope += f" (only {n} retrieved)"
    at_ranks = ", ".join(str(rank) for rank, _ in found)
    tail = f"; missing: {', '.join(missing)}" if missing else ""
    if metric == "hit":
        text = (
            f"expected document {found[0][1]} at rank {found[0][0]} in {scope}"
            if found
            else f"none of the {len(expected)} expected documents in {scope}"
        )
    elif metric == "recall":
        text = f"{len(found)} of {len(expected)} expected documents in {scope}{tail}"
    elif metric == "precision":
        denominator = k if k is not None else n
        extra = [d for d in window if d not in relevant]
        text = f"{len(found)} of {denominator} ranks in {scope} hold an expected document"
        if k is not None and n < k:
            text += f" (precision@{k} divides by {k})"
        if extra:
            text += f"; not expected: {', '.join(extra)}"
    elif metric == "mrr":
        text = (
            f"first expected document ({found[0][1]}) at rank {found[0][0]}"
            if found
            else f"no expected document in {scope}"
        )
    elif metric == "ndcg":
        dcg, idcg = _ref_dcg(ranked, expected, k)
        ranks = f"expected at ranks {at_ranks}" if found else f"no expected document in {scope}"
        text = f"DCG {dcg:.3f} of ideal {idcg:.3f}; {ranks}{tail}"
    else:
        ranks = f"expected at ranks {at_ranks}" if found else f"no expected document in {scope}"
        text = f"average precision over {len(expected)} expected documents; {ranks}{tail}"
    if duplicates:
        text += f"; {duplicates} duplicate id(s) ignored (first occurrence kept)"
    return _ref_judged(name, value, threshold, text, items)


def _observable(score: Score) -> tuple[Any, ...]:
    return (
        score.model_dump(),
        score.model_dump_json(),
        score.model_fields_set,
        [item.model_fields_set for item in score.items],
        repr(score),
    )


# --------------------------------------------------------------------------- the property

IDS = ("a", "b", "c", "d", "e", "f", "g", "h")
documents = st.lists(
    st.tuples(st.one_of(st.sampled_from(IDS), st.sampled_from(IDS), st.none()), st.integers(1, 12)),
    max_size=9,
)
steps = st.lists(
    st.tuples(
        st.sampled_from(("retrieval", "retrieval", "rerank", "llm")),
        st.sampled_from(("s", "bm25")),
        documents,
    ),
    max_size=3,
)
expected_lists = st.one_of(st.none(), st.lists(st.sampled_from(IDS), max_size=5))
evaluator_specs = st.lists(
    st.tuples(
        st.sampled_from(METRICS),
        st.one_of(st.none(), st.integers(1, 11)),
        st.sampled_from((0.0, 0.2, 0.5, 1.0, 1 / 3)),
        st.booleans(),
    ),
    min_size=1,
    max_size=14,
)


def _make_trace(
    spec: list[tuple[str, str, list[tuple[str | None, int]]]], expected: list[str] | None
) -> RagTrace:
    return RagTrace(
        trace_id="t",
        steps=[
            Step(
                span_id=f"s{i}",
                kind=kind,
                name=name,
                documents=[Document(rank=rank, id=doc_id) for doc_id, rank in docs],
            )
            for i, (kind, name, docs) in enumerate(spec)
        ],
        expected_documents=expected,
    )


def _check(trace: RagTrace, specs: list[tuple[str, int | None, float, bool]]) -> None:
    for metric, k, minimum, require in specs:
        name = f"retrieval.{metric}" + (f"@{k}" if k is not None else "")
        evaluate = make_retrieval_evaluator(name, minimum, require_reference=require)
        got = evaluate(trace)
        want = reference_score(name, metric, k, minimum, require, trace)
        assert _observable(got) == _observable(want), name


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, expected_lists, evaluator_specs, st.data())
def test_retrieval_evaluators_match_the_reference(
    spec: list[tuple[str, str, list[tuple[str | None, int]]]],
    expected: list[str] | None,
    specs: list[tuple[str, int | None, float, bool]],
    data: st.DataObject,
) -> None:
    trace = _make_trace(spec, expected)
    _check(trace, specs)
    # Change the trace in place, then score it again with the same evaluators.
    change = data.draw(
        st.sampled_from(("doc_id", "append_doc", "expected", "expected_append", "step", "rank"))
    )
    retrieval = [s for s in trace.steps if s.documents]
    if change == "doc_id" and retrieval:
        doc = retrieval[0].documents[-1]
        doc.id = data.draw(st.one_of(st.sampled_from(IDS), st.none()))
    elif change == "append_doc" and trace.steps:
        trace.steps[0].documents.append(Document(rank=len(trace.steps[0].documents) + 1, id="h"))
    elif change == "expected":
        trace.expected_documents = data.draw(expected_lists)
    elif change == "expected_append" and trace.expected_documents is not None:
        trace.expected_documents.append(data.draw(st.sampled_from(IDS)))
    elif change == "step":
        trace.steps.append(
            Step(span_id="new", kind="retrieval", name="new", documents=[Document(rank=1, id="a")])
        )
    elif change == "rank" and retrieval:
        data.draw(st.sampled_from([d for s in retrieval for d in s.documents])).rank += 1
    _check(trace, specs)


# --------------------------------------------------------------------------- shared readings, changed traces


def _clear_memos() -> None:
    retrieval_module._reading_memo.cache_clear()
    lexical.context_memo.cache_clear()


MUTATIONS = (
    "content",
    "content_none",
    "doc_id",
    "doc_id_none",
    "rank",
    "append_doc",
    "drop_doc",
    "rerank_step",
    "answer",
    "question",
    "expected_answer",
    "expected_documents",
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_trace_changed_in_place_is_read_again(
    golden: tuple[list[RagTrace], dict[str, list[str]]], data: st.DataObject
) -> None:
    """Score a trace with every configuration, change it in place, score it again: each record must
    be the one computed from scratch (no shared reading) for the changed trace."""
    traces, _ = golden
    configs = all_configs()
    trace = data.draw(st.sampled_from(traces)).model_copy(deep=True)
    texts = [d.content for t in traces[:20] for s in t.steps for d in s.documents if d.content]
    for evaluate in configs.values():
        evaluate(trace)
    for change in data.draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3)):
        docs = [d for s in trace.steps for d in s.documents]
        if change == "content" and docs:
            data.draw(st.sampled_from(docs)).content = data.draw(st.sampled_from(texts))
        elif change == "content_none" and docs:
            data.draw(st.sampled_from(docs)).content = None
        elif change == "doc_id" and docs:
            data.draw(st.sampled_from(docs)).id = data.draw(st.sampled_from(("x-new", *IDS)))
        elif change == "doc_id_none" and docs:
            data.draw(st.sampled_from(docs)).id = None
        elif change == "rank" and docs:
            data.draw(st.sampled_from(docs)).rank += data.draw(st.integers(1, 3))
        elif change == "append_doc" and trace.steps:
            step = data.draw(st.sampled_from(trace.steps))
            step.documents.append(Document(rank=len(step.documents) + 1, id="x-new", content=texts[0]))
        elif change == "drop_doc" and docs:
            step = data.draw(st.sampled_from([s for s in trace.steps if s.documents]))
            step.documents.pop()
        elif change == "rerank_step":
            trace.steps.append(
                Step(
                    span_id="rr",
                    kind="rerank",
                    name="rerank",
                    documents=[Document(rank=1, id="r", content=texts[1])],
                )
            )
        elif change == "answer":
            trace.answer = data.draw(st.sampled_from((None, "Refunds take 30 days [r].", texts[2])))
        elif change == "question":
            trace.question = data.draw(st.sampled_from((None, "How long do refunds take?")))
        elif change == "expected_answer":
            trace.expected_answer = data.draw(st.sampled_from((None, texts[3])))
        elif change == "expected_documents":
            if trace.expected_documents is not None and data.draw(st.booleans()):
                trace.expected_documents.append(data.draw(st.sampled_from(("x-new", *IDS))))
            else:
                trace.expected_documents = data.draw(expected_lists)
        got = {label: fingerprint(evaluate(trace)) for label, evaluate in configs.items()}
        fresh = {}
        for label, evaluate in configs.items():
            _clear_memos()
            fresh[label] = fingerprint(evaluate(trace))
        assert got == fresh, change


def _two_step_trace() -> RagTrace:
    return RagTrace(
        trace_id="t",
        question="How long do refunds take?",
        answer="Refunds take 30 days.",
        steps=[
            Step(
                span_id="s1",
                kind="retrieval",
                name="bm25",
                documents=[Document(rank=1, id="a", content="Refunds take 30 days.")],
            ),
            Step(
                span_id="s2",
                kind="retrieval",
                name="dense",
                documents=[Document(rank=1, id="a"), Document(rank=2, id="b", content="Shipping is free.")],
            ),
        ],
        expected_documents=["b"],
    )


def _change_rank(t: RagTrace) -> None:
    t.steps[1].documents[1].rank = 7


def _change_name(t: RagTrace) -> None:
    t.steps[1].name = "sparse"


def _change_kind(t: RagTrace) -> None:
    t.steps[0].kind = "rerank"


def _change_id(t: RagTrace) -> None:
    t.steps[1].documents[1].id = "c"


def _drop_id(t: RagTrace) -> None:
    t.steps[1].documents[1].id = None


def _append_expected(t: RagTrace) -> None:
    assert t.expected_documents is not None
    t.expected_documents.append("a")


def _change_content(t: RagTrace) -> None:
    t.steps[0].documents[0].content = "Refunds take 14 days."


@pytest.mark.parametrize(
    "change",
    [_change_rank, _change_name, _change_kind, _change_id, _drop_id, _append_expected, _change_content],
)
def test_every_part_of_the_reading_key_counts(change: Callable[[RagTrace], None]) -> None:
    """Each thing a shared reading depends on, changed in place, gives the from-scratch records."""
    configs = all_configs()
    trace = _two_step_trace()
    before = {label: fingerprint(evaluate(trace)) for label, evaluate in configs.items()}
    change(trace)
    got = {label: fingerprint(evaluate(trace)) for label, evaluate in configs.items()}
    fresh = {}
    for label, evaluate in configs.items():
        _clear_memos()
        fresh[label] = fingerprint(evaluate(trace))
    assert got == fresh
    assert got != before  # the change is visible in some record


# --------------------------------------------------------------------------- direct record construction


def test_the_direct_path_is_in_use() -> None:
    """The self-check passed on this pydantic: the fast constructors are exercised by these tests."""
    assert scores_module._DIRECT


ITEMS = [("a", True, "e"), ("b", False, None), ("c", True, None), ("d", False, "x")]


def _validated_items() -> list[ScoreItem]:
    return [ScoreItem(text=t, ok=ok, evidence=e) for t, ok, e in ITEMS]


@pytest.mark.parametrize(
    ("build", "validated"),
    [
        (
            lambda: Score.judged("n", 0.5, 0.5, explanation="x", items=score_items(ITEMS), label="l"),
            lambda: Score(
                name="n",
                value=0.5,
                status="pass",
                threshold=0.5,
                label="l",
                explanation="x",
                items=_validated_items(),
            ),
        ),
        (
            lambda: Score.judged("n", 0.25, 0.5),
            lambda: Score(
                name="n", value=0.25, status="fail", threshold=0.5, label=None, explanation=None, items=[]
            ),
        ),
        (  # clamped; int threshold and int value take the validating path
            lambda: Score.judged("n", 1, 1, items=[score_item("a", False, None)]),
            lambda: Score(
                name="n",
                value=1.0,
                status="pass",
                threshold=1.0,
                label=None,
                explanation=None,
                items=[ScoreItem(text="a", ok=False, evidence=None)],
            ),
        ),
        (
            lambda: Score.judged("n", 1.0 + 1e-12, 1.0 - 1e-10),
            lambda: Score(
                name="n",
                value=1.0,
                status="pass",
                threshold=1.0 - 1e-10,
                label=None,
                explanation=None,
                items=[],
            ),
        ),
        (
            lambda: Score.judged("n", float("nan"), 0.5, items=score_items(ITEMS)),
            lambda: Score(
                name="n",
                status="error",
                label="no_value",
                explanation="the evaluator produced no value",
                threshold=0.5,
                items=_validated_items(),
            ),
        ),
        (  # a tuple of items and dict items are validated as before
            lambda: Score.judged("n", 0.5, 0.5, items=tuple(score_items(ITEMS))),  # type: ignore[arg-type]
            lambda: Score(
                name="n",
                value=0.5,
                status="pass",
                threshold=0.5,
                label=None,
                explanation=None,
                items=_validated_items(),
            ),
        ),
        (
            lambda: Score.judged("n", 0.5, 0.5, items=[{"text": "a", "ok": True}]),  # type: ignore[list-item]
            lambda: Score(
                name="n",
                value=0.5,
                status="pass",
                threshold=0.5,
                label=None,
                explanation=None,
                items=[ScoreItem(text="a", ok=True)],
            ),
        ),
        (
            lambda: Score.skip("n", "r", "x", threshold=0.5),
            lambda: Score(name="n", status="skipped", label="r", explanation="x", threshold=0.5),
        ),
        (
            lambda: Score.skip("n", "r", "x"),
            lambda: Score(name="n", status="skipped", label="r", explanation="x", threshold=None),
        ),
        (
            lambda: Score.skip("n", "r", "x", threshold=1),
            lambda: Score(name="n", status="skipped", label="r", explanation="x", threshold=1),
        ),
        (
            lambda: Score.fail_error("n", "r", "x", threshold=0.5, items=score_items(ITEMS)),
            lambda: Score(
                name="n", status="error", label="r", explanation="x", threshold=0.5, items=_validated_items()
            ),
        ),
        (
            lambda: Score.fail_error("n", "r", "x"),
            lambda: Score(name="n", status="error", label="r", explanation="x", threshold=None, items=[]),
        ),
    ],
)
def test_direct_records_equal_validated_ones(
    build: Callable[[], Score], validated: Callable[[], Score]
) -> None:
    built, reference = build(), validated()
    assert _observable(built) == _observable(reference)
    assert built.__pydantic_extra__ == reference.__pydantic_extra__
    assert built.__pydantic_private__ == reference.__pydantic_private__
    assert [i.ok for i in built.items] == sorted(i.ok for i in built.items)  # failing first
    copied = built.model_copy(deep=True)
    assert copied == reference and Score.model_validate(built.model_dump()) == reference


def test_items_with_other_types_are_validated_as_before() -> None:
    assert score_item("a", 1).ok is True  # type: ignore[arg-type]  # coerced, as ScoreItem(ok=1)
    assert score_items([("a", 0, None)])[0].ok is False  # type: ignore[list-item]
    with pytest.raises(ValidationError):
        score_item(5, True)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        score_items([("a", "maybe", None)])  # type: ignore[list-item]
    with pytest.raises(ValidationError):
        Score.judged(5, 0.5, 0.5)  # type: ignore[arg-type]


def test_a_score_subclass_is_validated() -> None:
    class Sub(Score):
        pass

    score = Sub.judged("n", 0.5, 0.5)
    assert type(score) is Sub and score.status == "pass"


def test_shared_items_cannot_change_another_score() -> None:
    """Scores at one cutoff share their (frozen) items; changing one score never changes another:
    the lists are their own, and an item cannot be changed in place."""
    trace = RagTrace(
        trace_id="t",
        steps=[Step(span_id="s", kind="retrieval", name="s", documents=[Document(rank=1, id="a")])],
        expected_documents=["a", "b"],
    )
    first = make_retrieval_evaluator("retrieval.recall@5")(trace)
    second = make_retrieval_evaluator("retrieval.hit@5")(trace)
    assert first.items == second.items
    assert first.items is not second.items
    first.items.clear()
    assert len(second.items) == 2
    with pytest.raises(ValidationError):
        second.items[0].evidence = "changed"  # type: ignore[misc]
    assert make_retrieval_evaluator("retrieval.hit@5")(trace) == second


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python -m tests.evaluators.metrics.test_scoring_equivalence --write")
    write_golden()
