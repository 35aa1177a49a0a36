"""answer_correctness: does the answer say what the expected answer says?

- No judge: SQuAD-style token F1 between answer and expected answer; items explain it sentence by
  sentence (the coverage rule, `evaluators.lexical`, the other text as the one document).
- Judge: answer claims judged against the expected answer and, in mode `f1`, the expected
  statements found in the answer or not; F1 (mode `precision`: precision).

Default `min` 0.7.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from semconv.models import RagTrace

from .. import textutil as tu
from ..judge.asking import Asker, earlier_turns, messages, present, with_judge
from ..judge.fence import FencedInputs, fence_inputs
from ..lexical import DEFAULT_COVERAGE, claims, cover, read_doc, strip_citations
from ..metric import Evaluator, JudgeVariant, Metric, Options, check_fraction, pass_line
from ..scores import Score, ScoreItem, score_item

if TYPE_CHECKING:
    from ..judge.client import JudgeClient

NAME = "answer_correctness"
DEFAULT_MIN = 0.7
MODES = ("f1", "precision")
_ARTICLES = frozenset({"a", "an", "the"})


@dataclass(frozen=True)
class AnswerCorrectnessOptions(Options):
    coverage: float = DEFAULT_COVERAGE

    def check(self, name: str) -> None:
        check_fraction(name, "coverage", self.coverage)


# --------------------------------------------------------------------------- no judge


def answer_tokens(text: str) -> list[str]:
    """SQuAD-style normalised tokens: lower case, punctuation and articles dropped (decimals kept)."""
    return [w for w in tu._words(strip_citations(text)) if w not in _ARTICLES]


@lru_cache(maxsize=8192)
def _token_counts(text: str) -> tuple[Counter[str], int]:
    tokens = answer_tokens(text)
    return Counter(tokens), len(tokens)


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD token F1: multiset overlap; 1 when both are empty, 0 when one is."""
    pred, n_pred = _token_counts(prediction)
    ref, n_ref = _token_counts(reference)
    if not n_pred or not n_ref:
        return float(n_pred == n_ref)
    if len(ref) < len(pred):
        pred, ref = ref, pred  # the multiset intersection is symmetric; walk the smaller one
    common = sum(min(count, ref[token]) for token, count in pred.items() if token in ref)
    if common == 0:
        return 0.0
    p = common / n_pred
    r = common / n_ref
    return 2 * p * r / (p + r)


def make_answer_correctness(min: float | None = None, *, coverage: float = DEFAULT_COVERAGE) -> Evaluator:
    """No-judge answer correctness: SQuAD token F1 between answer and expected answer. Default `min`
    0.7.

    Items explain the value at sentence level: each expected-answer sentence found in the answer or
    not, and each answer sentence not in the expected answer (the faithfulness coverage rule, the
    other text as the one document). Missing answer or expected answer -> skipped.
    """
    return _build(NAME, min, AnswerCorrectnessOptions(coverage))


def _build(name: str, min: float | None, options: AnswerCorrectnessOptions) -> Evaluator:
    threshold = pass_line(name, min, DEFAULT_MIN)
    options.check(name)
    coverage = options.coverage

    def evaluate(trace: RagTrace) -> Score:
        if tu.blank(trace.answer):
            return Score.skip(name, "no_answer", "the trace has no answer", threshold=threshold)
        if tu.blank(trace.expected_answer):
            return Score.skip(name, "no_reference", "the trace has no expected answer", threshold=threshold)
        assert trace.answer is not None and trace.expected_answer is not None
        answer, expected = trace.answer, trace.expected_answer
        as_doc = [read_doc("answer", strip_citations(answer))]
        ref_doc = [read_doc("expected answer", strip_citations(expected))]
        items = []
        for sentence in claims(expected):
            result = cover(sentence, as_doc, coverage)
            evidence = (
                "in the answer"
                if result.covered
                else "missing from the answer: " + ", ".join(result.missing_numbers + result.missing_words)
            )
            items.append(score_item(text=f"expected: {sentence}", ok=result.covered, evidence=evidence))
        extra = 0
        for sentence in claims(answer):
            result = cover(sentence, ref_doc, coverage)
            if not result.covered:
                extra += 1
                evidence = "not in the expected answer: " + ", ".join(
                    result.missing_numbers + result.missing_words
                )
                items.append(score_item(text=f"answer: {sentence}", ok=False, evidence=evidence))
        value = token_f1(answer, expected)
        missing = sum(1 for item in items if not item.ok) - extra
        explanation = f"token F1 {value:.2f} between answer and expected answer (lexical)"
        if missing:
            explanation += f"; {missing} expected sentence(s) not found in the answer"
        if extra:
            explanation += f"; {extra} answer sentence(s) not in the expected answer"
        return Score.judged(name, value, threshold, explanation=explanation, items=items)

    return evaluate


# --------------------------------------------------------------------------- judge

ANSWER_CORRECTNESS_VERSION = "answer_correctness/3"
ANSWER_PRECISION_VERSION = "answer_correctness.precision/3"

_ANSWER_CLAIMS = """\
1. Split the answer into claims: short factual statements, each understandable alone (resolve \
pronouns). Skip greetings, questions and offers of help.
2. verdict of each, by the reference alone (not your knowledge): "supported" (stated or follows \
directly), "contradicted" (it says something incompatible) or "unsupported" (not said).\
"""

_ANSWER_VERSUS_REFERENCE = "Compare the answer with the reference (the known correct answer to the question)."

ANSWER_CORRECTNESS_PROMPT = f"""\
{_ANSWER_VERSUS_REFERENCE}
{_ANSWER_CLAIMS}
3. Split the reference into statements the same way; present: the answer states it (in any words), \
false when it leaves it out or says otherwise.
4. reason: at most 15 words.\
"""

ANSWER_PRECISION_PROMPT = f"""\
{_ANSWER_VERSUS_REFERENCE}
{_ANSWER_CLAIMS}
3. reason: at most 15 words.\
"""


class AnswerClaim(BaseModel):
    model_config = ConfigDict(extra="forbid")

    claim: str = Field(min_length=1)
    verdict: Literal["supported", "unsupported", "contradicted"]
    reason: str = ""


class ReferenceStatement(BaseModel):
    model_config = ConfigDict(extra="forbid")

    statement: str = Field(min_length=1)
    present: bool
    reason: str = ""


class AnswerPrecisionVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    answer_claims: list[AnswerClaim]


class AnswerCorrectnessVerdict(AnswerPrecisionVerdict):
    reference_statements: list[ReferenceStatement]


def answer_correctness_messages(fenced: FencedInputs, *, precision_only: bool) -> list[dict[str, str]]:
    prompt = ANSWER_PRECISION_PROMPT if precision_only else ANSWER_CORRECTNESS_PROMPT
    return messages(prompt, fenced, "question", "answer", "reference")


def _correctness_found(verdict: AnswerPrecisionVerdict) -> str | None:
    # Both texts are non-blank and the answer has checkable sentences (checked before the call), so
    # an empty list is an unusable verdict, not a skip (see faithfulness's `_claims_found`).
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
    name = NAME
    if mode not in MODES:
        raise ValueError(f"mode: must be one of {', '.join(MODES)} for {name}, got {mode!r}")
    threshold = pass_line(name, min, DEFAULT_MIN)
    precision_only = mode == "precision"
    version = ANSWER_PRECISION_VERSION if precision_only else ANSWER_CORRECTNESS_VERSION
    schema: type[AnswerPrecisionVerdict] = (
        AnswerPrecisionVerdict if precision_only else AnswerCorrectnessVerdict
    )

    judge = Asker(client, name, threshold)

    def evaluate(trace: RagTrace) -> Score:
        answer, expected = trace.answer, trace.expected_answer
        if tu.blank(answer):
            return Score.skip(name, "no_answer", "the trace has no answer", threshold=threshold)
        if tu.blank(expected):
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
        fenced = fence_inputs(
            question=present(trace.question),
            answer=answer,
            reference=expected,
            conversation=earlier_turns(trace),
        )
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
            present_ = sum(st.present for st in statements)
            recall = present_ / len(statements)
            value = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
            text += f"; {present_} of {len(statements)} expected statements in the answer; F1 {value:.2f}"
        else:
            text += f"; precision {value:.2f} (mode precision: omissions not judged)"
        label = "contradiction" if contradicted else None
        score = Score.judged(name, value, threshold, explanation=text, items=items, label=label)
        return with_judge(score, fields)

    return evaluate


def _judge(
    client: JudgeClient, name: str, min: float | None, mode: str | None, options: dict[str, Any]
) -> Evaluator:
    return make_judge_answer_correctness(client, min, mode=mode or "f1")


METRIC = Metric(
    name=NAME,
    doc="Whether the answer says what the expected answer says (F1 of claims and statements).",
    evaluates="answer",
    order=70,
    build=_build,
    options=AnswerCorrectnessOptions,
    judge=JudgeVariant(_judge, modes=MODES),
)
