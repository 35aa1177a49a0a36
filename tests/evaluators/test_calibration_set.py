"""The shipped judge calibration set (examples/calibration/cases.yaml): its shape, its sources, and
the sanity checks the deterministic evaluators can give without a judge."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

from collector.shop_assistant.knowledge import load_indexes
from evaluators import textutil as tu
from evaluators.calibration import CalibrationCase, CalibrationSet, load_calibration, run_calibration
from evaluators.metrics.answer_relevance import make_answer_relevance
from evaluators.metrics.faithfulness import make_faithfulness
from evaluators.registry import build_evaluator, known_names
from evaluators.suite import case_trace
from tests.support.helpers import REPO

CASES_FILE = REPO / "examples" / "calibration" / "cases.yaml"
TAGS = frozenset(
    {"supported", "paraphrase", "invented_claim", "contradiction", "partial", "injection"}
    | {"off_topic", "refusal"}
)
INJECTED = re.compile(r"injected-note-(\d+)")
KEBAB = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


@pytest.fixture(scope="module")
def calibration() -> CalibrationSet:
    return load_calibration(CASES_FILE)


@pytest.fixture(scope="module")
def cases(calibration: CalibrationSet) -> list[CalibrationCase]:
    return calibration.cases


@pytest.fixture(scope="module")
def knowledge_base() -> dict[str, str]:
    return {doc.id: doc.content for docs in load_indexes().values() for doc in docs}


def tagged(cases: list[CalibrationCase], tag: str) -> list[CalibrationCase]:
    return [case for case in cases if tag in case.tags]


def injected_ids(case: CalibrationCase) -> list[str]:
    return [ctx.id for ctx in case.contexts if ctx.id is not None and INJECTED.fullmatch(ctx.id)]


def context_numbers(case: CalibrationCase) -> frozenset[str]:
    return frozenset().union(*(tu.numbers(ctx.text) for ctx in case.contexts))


def test_the_issue_counts_are_met(cases: list[CalibrationCase]) -> None:
    with_faithfulness = [case for case in cases if "faithfulness" in case.verdicts]
    assert len(with_faithfulness) >= 36
    invented = [c for c in tagged(cases, "invented_claim") if c.verdicts.get("faithfulness") == "fail"]
    assert len(invented) >= 12
    injection = tagged(cases, "injection")
    assert len(injection) >= 6
    for case in injection:
        assert injected_ids(case), f"{case.name}: no injected-note-* document"
        # The answer is wrong, so a judge that obeys the note gives a false pass.
        assert case.verdicts.get("faithfulness") == "fail", case.name


def test_both_verdicts_occur_for_every_evaluator(cases: list[CalibrationCase]) -> None:
    # A set that only ever expects `pass` (or `fail`) from an evaluator cannot measure it.
    names = {name for case in cases for name in case.verdicts}
    assert {"faithfulness", "context_relevance", "context_recall", "context_precision"} <= names
    assert {"answer_relevance", "answer_correctness"} <= names
    for name in names:
        seen = {case.verdicts[name] for case in cases if name in case.verdicts}
        assert seen == {"pass", "fail"}, f"{name}: only {seen}"


def test_names_are_unique_kebab_case(cases: list[CalibrationCase]) -> None:
    names = [case.name for case in cases]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})
    assert [n for n in names if not KEBAB.fullmatch(n)] == []


def test_every_case_is_complete_and_tagged_from_the_vocabulary(cases: list[CalibrationCase]) -> None:
    for case in cases:
        assert case.question and case.answer and case.expected, case.name
        assert 1 <= len(case.contexts) <= 4, case.name
        assert case.tags, f"{case.name}: no tag"
        assert set(case.tags) <= TAGS, f"{case.name}: unknown tags {set(case.tags) - TAGS}"
        assert len(case.tags) == len(set(case.tags)), case.name


def test_verdict_keys_are_known_score_names(cases: list[CalibrationCase]) -> None:
    known = set(known_names())
    for case in cases:
        assert set(case.verdicts) <= known, f"{case.name}: {set(case.verdicts) - known}"


def test_knowledge_base_documents_are_copied_verbatim(
    cases: list[CalibrationCase], knowledge_base: dict[str, str]
) -> None:
    for case in cases:
        for ctx in case.contexts:
            assert ctx.id is not None, f"{case.name}: a context without id"
            if INJECTED.fullmatch(ctx.id):
                assert ctx.text not in knowledge_base.values(), f"{case.name}: {ctx.id} is a KB text"
                continue
            assert ctx.id in knowledge_base, f"{case.name}: {ctx.id} is not a knowledge-base document"
            assert ctx.text == knowledge_base[ctx.id], f"{case.name}: {ctx.id} differs from the KB"


def test_injected_notes_are_numbered_once_each_and_worded_differently(cases: list[CalibrationCase]) -> None:
    notes = [(ctx.id, ctx.text) for case in cases for ctx in case.contexts if ctx.id in injected_ids(case)]
    ids = [doc_id for doc_id, _ in notes]
    assert sorted(ids, key=lambda i: int(i.rsplit("-", 1)[1])) == [
        f"injected-note-{n}" for n in range(1, len(ids) + 1)
    ]
    assert len({text for _, text in notes}) == len(notes)
    # Injected notes appear only in cases tagged injection (and every injection case has one).
    for case in cases:
        assert bool(injected_ids(case)) == ("injection" in case.tags), case.name


def test_injected_notes_state_none_of_the_answer_numbers(cases: list[CalibrationCase]) -> None:
    # An injected note that repeated the answer's invented figure would "support" it, and the known
    # faithfulness fail would be wrong.
    for case in tagged(cases, "injection"):
        assert case.answer is not None
        answer = tu.numbers(case.answer)
        for ctx in case.contexts:
            if ctx.id in injected_ids(case):
                assert not answer & tu.numbers(ctx.text), f"{case.name}: {ctx.id} repeats a number"


def test_refusals_have_no_faithfulness_verdict_and_every_other_case_has_one(
    cases: list[CalibrationCase],
) -> None:
    refusals = tagged(cases, "refusal")
    assert len(refusals) >= 2
    for case in cases:
        if "refusal" in case.tags:
            assert "faithfulness" not in case.verdicts, case.name
            assert case.verdicts.get("answer_relevance") == "fail", case.name
        else:
            assert "faithfulness" in case.verdicts, case.name


def test_refusals_read_as_refusals_to_the_no_judge_evaluators(cases: list[CalibrationCase]) -> None:
    faithfulness, relevance = make_faithfulness(), make_answer_relevance()
    for case in tagged(cases, "refusal"):
        trace = case_trace(case)
        score = faithfulness(trace)
        assert (score.status, score.label) == ("skipped", "no_claims"), case.name
        relevant = relevance(trace)
        assert (relevant.status, relevant.label) == ("fail", "noncommittal"), case.name


def test_invented_numbers_fail_the_lexical_faithfulness_check(cases: list[CalibrationCase]) -> None:
    faithfulness = make_faithfulness()
    checked = 0
    for case in tagged(cases, "invented_claim"):
        assert case.answer is not None and case.question is not None
        invented = tu.numbers(case.answer) - context_numbers(case) - tu.numbers(case.question)
        if not invented:
            continue
        checked += 1
        score = faithfulness(case_trace(case))
        assert score.status == "fail", f"{case.name}: lexical faithfulness {score.status} with {invented}"
    assert checked >= 8  # most invented claims are wrong figures: the check is not vacuous


def test_faithful_answers_take_their_numbers_from_the_case(cases: list[CalibrationCase]) -> None:
    # A known `pass` whose answer has a figure found in neither the documents nor the question
    # would be a mislabelled case.
    passes = [case for case in cases if case.verdicts.get("faithfulness") == "pass"]
    assert len(passes) >= 16
    for case in passes:
        assert case.answer is not None and case.question is not None
        stray = tu.numbers(case.answer) - context_numbers(case) - tu.numbers(case.question)
        assert not stray, f"{case.name}: {sorted(stray)} in no document"


def test_the_set_runs_through_the_calibration_runner(calibration: CalibrationSet) -> None:
    # The no-judge evaluators stand in for the judge: every verdict yields a run, none errors, and
    # faithfulness (no refusal carries one, every case has document text) is never skipped.
    def build(entry: Mapping[str, Any]) -> Any:
        return build_evaluator({"name": entry["name"], "judge": False})

    reports = run_calibration(calibration, build)
    expected = {
        name: sum(1 for case in calibration.cases if name in case.verdicts)
        for name in {name for case in calibration.cases for name in case.verdicts}
    }
    assert {report.evaluator for report in reports} == set(expected)
    injection = len(tagged(calibration.cases, "injection"))
    for report in reports:
        assert report.unavailable is None
        assert report.runs == expected[report.evaluator]
        assert report.errors == 0
        assert report.correct + report.false_passes + report.false_fails + report.skipped == report.runs
        if report.evaluator == "faithfulness":
            assert report.skipped == 0
            assert report.injection_runs == injection
