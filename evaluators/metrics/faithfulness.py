"""faithfulness (aliases `groundedness`, `hallucination`): is the answer supported by the documents?

- No judge: the share of the answer's checkable sentences *covered* by one document (the coverage
  rule, `evaluators.lexical`). A lexical check cannot tell a contradiction from a missing
  statement, so the judge's separate "contradicted" count has no equivalent here.
- Judge: the judge extracts the answer's claims AND gives each a verdict (supported / unsupported
  / contradicted) with the supporting document's id and a short quote, in one call. "Not stated"
  is unsupported. Mode `claims`: value = supported fraction, pass when >= `min` (default 1). Mode
  `answer`: value 1 when every claim is supported, else 0; pass when 1. Label `hallucination` when
  at least one claim is contradicted (a categorical indicator, on pass or fail); the explanation
  counts unsupported and contradicted claims separately.

An alias scores the same, with its own name on the record. Default `min` 1 (every checkable
sentence covered, as the judge's claims mode).
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

NAME = "faithfulness"
ALIASES = ("groundedness", "hallucination")
NAMES = (NAME, *ALIASES)
DEFAULT_MIN = 1.0
MODES = ("claims", "answer")


@dataclass(frozen=True)
class FaithfulnessOptions(Options):
    coverage: float = DEFAULT_COVERAGE

    def check(self, name: str) -> None:
        check_fraction(name, "coverage", self.coverage)


def _check_name(name: str) -> None:
    if name not in NAMES:
        raise ValueError(f"faithfulness name must be one of {', '.join(NAMES)}, got {name!r}")


# --------------------------------------------------------------------------- no judge


def make_faithfulness(
    min: float | None = None, *, coverage: float = DEFAULT_COVERAGE, name: str = NAME
) -> Evaluator:
    """No-judge faithfulness: the share of the answer's checkable sentences covered by one document.

    Default `min` 1 (every sentence covered), `coverage` 0.7. `name` may be an alias
    (`groundedness`, `hallucination`): same score, that name on the record. Items: one per answer
    sentence, unsupported first; evidence names the best-matching document and the words and
    numbers it lacks.
    """
    return _build(name, min, FaithfulnessOptions(coverage))


def _build(name: str, min: float | None, options: FaithfulnessOptions) -> Evaluator:
    _check_name(name)
    threshold = pass_line(name, min, DEFAULT_MIN)
    options.check(name)
    coverage = options.coverage

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        if blank(trace.answer):
            return Score.skip(name, "no_answer", "the trace has no answer to check", threshold=threshold)
        assert trace.answer is not None
        sentences_ = claims(trace.answer)
        if not sentences_:
            return Score.skip(
                name,
                "no_claims",
                "the answer states nothing checkable (a refusal, a question or a pleasantry)",
                threshold=threshold,
            )
        context = read_context(trace)
        if context is None:
            return no_document_text(name, threshold)
        return sentence_share(name, sentences_, context, coverage, threshold, "answer sentences")

    return evaluate


# --------------------------------------------------------------------------- judge

FAITHFULNESS_VERSION = "faithfulness/4"

FAITHFULNESS_PROMPT = f"""\
Check whether the answer is supported by the documents (the question is context only).
1. Split the answer into claims: short factual statements, each understandable alone. Skip \
greetings, questions and offers of help.
{CLAIMS_AGAINST_DOCUMENTS}"""


def faithfulness_messages(fenced: FencedInputs) -> list[dict[str, str]]:
    return messages(FAITHFULNESS_PROMPT, fenced, "question", "documents", "answer", documents="id")


def _claims_found(verdict: FaithfulnessVerdict) -> str | None:
    # Asked only when the answer has checkable sentences (a refusal is skipped before the call), so
    # no claim at all is an unusable verdict, never a skip: a skip does not fail a suite case, and a
    # broken or manipulated judge answering `{"claims": []}` would pass every case.
    return None if verdict.claims else "the judge found no claim in an answer that has checkable sentences"


def make_judge_faithfulness(
    client: JudgeClient,
    min: float | None = None,
    *,
    mode: str = "claims",
    name: str = NAME,
) -> Evaluator:
    """Judge faithfulness in one call (claims + verdicts); see the module docstring."""
    _check_name(name)
    if mode not in MODES:
        raise ValueError(f"mode: must be one of {', '.join(MODES)} for {name}, got {mode!r}")
    threshold = pass_line(name, min, DEFAULT_MIN)
    if mode == "answer" and min is not None and float(min) != 1.0:
        raise ValueError(f"min: mode answer scores 1 or 0 and passes at 1; drop min for {name}")

    judge = Asker(client, name, threshold)

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
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
        gate = context_gate(name, trace.contexts, threshold, "an empty context supports no claim")
        if gate is not None:
            return gate
        fenced = fence_inputs(documents=documents(trace), question=present(trace.question), answer=answer)
        asked = judge.ask(
            faithfulness_messages(fenced), FaithfulnessVerdict, FAITHFULNESS_VERSION, fenced, _claims_found
        )
        if isinstance(asked, Score):
            return asked
        parsed, fields = asked
        verdicts = parsed.claims
        tally = check_claims(verdicts, fenced.clip.documents)
        supported, unsupported, contradicted = tally.supported, tally.unsupported, tally.contradicted

        total = len(verdicts)
        value = supported / total if mode == "claims" else (1.0 if supported == total else 0.0)
        text = (
            f"{supported} of {total} claims supported, {unsupported} unsupported, "
            f"{contradicted} contradicted (mode {mode})"
        )
        if tally.overruled:
            text += f"; {tally.overruled} verdict(s) overruled to unsupported (evidence not in the documents)"
        score = Score.judged(
            name,
            value,
            threshold,
            explanation=explain(text, fenced),
            items=tally.items,
            label="hallucination" if contradicted else None,
        )
        return with_judge(score, fields)

    return evaluate


def _judge(
    client: JudgeClient, name: str, min: float | None, mode: str | None, options: dict[str, Any]
) -> Evaluator:
    return make_judge_faithfulness(client, min, mode=mode or "claims", name=name)


METRIC = Metric(
    name=NAME,
    doc="Whether the answer is supported by the retrieved documents (claim by claim).",
    evaluates="generation",
    order=10,
    build=_build,
    options=FaithfulnessOptions,
    aliases=ALIASES,
    judge=JudgeVariant(_judge, modes=MODES),
)
