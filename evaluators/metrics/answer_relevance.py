"""answer_relevance: does the answer address the question (true or not)?

- No judge: the share of the question's topic words that the answer repeats (very rough).
- Judge: the question's parts a complete answer must address, each addressed or not, and a
  noncommittal flag; scores 0..1 with reasoning.

A refusal is not relevant: value 0, label `noncommittal`, in both variants. Default `min` 0.5.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from semconv.models import RagTrace

from .. import textutil as tu
from ..judge.asking import Asker, earlier_turns, messages, with_judge
from ..judge.fence import FencedInputs, fence_inputs
from ..lexical import claims, read_doc, strip_citations
from ..metric import Evaluator, JudgeVariant, Metric, Options, pass_line
from ..scores import Score, ScoreItem, score_items

if TYPE_CHECKING:
    from ..judge.client import JudgeClient

NAME = "answer_relevance"
DEFAULT_MIN = 0.5


# --------------------------------------------------------------------------- no judge


def make_answer_relevance(min: float | None = None) -> Evaluator:
    """Rough answer relevance: the share of the question's topic words (content words minus
    question-form words) that the answer repeats. Default `min` 0.5.

    Very rough: a correct answer in other words scores low, an answer that echoes the question
    scores high. A refusal is not relevant: value 0, label `noncommittal` (RAGAS zeroes
    noncommittal answers too). No question or answer -> skipped; a question without topic words ->
    `skipped` `no_question_words`. Items: one per question word.
    """
    return _build(NAME, min, Options())


def _build(name: str, min: float | None, options: Options) -> Evaluator:
    threshold = pass_line(name, min, DEFAULT_MIN)

    def evaluate(trace: RagTrace) -> Score:
        if tu.blank(trace.question):
            return Score.skip(name, "no_question", "the trace has no question", threshold=threshold)
        if tu.blank(trace.answer):
            return Score.skip(name, "no_answer", "the trace has no answer", threshold=threshold)
        assert trace.question is not None and trace.answer is not None
        wanted = [w for w in tu.content_word_list(trace.question) if w not in tu.QUESTION_WORDS]
        if not wanted:
            return Score.skip(
                name, "no_question_words", "the question has no topic words", threshold=threshold
            )
        if not claims(trace.answer):
            return Score.judged(
                name,
                0.0,
                threshold,
                label="noncommittal",
                explanation="the answer is a refusal or states nothing checkable",
            )
        answer_words = read_doc("answer", strip_citations(trace.answer)).words
        oks = [w in answer_words for w in wanted]
        shown = tu.as_written(wanted, trace.question)
        items = score_items(
            (w, ok, "in the answer" if ok else "not in the answer") for w, ok in zip(shown, oks, strict=True)
        )
        found = sum(oks)
        explanation = f"{found} of {len(wanted)} question words repeated in the answer (rough lexical proxy)"
        return Score.judged(name, found / len(wanted), threshold, explanation=explanation, items=items)

    return evaluate


# --------------------------------------------------------------------------- judge

ANSWER_RELEVANCE_VERSION = "answer_relevance/3"

ANSWER_RELEVANCE_PROMPT = """\
Rate whether the answer addresses the question (not whether it is true).
1. parts: what a complete answer must address (usually one; a question asking two things has two).
2. addressed: the answer responds to the part directly (a wrong answer still does); false when it \
ignores or evades it or talks about something else.
3. noncommittal: the whole answer refuses, evades or says it does not know.
4. reason: at most 15 words.\
"""


class QuestionPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    part: str = Field(min_length=1)
    addressed: bool
    reason: str = ""


class AnswerRelevanceVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    parts: list[QuestionPart]
    noncommittal: bool


def answer_relevance_messages(fenced: FencedInputs) -> list[dict[str, str]]:
    return messages(ANSWER_RELEVANCE_PROMPT, fenced, "question", "answer")


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
    name = NAME
    threshold = pass_line(name, min, DEFAULT_MIN)

    judge = Asker(client, name, threshold)

    def evaluate(trace: RagTrace) -> Score:
        question, answer = trace.question, trace.answer
        if tu.blank(question):
            return Score.skip(name, "no_question", "the trace has no question", threshold=threshold)
        if tu.blank(answer):
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
        fenced = fence_inputs(question=question, answer=answer, conversation=earlier_turns(trace))
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
        return with_judge(score, fields)

    return evaluate


def _judge(
    client: JudgeClient, name: str, min: float | None, mode: str | None, options: dict[str, Any]
) -> Evaluator:
    return make_judge_answer_relevance(client, min)


METRIC = Metric(
    name=NAME,
    doc="Whether the answer addresses the question, true or not (noncommittal answers score 0).",
    evaluates="answer",
    order=80,
    build=_build,
    judge=JudgeVariant(_judge),
)
