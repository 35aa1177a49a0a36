"""The evaluator registry: entries of the `evaluators:` config list -> evaluators, or a clear error."""

from __future__ import annotations

import pytest

from evaluators.metrics import all_metrics
from evaluators.registry import (
    DEFAULT_ENTRIES,
    JUDGE_NAMES,
    build_evaluator,
    build_evaluators,
    evaluates,
    known_names,
)
from semconv import Document, RagTrace, Step
from tests.support.helpers import DEFAULT_SCORE_NAMES

TRACE = RagTrace(
    trace_id="t1",
    question="How many days do I have to ask for a refund?",
    answer="You can ask for a refund within 30 days [refund-window].",
    expected_documents=["refund-window", "refund-method"],
    expected_answer="Refunds are accepted within 30 days.",
    steps=[
        Step(
            span_id="s1",
            kind="retrieval",
            documents=[
                Document(
                    rank=1, id="refund-window", content="Refunds are accepted within 30 days of delivery."
                ),
                Document(
                    rank=2, id="shipping-times", content="Standard shipping takes 3 to 5 business days."
                ),
            ],
        )
    ],
)


def test_default_set_is_every_deterministic_evaluator_and_scores_a_trace() -> None:
    evaluators = build_evaluators(None)
    assert len(evaluators) == len(DEFAULT_ENTRIES) == 13
    scores = {score.name: score for score in (evaluate(TRACE) for evaluate in evaluators)}
    assert set(scores) == DEFAULT_SCORE_NAMES
    assert (scores["retrieval.recall@5"].value, scores["retrieval.recall@5"].status) == (0.5, "fail")
    assert (scores["retrieval.hit@5"].value, scores["retrieval.hit@5"].status) == (1.0, "pass")
    assert (scores["citation"].value, scores["citation"].status) == (1.0, "pass")
    assert scores["faithfulness"].status == "pass"


def test_min_and_threshold_set_the_pass_line() -> None:
    assert build_evaluator({"name": "retrieval.recall@5", "min": 0.5})(TRACE).status == "pass"
    assert build_evaluator({"name": "retrieval.recall@5", "threshold": 0.5})(TRACE).status == "pass"
    assert build_evaluator({"name": "retrieval.recall@5"})(TRACE).status == "fail"  # default min 1
    precision = build_evaluator({"name": "retrieval.precision@2", "min": 0.5})(TRACE)
    assert (precision.value, precision.status, precision.threshold) == (0.5, "pass", 0.5)


def test_aliases_keep_their_name_and_options_reach_the_evaluator() -> None:
    score = build_evaluator({"name": "groundedness", "min": 0.5})(TRACE)
    assert score.name == "groundedness" and score.threshold == 0.5
    listed = build_evaluator({"name": "context_entity_recall", "entities": ["30 days", "90 days"]})(TRACE)
    assert listed.value == 0.5


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "nope"}, "evaluators[0].name: unknown evaluator 'nope'"),
        ({}, "evaluators[0].name: required"),
        ({"name": "retrieval.recall@0"}, "retrieval.recall@0"),
        (
            {"name": "retrieval.recall@5", "foo": 1},
            "evaluators[0].foo: unknown option for retrieval.recall@5",
        ),
        ({"name": "citation", "bogus": 1}, "evaluators[0].bogus: unknown option for citation"),
        ({"name": "faithfulness", "coverage": 2}, "coverage"),
        ({"name": "faithfulness", "min": "high"}, "evaluators[0].min: must be a number"),
        (
            {"name": "faithfulness", "min": 0.5, "threshold": 0.6},
            "evaluators[0].threshold: give min or threshold",
        ),
        ({"name": "retrieval.precision@5"}, "needs a `min`"),
        (
            {"name": "faithfulness", "judge": True},
            "evaluators[0].judge: no judge configured (set judge.model)",
        ),
        (
            {"name": "citation", "judge": True},
            "evaluators[0].judge: citation is an exact rule with no judge variant",
        ),
        ({"name": "faithfulness", "mode": "claims"}, "evaluators[0].mode: applies to the judge variant"),
    ],
)
def test_bad_entries_are_refused_naming_the_key(entry: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        build_evaluators([entry])
    assert message in str(raised.value)


def test_the_entry_index_is_named() -> None:
    with pytest.raises(ValueError, match=r"^evaluators\[1\]\.name: unknown evaluator 'typo'"):
        build_evaluators([{"name": "faithfulness"}, {"name": "typo"}])


def test_known_names_cover_the_design_table() -> None:
    names = known_names()
    for name in ("retrieval.ndcg", "context_precision", "hallucination", "answer_relevance", "citation"):
        assert name in names


def test_every_metric_module_is_found_and_declares_itself_once() -> None:
    metrics = all_metrics()
    assert [metric.name for metric in metrics] == [
        "retrieval",
        "faithfulness",
        "context_recall",
        "context_entity_recall",
        "citation",
        "context_precision",
        "context_relevance",
        "answer_correctness",
        "answer_relevance",
    ]
    for metric in metrics:
        assert metric.doc and "\n" not in metric.doc, metric.name
    assert set(JUDGE_NAMES) == {
        "faithfulness",
        "groundedness",
        "hallucination",
        "context_relevance",
        "context_precision",
        "context_recall",
        "answer_relevance",
        "answer_correctness",
    }


@pytest.mark.parametrize(
    ("name", "target"),
    [
        ("retrieval.recall@5", "retrieval"),
        ("retrieval.ndcg", "retrieval"),
        ("context_recall", "retrieval"),
        ("context_entity_recall", "retrieval"),
        ("context_precision", "retrieval"),
        ("context_relevance", "retrieval"),
        ("context_relevance.ndcg@5", "retrieval"),
        ("faithfulness", "generation"),
        ("groundedness", "generation"),
        ("hallucination", "generation"),
        ("citation", "generation"),
        ("answer_correctness", "answer"),
        ("answer_relevance", "answer"),
        ("not_a_metric", "answer"),
    ],
)
def test_each_metric_says_what_it_evaluates(name: str, target: str) -> None:
    assert evaluates(name) == target
