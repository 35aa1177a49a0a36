"""context_recall: do the documents contain what the expected answer says?

- No judge: the share of the expected answer's checkable sentences covered by one document (the
  coverage rule, `evaluators.lexical`).
- Judge: the judge splits the EXPECTED answer into claims and judges each against the documents
  (the faithfulness check, other text), with a verdict per statement; value = supported share.

Default `min` 0.8.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from semconv.models import RagTrace

from ..judge.asking import (
    CLAIMS_AGAINST_DOCUMENTS,
    Asker,
    FaithfulnessVerdict,
    check_claims,
    context_gate,
    documents,
    explain,
    messages,
    present,
    with_judge,
)
from ..judge.fence import FencedInputs, fence_inputs
from ..lexical import DEFAULT_COVERAGE, claims, no_document_text, no_retrieval, read_context, sentence_share
from ..metric import Evaluator, JudgeVariant, Metric, Options, check_fraction, pass_line
from ..scores import Score
from ..textutil import blank

if TYPE_CHECKING:
    from ..judge.client import JudgeClient

NAME = "context_recall"
DEFAULT_MIN = 0.8


@dataclass(frozen=True)
class ContextRecallOptions(Options):
    coverage: float = DEFAULT_COVERAGE

    def check(self, name: str) -> None:
        check_fraction(name, "coverage", self.coverage)


# --------------------------------------------------------------------------- no judge


def make_context_recall(min: float | None = None, *, coverage: float = DEFAULT_COVERAGE) -> Evaluator:
    """No-judge context recall: the share of the expected answer's checkable sentences covered by one
    retrieved document (the faithfulness coverage rule). Default `min` 0.8, `coverage` 0.7.

    Needs the expected answer (`skipped` `no_reference` without it; `no_claims` when it has no
    checkable sentence, e.g. just "No."). Items: one per expected-answer sentence, missing first.
    """
    return _build(NAME, min, ContextRecallOptions(coverage))


def _build(name: str, min: float | None, options: ContextRecallOptions) -> Evaluator:
    threshold = pass_line(name, min, DEFAULT_MIN)
    options.check(name)
    coverage = options.coverage

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        if blank(trace.expected_answer):
            return Score.skip(
                name, "no_reference", "the trace has no expected answer to look for", threshold=threshold
            )
        assert trace.expected_answer is not None
        sentences_ = claims(trace.expected_answer)
        if not sentences_:
            return Score.skip(
                name, "no_claims", "the expected answer has no checkable sentence", threshold=threshold
            )
        context = read_context(trace)
        if context is None:
            return no_document_text(name, threshold)
        return sentence_share(name, sentences_, context, coverage, threshold, "expected-answer sentences")

    return evaluate


# --------------------------------------------------------------------------- judge

CONTEXT_RECALL_VERSION = "context_recall/3"

CONTEXT_RECALL_PROMPT = f"""\
Check which facts of the reference (the known correct answer to the question) the documents contain.
1. Split the reference into claims: short statements, each understandable alone.
{CLAIMS_AGAINST_DOCUMENTS}"""


def context_recall_messages(fenced: FencedInputs) -> list[dict[str, str]]:
    return messages(CONTEXT_RECALL_PROMPT, fenced, "question", "documents", "reference", documents="id")


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
    name = NAME
    threshold = pass_line(name, min, DEFAULT_MIN)

    judge = Asker(client, name, threshold)

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        expected = trace.expected_answer
        if blank(expected):
            return Score.skip(name, "no_reference", "the trace has no expected answer", threshold=threshold)
        assert expected is not None
        if not claims(expected):
            return Score.skip(
                name, "no_claims", "the expected answer states nothing checkable", threshold=threshold
            )
        gate = context_gate(name, trace.contexts, threshold, "it contains none of the expected answer")
        if gate is not None:
            return gate
        fenced = fence_inputs(
            documents=documents(trace), question=present(trace.question), reference=expected
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
        score = Score.judged(name, value, threshold, explanation=explain(text, fenced), items=tally.items)
        return with_judge(score, fields)

    return evaluate


def _judge(
    client: JudgeClient, name: str, min: float | None, mode: str | None, options: dict[str, Any]
) -> Evaluator:
    return make_judge_context_recall(client, min)


METRIC = Metric(
    name=NAME,
    doc="Whether the retrieved documents contain the expected answer (statement by statement).",
    evaluates="retrieval",
    order=20,
    build=_build,
    options=ContextRecallOptions,
    judge=JudgeVariant(_judge),
)
