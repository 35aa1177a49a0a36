"""People's verdicts as labelled cases: one verdict per trace and score out of several annotators'
(the majority; a tie is left out and counted), and the calibration file
`ragpulse datasets export --labels` writes (the format `ragpulse calibrate` reads:
`evaluators.calibration.CalibrationSet`). Pure logic: the reads are in `stored_traces.py`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from evaluators.calibration import CalibrationCase, CalibrationSet
from evaluators.suite import SuiteContext, SuiteTurn
from semconv.models import RagTrace

Verdict = Literal["pass", "fail"]
HUMAN_LABEL_TAG = "human_label"  # the tag of every exported case
# The evaluator of a judge's score. A deterministic evaluator scores under the same name (the traces
# `sampling.judge_rate` leaves to it): a verdict on its score says nothing of the judge.
JUDGE_EVALUATOR = "judge"


@dataclass(frozen=True)
class Label:
    """One person's verdict on one score of one trace (a row of `annotations`)."""

    trace_id: str
    name: str
    author: str
    human_status: Verdict
    comment: str | None = None
    queue: str | None = None
    score_status: str | None = None  # the judged score's status when the verdict was given
    score_evaluator: str | None = None  # the judged score's evaluator: judge or deterministic
    judge_model: str | None = None
    prompt_version: str | None = None
    created_at: str = ""  # ISO 8601, UTC: orders one trace's verdicts in time

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Label:
        """A label from a row of `store.reads.labels.labels_sql`."""
        return cls(
            trace_id=str(row["trace_id"]),
            name=str(row["name"]),
            author=str(row["author"] or ""),
            human_status=cast(Verdict, row["human_status"]),
            comment=row.get("comment") or None,
            queue=row.get("queue"),
            score_status=row.get("score_status"),
            score_evaluator=row.get("score_evaluator"),
            judge_model=row.get("judge_model"),
            prompt_version=row.get("prompt_version"),
            created_at=str(row.get("created_at") or ""),
        )


@dataclass(frozen=True)
class Consensus:
    """The people's verdict on one score of one trace: the majority of its labels."""

    trace_id: str
    name: str
    verdict: Verdict
    labels: tuple[Label, ...]

    @property
    def latest(self) -> Label:
        return max(self.labels, key=lambda label: (label.created_at, label.author))

    @property
    def judge_label(self) -> Label | None:
        """The latest verdict given on a copy of the judge's score (`score_evaluator = 'judge'`, with
        a model: a judge score decided by rule without a call, e.g. no documents, is not the
        model's); None when every verdict judged another evaluator's score of the same name."""
        judged = [
            label
            for label in self.labels
            if label.score_evaluator == JUDGE_EVALUATOR and label.judge_model is not None
        ]
        return max(judged, key=lambda label: (label.created_at, label.author)) if judged else None

    @property
    def judge_status(self) -> str | None:
        """The judge's score's status as the latest verdict on it saw it (pass, fail, error,
        skipped); None when no verdict was given on a judge's score (`judge_label`)."""
        label = self.judge_label
        return None if label is None else label.score_status

    @property
    def reason(self) -> str:
        """The comments of those who gave the majority verdict, each once, in time order."""
        agreeing = sorted(
            (label for label in self.labels if label.human_status == self.verdict),
            key=lambda label: (label.created_at, label.author),
        )
        return "; ".join(dict.fromkeys(label.comment.strip() for label in agreeing if label.comment))

    @property
    def queues(self) -> list[str]:
        return sorted({label.queue for label in self.labels if label.queue})


def consensus(labels: Iterable[Label]) -> tuple[list[Consensus], int]:
    """One verdict per trace and score: the majority of its labels. Returns (the verdicts, in trace
    and score order; how many trace-score pairs were a tie and left out)."""
    grouped: dict[tuple[str, str], list[Label]] = defaultdict(list)
    for label in labels:
        grouped[(label.trace_id, label.name)].append(label)
    decided, ties = [], 0
    for (trace_id, name), group in sorted(grouped.items()):
        passes = sum(label.human_status == "pass" for label in group)
        fails = len(group) - passes
        if passes == fails:
            ties += 1
            continue
        verdict: Verdict = "pass" if passes > fails else "fail"
        decided.append(Consensus(trace_id, name, verdict, tuple(group)))
    return decided, ties


@dataclass
class ExportCounts:
    """What went into a labels export, and what was left out and why."""

    labels: int = 0
    verdicts: dict[str, int] = field(default_factory=lambda: {"pass": 0, "fail": 0})
    cases: int = 0
    ties: int = 0
    gone: int = 0  # traces no longer stored (retention deletes traces, not labels)
    no_answer: int = 0  # traces without an answer: a calibration case needs one
    examples: int = 0  # verdicts on a trace that is a few-shot example of that score's judge


def calibration_set(
    labels: Sequence[Label],
    traces: Mapping[str, RagTrace],
    name: str = "human-labels",
    examples: Mapping[str, Collection[str]] | None = None,
) -> tuple[CalibrationSet | None, ExportCounts]:
    """The labelled traces as calibration cases, one per trace (named by its id), with the people's
    verdict for each score they labelled and the tags `human_label` and the queues the verdicts came
    from; None when no case is left.

    `examples` maps a score name to the traces that are few-shot examples of its judge
    (`judge.examples`): their verdicts on that score are left out (and counted), so that a judge is
    never measured on its own examples; a trace left with no verdict is no case."""
    decided, ties = consensus(labels)
    counts = ExportCounts(labels=len(labels), ties=ties)
    shown = examples or {}
    by_trace: dict[str, list[Consensus]] = defaultdict(list)
    for verdict in decided:
        if verdict.trace_id in shown.get(verdict.name, ()):
            counts.examples += 1
            continue
        by_trace[verdict.trace_id].append(verdict)
    cases = []
    for trace_id, verdicts in sorted(by_trace.items()):
        trace = traces.get(trace_id)
        if trace is None:
            counts.gone += 1
            continue
        if trace.answer is None:
            counts.no_answer += 1
            continue
        queues = sorted({queue for verdict in verdicts for queue in verdict.queues})
        for verdict in verdicts:
            counts.verdicts[verdict.verdict] += 1
        cases.append(
            CalibrationCase(
                name=trace_id,
                # A case needs a question; a trace without one is judged without it all the same.
                question=trace.question or "",
                contexts=[
                    SuiteContext(id=doc.id, text=doc.content or "", score=doc.score) for doc in trace.contexts
                ],
                expected=trace.expected_answer,
                expected_documents=trace.expected_documents,
                answer=trace.answer,
                conversation=[SuiteTurn(question=t.question, answer=t.answer) for t in trace.conversation]
                or None,
                verdicts={verdict.name: verdict.verdict for verdict in verdicts},
                tags=[HUMAN_LABEL_TAG, *queues],
            )
        )
    counts.cases = len(cases)
    return (CalibrationSet(name=name, cases=cases) if cases else None), counts


def calibration_yaml_data(calibration: CalibrationSet) -> dict[str, Any]:
    """The calibration set as the mapping its YAML file holds (unset keys left out)."""
    return calibration.model_dump(mode="json", exclude_none=True, exclude_defaults=True) | {
        "name": calibration.name
    }
