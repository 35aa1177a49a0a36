"""Alignment from corrections (`ragpulse align`, docs/feedback.md): few-shot examples for a judge
evaluator picked from people's corrections, and measured on labels they were not picked from.

1. `without_examples`: the traces that are already few-shot examples of the evaluator (the
   configured `judge.examples` file) are left out: the current prompt was shown them, so measuring
   it on them would flatter it, and a new example must not repeat one.
2. `split`: the labelled traces (one verdict per trace: `labelled.consensus`) into a training and a
   held-out part, `holdout` of each verdict's traces held out (stratified, so both parts have
   people's passes and fails in the same proportion), by a seeded shuffle.
3. `pick_examples`: among the training part's disagreements, where the judge's score said pass and
   the people fail (a missed failure) or the reverse (a false failure), up to `count` examples,
   alternating the two kinds while both last; within a kind, those with a comment (the reason the
   judge is shown) first, then in seeded random order. Only verdicts given on a judge's score count
   (`Consensus.judge_status`): a deterministic evaluator scores under the same name, and its
   mistakes are not the judge's. The held-out part may hold any labelled trace: it is judged again.
4. `measure`: the judge's verdicts on the held-out part against the people's, before and after:
   raw agreement and Cohen's κ with its 95 % interval (`agreement_stats`).

Pure logic: the command (`collector/cli/align.py`) reads the labels and traces and runs the judge.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, cast

from collector.feedback.agreement_stats import Confusion, kappa_figures
from collector.feedback.labelled import Consensus, Verdict
from evaluators.judge.asking import documents
from evaluators.judge.examples import MAX_EXAMPLE_DOCUMENTS, Example, ExampleDocument
from evaluators.scores import Score
from semconv.models import RagTrace


@dataclass(frozen=True)
class Split:
    """Labelled traces for picking examples (`train`) and for measuring them (`held_out`)."""

    train: list[Consensus]
    held_out: list[Consensus]


def without_examples(labelled: Sequence[Consensus], examples: Collection[str]) -> tuple[list[Consensus], int]:
    """The labelled traces that are not among `examples` (the trace ids of the evaluator's current
    few-shot examples), and how many were left out."""
    kept = [c for c in labelled if c.trace_id not in examples]
    return kept, len(labelled) - len(kept)


def split(labelled: Sequence[Consensus], holdout: float, seed: int) -> Split:
    """Hold out `holdout` (0 to 1) of the traces people passed, and of those they failed (rounded
    half up), chosen by a shuffle seeded with `seed`; each part in trace order."""
    if not 0.0 <= holdout <= 1.0:
        raise ValueError(f"holdout must be between 0 and 1, got {holdout}")
    rng = random.Random(seed)
    train: list[Consensus] = []
    held_out: list[Consensus] = []
    for verdict in ("pass", "fail"):
        group = sorted((c for c in labelled if c.verdict == verdict), key=lambda c: c.trace_id)
        rng.shuffle(group)
        count = int(len(group) * holdout + 0.5)
        held_out += group[:count]
        train += group[count:]
    return Split(sorted(train, key=lambda c: c.trace_id), sorted(held_out, key=lambda c: c.trace_id))


def missed_failures(labelled: Sequence[Consensus]) -> list[Consensus]:
    """Where the judge's score said pass and the people said fail (verdicts on a deterministic
    evaluator's score of the same name do not count: `Consensus.judge_status`)."""
    return [c for c in labelled if c.judge_status == "pass" and c.verdict == "fail"]


def false_failures(labelled: Sequence[Consensus]) -> list[Consensus]:
    """Where the judge's score said fail and the people said pass (as `missed_failures`)."""
    return [c for c in labelled if c.judge_status == "fail" and c.verdict == "pass"]


def pick_examples(train: Sequence[Consensus], count: int, seed: int) -> list[Consensus]:
    """Up to `count` disagreements of `train` (module docstring): missed failures and false failures
    in turn, starting with a missed failure (the dangerous kind), while both kinds last."""
    rng = random.Random(seed)
    kinds = []
    for kind in (missed_failures(train), false_failures(train)):
        ordered = sorted(kind, key=lambda c: c.trace_id)
        rng.shuffle(ordered)
        # A comment is the reason the judge is shown: examples with one teach more.
        ordered.sort(key=lambda c: not c.reason)
        kinds.append(ordered)
    picked: list[Consensus] = []
    turn = 0
    while len(picked) < count and any(kinds):
        kind = kinds[turn % 2] or kinds[(turn + 1) % 2]
        picked.append(kind.pop(0))
        turn += 1
    return picked


def example_of(labelled: Consensus, trace: RagTrace) -> Example:
    """A labelled trace as a few-shot example: the inputs a judge is given (its first
    `MAX_EXAMPLE_DOCUMENTS` documents: an example shows no more), the people's verdict and their
    comments as the reason (redacted as the trace is, when the labels were read:
    `stored_traces.read_labels`)."""
    judge = labelled.judge_status
    shown = documents(trace)[:MAX_EXAMPLE_DOCUMENTS]
    return Example(
        verdict=labelled.verdict,
        reason=labelled.reason,
        question=trace.question,
        documents=[ExampleDocument(id=doc_id, text=text) for doc_id, text in shown],
        answer=trace.answer,
        reference=trace.expected_answer,
        trace_id=labelled.trace_id,
        judge_verdict=cast(Verdict, judge) if judge in ("pass", "fail") else None,
    )


@dataclass(frozen=True)
class Measure:
    """A judge prompt's verdicts on the held-out labels."""

    prompt_version: str | None
    confusion: Confusion
    no_verdict: int  # judge errors and skipped scores: no pass or fail to compare
    calls: int  # evaluations that asked the judge (each one call, its retries not counted)

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompt_version": self.prompt_version,
            **kappa_figures(self.confusion),
            "no_verdict": self.no_verdict,
            "judge_calls": self.calls,
        }


def measure(scores: Sequence[Score], held_out: Sequence[Consensus]) -> Measure:
    """The judge's `scores` of the held-out traces (in their order) against the people's verdicts."""
    if len(scores) != len(held_out):
        raise ValueError("measure needs one score per held-out trace")
    pairs = [(score.status, labelled.verdict) for score, labelled in zip(scores, held_out, strict=True)]
    versions = Counter(score.prompt_version for score in scores if score.prompt_version)
    return Measure(
        prompt_version=versions.most_common(1)[0][0] if versions else None,
        confusion=Confusion.of(pairs),
        no_verdict=sum(score.status not in ("pass", "fail") for score in scores),
        calls=sum(score.prompt_version is not None for score in scores),
    )
