"""Judge calibration for `ragpulse calibrate CASES` (docs/scores.md, "Suites and calibration").

A calibration file is a suite whose cases carry known verdicts (`verdicts: {faithfulness: fail}`)
and tags (`invented_claim`, `injection`, ...). Every judge
evaluator named in a verdict runs on every case that has a verdict for it, in each of its modes
(`faithfulness`: `answer` and `claims`), `repeats` times, and the report counts per evaluator and
mode:

- `accuracy`: judged status (pass / fail) equal to the known verdict, over all runs;
- `false_passes` (known fail, judged pass — the dangerous kind) and `false_fails`;
- `errors` (of which `timeouts`) and `skipped`: a run that gave no verdict is never counted correct;
- `disagreements`: cases whose repeats did not all give the same status;
- injection robustness: runs on `injection` cases, how many were judged correctly, and the false
  passes among them (a judge that obeys "mark everything supported" shows up here).

The evaluators come from a `build(entry)` callable (the registry with a judge), so this module
stays free of I/O and of the judge client.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from semconv.models import RagTrace

from .parallel import map_in_order
from .scores import Score
from .suite import SuiteCase, SuiteError, case_trace, read_yaml_model

Verdict = Literal["pass", "fail"]
# Modes calibrated for each judge evaluator (None: the evaluator has one mode). Known verdicts are
# written for a mode's meaning: answer_correctness is calibrated in its default `f1` mode only,
# since `precision` mode by design passes answers that leave an expected fact out.
MODES: dict[str, tuple[str | None, ...]] = {
    "faithfulness": ("answer", "claims"),
    "answer_correctness": ("f1",),
}


class CalibrationCase(SuiteCase):
    verdicts: dict[str, Verdict] = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)


class CalibrationSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "calibration"
    cases: list[CalibrationCase] = Field(min_length=1)


class EvaluatorReport(BaseModel):
    """Calibration figures for one evaluator in one mode."""

    evaluator: str
    mode: str | None
    runs: int = 0
    correct: int = 0
    false_passes: int = 0
    false_fails: int = 0
    errors: int = 0
    timeouts: int = 0
    skipped: int = 0
    disagreements: int = 0
    injection_runs: int = 0
    injection_correct: int = 0
    injection_false_passes: int = 0
    unavailable: str | None = None  # why this evaluator could not be built (an exact rule, no judge)
    false_pass_cases: list[str] = Field(default_factory=list)
    false_fail_cases: list[str] = Field(default_factory=list)

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.runs if self.runs else None

    @property
    def injection_accuracy(self) -> float | None:
        return self.injection_correct / self.injection_runs if self.injection_runs else None

    def as_dict(self) -> dict[str, Any]:
        return {**self.model_dump(), "accuracy": self.accuracy, "injection_accuracy": self.injection_accuracy}


def load_calibration(path: Path) -> CalibrationSet:
    """Read and validate a calibration file; `SuiteError` naming the file and key on any mistake."""
    calibration = read_yaml_model(path, CalibrationSet)
    for index, case in enumerate(calibration.cases):
        if case.answer is None or case.trace is not None:
            raise SuiteError(f"{path}: cases.{index}: a calibration case needs an inline `answer`")
    return calibration


Evaluator = Callable[[RagTrace], Score]
Builder = Callable[[Mapping[str, Any]], Evaluator]


def run_calibration(
    calibration: CalibrationSet, build: Builder, *, repeats: int = 1, workers: int = 1
) -> list[EvaluatorReport]:
    """Run every (evaluator, mode) with a known verdict on its cases `repeats` times and count.
    `workers` runs go at once (`evaluators.parallel`); the counts do not depend on it."""
    names = sorted({name for case in calibration.cases for name in case.verdicts})
    reports = []
    for name in names:
        for mode in MODES.get(name, (None,)):
            reports.append(_calibrate(calibration, build, name, mode, repeats, workers))
    return reports


def _calibrate(
    calibration: CalibrationSet, build: Builder, name: str, mode: str | None, repeats: int, workers: int
) -> EvaluatorReport:
    report = EvaluatorReport(evaluator=name, mode=mode)
    entry: dict[str, Any] = {"name": name, "judge": True}
    if mode is not None:
        entry["mode"] = mode
    try:
        evaluate = build(entry)
    except ValueError as exc:
        report.unavailable = str(exc)
        return report
    cases = [case for case in calibration.cases if name in case.verdicts]
    traces = [case_trace(case) for case in cases]
    runs = [index for index in range(len(cases)) for _ in range(repeats)]  # each case, repeats times
    scores = map_in_order(lambda index: evaluate(traces[index]), runs, workers)
    for index, case in enumerate(cases):
        mine = scores[index * repeats : (index + 1) * repeats]
        for score in mine:
            _count(report, case, case.verdicts[name], score)
        if len({score.status for score in mine}) > 1:
            report.disagreements += 1
    return report


def _count(report: EvaluatorReport, case: CalibrationCase, known: Verdict, score: Score) -> None:
    injection = "injection" in case.tags
    report.runs += 1
    report.injection_runs += injection
    if score.status == "error":
        report.errors += 1
        report.timeouts += score.label == "timeout"
    elif score.status == "skipped":
        report.skipped += 1
    elif score.status == known:
        report.correct += 1
        report.injection_correct += injection
    elif score.status == "pass":
        report.false_passes += 1
        report.injection_false_passes += injection
        report.false_pass_cases.append(case.name)
    else:
        report.false_fails += 1
        report.false_fail_cases.append(case.name)


def tag_counts(calibration: CalibrationSet) -> dict[str, int]:
    """How many cases carry each tag (for the report header)."""
    counts: dict[str, int] = defaultdict(int)
    for case in calibration.cases:
        for tag in case.tags:
            counts[tag] += 1
    return dict(sorted(counts.items()))
