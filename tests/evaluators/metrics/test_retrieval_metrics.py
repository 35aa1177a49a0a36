"""The deterministic retrieval metrics (evaluators/retrieval.py, evaluators/metrics/retrieval.py) and the
score record (evaluators/scores.py).

Hand-worked values for every definition and edge case of docs/scores.md, "Retrieval metrics"
(duplicates, k beyond the list, no expected ids, nothing relevant retrieved, documents without ids,
empty retrieval, graded nDCG), hypothesis properties of the pure functions, and the
evaluator layer on RagTrace objects built directly.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from evaluators.metrics.retrieval import evaluate_retrieval, make_retrieval_evaluator, parse_name
from evaluators.retrieval import (
    METRIC_FUNCTIONS,
    METRICS,
    MissingDocumentIdError,
    average_precision,
    dedupe,
    hit,
    mrr,
    ndcg,
    precision,
    recall,
)
from evaluators.scores import Score, ScoreItem
from semconv.models import Document, RagTrace, Step

L2 = math.log2


def close(actual: float | None, expected: float | Fraction) -> bool:
    return actual is not None and math.isclose(actual, float(expected), rel_tol=0, abs_tol=1e-12)


# --------------------------------------------------------------------------- definitions

RUN = ["a", "x", "b", "y", "c"]
QRELS = {"a", "b", "c", "d"}


def test_basic_values_by_hand() -> None:
    assert hit(RUN, QRELS, 1) == 1.0
    assert close(recall(RUN, QRELS, 3), Fraction(2, 4))
    assert close(recall(RUN, QRELS, 5), Fraction(3, 4))
    assert close(recall(RUN, QRELS), Fraction(3, 4))
    assert close(precision(RUN, QRELS, 3), Fraction(2, 3))
    assert close(precision(RUN, QRELS, 5), Fraction(3, 5))
    assert close(precision(RUN, QRELS), Fraction(3, 5))  # whole list: divides by the 5 retrieved
    assert mrr(RUN, QRELS, 5) == 1.0
    # AP@5 = (P@1 + P@3 + P@5) / |rel| = (1 + 2/3 + 3/5) / 4 = 17/30; the unretrieved d still counts.
    assert close(average_precision(RUN, QRELS, 5), Fraction(17, 30))
    dcg = 1 / L2(2) + 1 / L2(4) + 1 / L2(6)
    idcg = 1 / L2(2) + 1 / L2(3) + 1 / L2(4) + 1 / L2(5)  # ideal: all four expected ids
    assert close(ndcg(RUN, QRELS, 5), dcg / idcg)
    assert close(ndcg(RUN, QRELS), dcg / idcg)


def test_mrr_is_cut_at_k() -> None:
    run = ["x", "y", "a"]
    assert mrr(run, {"a"}, 2) == 0.0  # trec_eval recip_rank would say 1/3: MRR is cut at k here
    assert close(mrr(run, {"a"}, 3), Fraction(1, 3))
    assert close(mrr(run, {"a"}), Fraction(1, 3))


def test_ndcg_ideal_ranking_uses_all_expected_ids() -> None:
    # Phoenix normalises by the retrieved labels (would give 1.0); here: ideal of all expected ids.
    assert ndcg(["a"], {"a", "b"}, 1) == 1.0  # IDCG@1 = 1 too
    assert close(ndcg(["a"], {"a", "b"}, 2), 1 / (1 + 1 / L2(3)))
    assert close(ndcg(["a"], {"a", "b"}), 1 / (1 + 1 / L2(3)))


def test_ap_divides_by_all_expected_ids() -> None:
    # RAGAS-style context precision would give 1.0 (divides by relevant retrieved).
    assert close(average_precision(["a"], {"a", "b", "c"}, 1), Fraction(1, 3))
    assert close(average_precision(["x", "a"], {"a", "b"}), Fraction(1, 4))


def test_ranks_as_given_no_resorting() -> None:
    assert mrr(["b", "a"], {"a"}) == 0.5
    assert mrr(["a", "b"], {"a"}) == 1.0


# --------------------------------------------------------------------------- edge cases


def test_duplicates_counted_once_first_occurrence_kept() -> None:
    run = ["a", "a", "b"]  # deduplicated before the cut: [a, b]
    assert dedupe(run) == ["a", "b"]
    assert mrr(run, {"b"}) == 0.5  # not 1/3
    assert precision(run, {"b"}, 2) == 0.5  # the window is [a, b], not [a, a]
    assert precision(run, {"a", "b"}, 2) == 1.0  # not 1/2: the copy takes no rank
    assert recall(run, {"b"}, 2) == 1.0
    assert average_precision(run, {"b"}) == 0.5
    assert close(ndcg(run, {"b"}, 2), 1 / L2(3))
    # A repeated relevant document is not a second hit.
    assert precision(["a", "b", "a"], {"a"}) == 0.5  # whole list: 2 distinct retrieved
    assert close(precision(["a", "a", "a"], {"a"}, 3), Fraction(1, 3))
    assert average_precision(["a", "a"], {"a"}) == 1.0


def test_duplicate_expected_ids_count_once() -> None:
    assert recall(["a"], ["a", "a"]) == 1.0
    assert average_precision(["a"], ["a", "a"]) == 1.0
    assert ndcg(["a"], ["a", "a"]) == 1.0


def test_k_beyond_the_list() -> None:
    run, qrels = ["a", "b"], {"a", "c"}
    assert close(precision(run, qrels, 5), Fraction(1, 5))  # still divides by k
    assert recall(run, qrels, 5) == 0.5
    assert hit(run, qrels, 5) == 1.0
    assert mrr(run, qrels, 5) == 1.0
    assert average_precision(run, qrels, 5) == 0.5
    assert close(ndcg(run, qrels, 5), 1 / (1 + 1 / L2(3)))


def test_no_expected_ids_is_null_not_zero() -> None:
    for metric in METRICS:
        function = METRIC_FUNCTIONS[metric]
        assert function(["a", "b"], set(), 3) is None, metric
        assert function(["a", "b"], [], None) is None, metric
        assert function([], (), 1) is None, metric


def test_nothing_relevant_retrieved_is_zero() -> None:
    for metric in METRICS:
        assert METRIC_FUNCTIONS[metric](["x", "y"], {"a"}, 2) == 0.0, metric
        assert METRIC_FUNCTIONS[metric](["x", "y"], {"a"}, None) == 0.0, metric


def test_empty_retrieval_is_zero() -> None:
    for metric in METRICS:
        assert METRIC_FUNCTIONS[metric]([], {"a"}, 3) == 0.0, metric
        assert METRIC_FUNCTIONS[metric]([], {"a"}, None) == 0.0, metric  # whole-list precision: no 0/0


def test_document_without_id_is_an_error() -> None:
    for metric in METRICS:
        with pytest.raises(MissingDocumentIdError) as raised:
            METRIC_FUNCTIONS[metric](["a", None, "b"], {"a"}, 5)
        assert raised.value.position == 2
        # Also past k, and also without a reference: the ranking itself is broken.
        with pytest.raises(MissingDocumentIdError):
            METRIC_FUNCTIONS[metric](["a", "b", None], {"a"}, 1)
        with pytest.raises(MissingDocumentIdError):
            METRIC_FUNCTIONS[metric]([None], set(), None)


def test_graded_ndcg_linear_gains() -> None:
    grades = {"a": 3, "b": 2, "c": 1}
    # DCG@3 of [c, x, a] = 1/log2(2) + 0 + 3/log2(4) = 2.5; IDCG@3 = 3/1 + 2/log2(3) + 1/log2(4).
    assert close(ndcg(["c", "x", "a"], grades, 3), 2.5 / (3 + 2 / L2(3) + 0.5))
    assert ndcg(["a", "b", "c"], grades, 3) == 1.0
    # Executed with pytrec_eval: qrels {a:1, b:2}, run a>b gives ndcg_cut_2 = 0.8597.
    assert ndcg(["a", "b"], {"a": 1, "b": 2}, 2) == pytest.approx(0.8597, abs=5e-5)
    assert close(ndcg(["a", "b"], {"a": 1, "b": 2}, 2), (1 + 2 / L2(3)) / (2 + 1 / L2(3)))
    # Linear, not exponential (ndcg_burges 2^g - 1 would give (1 + 3/log2 3) / (3 + 1/log2 3)).
    assert not close(ndcg(["a", "b"], {"a": 1, "b": 2}, 2), (1 + 3 / L2(3)) / (3 + 1 / L2(3)))


def test_graded_zero_means_judged_not_relevant_and_negative_is_refused() -> None:
    assert ndcg(["a", "b"], {"a": 0, "b": 1}, 2) == pytest.approx(1 / L2(3))
    assert ndcg(["a"], {"a": 0}, 1) is None  # no relevant judgement at all: like no expected ids
    with pytest.raises(ValueError, match="grade"):
        ndcg(["a"], {"a": -1}, 1)
    with pytest.raises(ValueError, match="grade"):
        ndcg(["a"], {"a": math.nan}, 1)


@pytest.mark.parametrize("k", [0, -1, True, 2.0])
def test_bad_k_is_refused(k: object) -> None:
    with pytest.raises(ValueError, match="k must be"):
        recall(["a"], {"a"}, k)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- properties

ids = st.sampled_from(list("abcdefgh"))
rankings = st.lists(ids, max_size=12)
references = st.sets(ids, min_size=1, max_size=6)
cutoffs = st.integers(min_value=1, max_value=15)


@given(rankings, references, st.one_of(st.none(), cutoffs))
def test_values_are_in_unit_interval(run: list[str], qrels: set[str], k: int | None) -> None:
    for metric in METRICS:
        value = METRIC_FUNCTIONS[metric](list(run), qrels, k)
        assert value is not None and 0.0 <= value <= 1.0, (metric, value)


@given(rankings, references, cutoffs)
def test_recall_is_monotone_in_k(run: list[str], qrels: set[str], k: int) -> None:
    assert recall(list(run), qrels, k) <= recall(list(run), qrels, k + 1)  # type: ignore[operator]
    assert recall(list(run), qrels, k) <= recall(list(run), qrels)  # type: ignore[operator]


@given(rankings, references, cutoffs)
def test_precision_times_k_counts_hits_in_top_k(run: list[str], qrels: set[str], k: int) -> None:
    distinct = list(dict.fromkeys(run))  # independent dedupe: first occurrence kept
    hits = sum(1 for doc_id in distinct[:k] if doc_id in qrels)
    value = precision(list(run), qrels, k)
    assert value is not None and math.isclose(value * k, hits)


@given(rankings, references, st.one_of(st.none(), cutoffs))
def test_hit_is_recall_above_zero(run: list[str], qrels: set[str], k: int | None) -> None:
    assert hit(list(run), qrels, k) == (1.0 if recall(list(run), qrels, k) > 0 else 0.0)  # type: ignore[operator]


@given(rankings, references, st.one_of(st.none(), cutoffs))
def test_repeating_the_ranking_changes_nothing(run: list[str], qrels: set[str], k: int | None) -> None:
    for metric in METRICS:
        function = METRIC_FUNCTIONS[metric]
        assert function(list(run) + list(run), qrels, k) == function(list(run), qrels, k), metric


@given(references, st.lists(ids, max_size=6))
def test_ideal_ranking_is_perfect(qrels: set[str], noise: list[str]) -> None:
    run = sorted(qrels) + [doc_id for doc_id in noise if doc_id not in qrels]
    assert ndcg(run, qrels) == 1.0
    assert average_precision(run, qrels) == 1.0
    assert mrr(run, qrels, 1) == 1.0
    assert recall(run, qrels, len(qrels)) == 1.0


# --------------------------------------------------------------------------- evaluator layer


def step(name: str, doc_ids: list[str | None], kind: str = "retrieval", position: int = 0) -> Step:
    docs = [Document(rank=i, id=doc_id, score=1.0 / i) for i, doc_id in enumerate(doc_ids, start=1)]
    return Step.model_validate(
        {"span_id": f"span-{name}", "kind": kind, "name": name, "position": position, "documents": docs}
    )


def trace(*steps: Step, expected: list[str] | None) -> RagTrace:
    return RagTrace(trace_id="t1", steps=list(steps), expected_documents=expected)


REFUND = ["refund-window", "refund-method", "return-shipping"]


def test_recall_explanation_and_items_failing_first() -> None:
    t = trace(
        step(
            "kb", ["refund-window", "gift-cards", "return-shipping", "warranty", "exchanges", "refund-method"]
        ),
        expected=REFUND,
    )
    score = evaluate_retrieval("retrieval.recall@5", t, 0.6)
    assert score.name == "retrieval.recall@5"
    assert close(score.value, Fraction(2, 3))
    assert score.status == "pass" and score.threshold == 0.6
    assert score.explanation == "2 of 3 expected documents in the top 5; missing: refund-method"
    assert [(i.text, i.ok, i.evidence) for i in score.items] == [
        ("refund-method", False, "rank 6, outside the top 5"),
        ("gift-cards", False, "rank 2, not an expected document"),
        ("warranty", False, "rank 4, not an expected document"),
        ("exchanges", False, "rank 5, not an expected document"),
        ("refund-window", True, "rank 1"),
        ("return-shipping", True, "rank 3"),
    ]
    # Default min for recall is 1: the same trace fails.
    assert evaluate_retrieval("retrieval.recall@5", t).status == "fail"
    # The whole list finds all three.
    whole = evaluate_retrieval("retrieval.recall", t)
    assert whole.value == 1.0 and whole.status == "pass"
    assert whole.explanation == "3 of 3 expected documents in the 6 retrieved documents"


def test_not_retrieved_evidence_and_every_metric_value() -> None:
    t = trace(step("kb", ["gift-cards", "refund-window"]), expected=["refund-window", "refund-method"])
    values = {metric: evaluate_retrieval(f"retrieval.{metric}@3", t, 0.0).value for metric in METRICS}
    assert values["hit"] == 1.0
    assert values["recall"] == 0.5
    assert close(values["precision"], Fraction(1, 3))  # k = 3 although 2 were retrieved
    assert values["mrr"] == 0.5
    assert values["map"] == 0.25
    assert close(values["ndcg"], (1 / L2(3)) / (1 + 1 / L2(3)))
    score = evaluate_retrieval("retrieval.precision@3", t, 0.3)
    assert score.status == "pass"
    assert score.explanation == (
        "1 of 3 ranks in the top 3 (only 2 retrieved) hold an expected document "
        "(precision@3 divides by 3); not expected: gift-cards"
    )
    assert score.items[0] == ScoreItem(text="refund-method", ok=False, evidence="not retrieved")
    mrr_score = evaluate_retrieval("retrieval.mrr@3", t, 0.5)
    assert mrr_score.explanation == "first expected document (refund-window) at rank 2"
    ndcg_score = evaluate_retrieval("retrieval.ndcg@3", t, 0.5)
    assert ndcg_score.explanation == ("DCG 0.631 of ideal 1.631; expected at ranks 2; missing: refund-method")
    assert ndcg_score.status == "fail"


def test_multi_step_retrieval_read_in_order_and_deduplicated() -> None:
    t = trace(
        step("faq", ["a", "b"], position=0),
        step("policies", ["b", "c"], position=1),
        expected=["c"],
    )
    score = evaluate_retrieval("retrieval.mrr", t, 0.3)
    assert close(score.value, Fraction(1, 3))  # combined [a, b, c]: the second b is dropped
    assert score.status == "pass"
    assert score.explanation == (
        "first expected document (c) at rank 3; 1 duplicate id(s) ignored (first occurrence kept)"
    )
    ok = [i for i in score.items if i.ok]
    assert ok == [ScoreItem(text="c", ok=True, evidence="rank 3 (step 2 'policies', rank 2)")]
    assert evaluate_retrieval("retrieval.hit@2", t).value == 0.0


def test_rerank_steps_are_not_read() -> None:
    t = trace(step("kb", ["x", "a"]), step("rerank", ["a", "y"], kind="rerank"), expected=["a"])
    assert t.retrieved_ids == ["a", "y"]  # contexts follow the reranker ...
    assert evaluate_retrieval("retrieval.mrr", t, 0.0).value == 0.5  # ... retrieval metrics do not
    score = evaluate_retrieval("retrieval.precision", t, 0.5)
    assert score.value == 0.5  # [x, a], not [x, a, y]
    assert [i.text for i in score.items] == ["x", "a"]


def test_ranks_as_reported_even_when_scores_disagree() -> None:
    docs = [Document(rank=1, id="x", score=0.1), Document(rank=2, id="a", score=0.9)]
    t = RagTrace(
        trace_id="t", steps=[Step(span_id="s", kind="retrieval", documents=docs)], expected_documents=["a"]
    )
    assert evaluate_retrieval("retrieval.mrr", t, 0.0).value == 0.5


def test_hit_defaults_to_min_one() -> None:
    t = trace(step("kb", ["x", "a"]), expected=["a"])
    score = evaluate_retrieval("retrieval.hit@2", t)
    assert (score.value, score.status, score.threshold) == (1.0, "pass", 1.0)
    assert score.explanation == "expected document a at rank 2 in the top 2"
    miss = evaluate_retrieval("retrieval.hit@1", t)
    assert (miss.value, miss.status) == (0.0, "fail")
    assert miss.explanation == "none of the 1 expected documents in the top 1"


def test_threshold_boundary_passes() -> None:
    t = trace(step("kb", ["a", "b", "c", "d", "x"]), expected=["a", "b", "c", "d", "e"])
    assert evaluate_retrieval("retrieval.recall@5", t, 0.8).status == "pass"  # 4/5 == 0.8
    assert evaluate_retrieval("retrieval.recall@5", t, 0.81).status == "fail"


def test_no_expected_ids_is_skipped_online_and_error_in_suites() -> None:
    no_ids: list[list[str] | None] = [None, []]
    for expected in no_ids:
        t = trace(step("kb", ["a"]), expected=expected)
        score = evaluate_retrieval("retrieval.recall@5", t, 0.8)
        assert (score.status, score.value, score.label) == ("skipped", None, "no_expected_ids")
        assert score.explanation and "no expected document ids" in score.explanation
        strict = evaluate_retrieval("retrieval.recall@5", t, 0.8, require_reference=True)
        assert (strict.status, strict.value, strict.label) == ("error", None, "no_expected_ids")
        assert not strict.passed


def test_document_without_id_is_an_error_score() -> None:
    t = trace(step("kb", ["a", None]), expected=["a"])
    for metric in METRICS:
        score = evaluate_retrieval(f"retrieval.{metric}@1", t, 0.0)  # min 0 would pass any value
        assert (score.status, score.value, score.label) == ("error", None, "missing_document_id"), metric
        assert not score.passed
        assert score.explanation is not None
        assert "rank 2 of retrieval step 'kb' has no id" in score.explanation


def test_empty_retrieval_and_no_retrieval_step_fail_with_zero() -> None:
    empty = evaluate_retrieval("retrieval.recall@5", trace(step("kb", []), expected=["a"]), 0.5)
    assert (empty.value, empty.status) == (0.0, "fail")
    assert empty.explanation == "no documents retrieved (the retrieval returned nothing); expected: a"
    assert empty.items == [ScoreItem(text="a", ok=False, evidence="not retrieved")]
    none = evaluate_retrieval("retrieval.precision", trace(expected=["a"]), 0.5)
    assert (none.value, none.status) == (0.0, "fail")
    assert none.explanation == "no documents retrieved (no retrieval step); expected: a"


def test_factory_checks_the_config_entry() -> None:
    with pytest.raises(ValueError, match="needs a `min`"):
        make_retrieval_evaluator("retrieval.precision@5")
    assert make_retrieval_evaluator("retrieval.precision@5", 0.4).threshold == 0.4
    for name in (
        "retrieval.foo@5",
        "retrieval.recall@0",
        "retrieval.recall@x",
        "recall@5",
        "retrieval.recall@",
    ):
        with pytest.raises(ValueError, match="retrieval"):
            make_retrieval_evaluator(name, 0.5)
    for bad in (1.5, -0.1, math.nan, True):
        with pytest.raises(ValueError, match="min must be"):
            make_retrieval_evaluator("retrieval.recall@5", bad)
    assert parse_name("retrieval.ndcg") == ("ndcg", None)
    assert parse_name("retrieval.map@10") == ("map", 10)
    assert {m: make_retrieval_evaluator(f"retrieval.{m}").threshold for m in METRICS if m != "precision"} == {
        "hit": 1.0,
        "recall": 1.0,
        "mrr": 1.0,
        "ndcg": 1.0,
        "map": 1.0,
    }


# --------------------------------------------------------------------------- the score record


def test_score_record_rules() -> None:
    with pytest.raises(ValidationError):
        Score(name="s", status="pass")  # a pass needs a value
    with pytest.raises(ValidationError):
        Score(name="s", status="error", value=1.0)  # an error has no value
    with pytest.raises(ValidationError):
        Score(name="s", status="fail", value=math.nan)
    with pytest.raises(ValidationError):
        Score(name="s", status="fail", value=1.5)
    no_value = Score.judged("s", None, 0.5)
    assert (no_value.status, no_value.label, no_value.passed) == ("error", "no_value", False)
    assert Score.judged("s", math.nan, 0.0).status == "error"
    items = [ScoreItem(text="a", ok=True), ScoreItem(text="b", ok=False), ScoreItem(text="c", ok=False)]
    assert [i.text for i in Score.judged("s", 0.5, 0.5, items=items).items] == ["b", "c", "a"]
    assert Score.judged("s", 0.5, 0.5).status == "pass"
    assert Score.judged("s", 0.5 - 1e-12, 0.5).status == "pass"  # float noise at the boundary
    assert Score.judged("s", 0.49, 0.5).status == "fail"
    dumped = Score.skip("s", "no_expected_ids", "why").model_dump()
    assert dumped["status"] == "skipped" and dumped["value"] is None and dumped["label"] == "no_expected_ids"
