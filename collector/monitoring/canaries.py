"""Judge drift canaries (`monitoring.canaries`): does the judge still judge as it did?

Every `every` seconds, `sample` (case, evaluator) pairs of a calibration file, whose verdicts are
known, are judged again. The pairs are the same every run (chosen by a stable hash), so two runs
compare like with like. Each run records, in `canary_runs`:
- its accuracy: judged status equal to the known verdict, over every pair (an error is never correct);
- its verdict distribution per evaluator;
- its shift: the share of pairs whose verdict differs from the first run's.

Two alerts follow each run: `<name>-accuracy` fires when accuracy drops below `min_accuracy`, and
`<name>-shift` fires when the shift exceeds `max_shift`. A shift can catch a model updated behind
the same name, or a provider change, even while accuracy holds. The calls count against the judge
budget (`sampling.budget`). A run the budget refuses is recorded as `throttled` or `over_budget`,
and no alert is evaluated for it.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from collector.background import BackgroundWorker
from collector.config_base import ConfigError
from collector.monitoring.alerts import AlertSpec, Observation
from collector.monitoring.config import CanaryConfig
from collector.monitoring.evaluator import AlertBook
from collector.processors.sampler import JudgeBudget
from collector.schema.tables import CANARY_RUNS
from collector.schema.windows import utc_now
from collector.store.base import AlertLog
from collector.store.health import log_failure
from collector.telemetry import Metrics
from evaluators.calibration import CalibrationCase, CalibrationSet, load_calibration
from evaluators.parallel import map_in_order
from evaluators.scores import Score
from evaluators.suite import SuiteError, case_trace
from semconv.models import RagTrace

log = logging.getLogger(__name__)

Evaluator = Callable[[RagTrace], Score]


@dataclass(frozen=True)
class CanaryPair:
    case: CalibrationCase
    evaluator: str

    @property
    def key(self) -> str:
        return f"{self.case.name}/{self.evaluator}"


def canary_pairs(calibration: CalibrationSet, size: int) -> list[CanaryPair]:
    """`size` (case, evaluator) pairs with known verdicts, the same for the same file whatever the
    run: ordered by a hash of their names (a spread over the file, not its first cases)."""
    pairs = [CanaryPair(case, name) for case in calibration.cases for name in sorted(case.verdicts)]
    pairs.sort(key=lambda p: hashlib.sha256(p.key.encode()).hexdigest())
    return pairs[:size]


@dataclass
class CanaryOutcome:
    pairs: int
    correct: int
    errors: int
    pass_share: float | None
    shift: float | None
    verdicts: dict[str, dict[str, int]]
    results: list[dict[str, str]]

    @property
    def accuracy(self) -> float:
        return self.correct / self.pairs if self.pairs else 0.0


def outcome(
    pairs: list[CanaryPair], scores: list[Score], reference: Mapping[str, str] | None
) -> CanaryOutcome:
    """Accuracy, verdict distribution and shift (against `reference`: pair key -> status of the
    first run) of one run."""
    results = []
    verdicts: dict[str, dict[str, int]] = {}
    for pair, score in zip(pairs, scores, strict=True):
        judged = score.status if score.status in ("pass", "fail") else "error"
        known = pair.case.verdicts[pair.evaluator]
        results.append(
            {"case": pair.case.name, "evaluator": pair.evaluator, "known": known, "judged": judged}
        )
        counts = verdicts.setdefault(pair.evaluator, {"pass": 0, "fail": 0, "error": 0})
        counts[judged] += 1
    decided = [r for r in results if r["judged"] != "error"]
    pass_share = sum(r["judged"] == "pass" for r in decided) / len(decided) if decided else None
    shift = None
    if reference:
        compared = [r for r in decided if reference.get(f"{r['case']}/{r['evaluator']}") in ("pass", "fail")]
        if compared:
            changed = sum(reference[f"{r['case']}/{r['evaluator']}"] != r["judged"] for r in compared)
            shift = changed / len(compared)
    return CanaryOutcome(
        pairs=len(results),
        correct=sum(r["judged"] == r["known"] for r in results),
        errors=sum(r["judged"] == "error" for r in results),
        pass_share=pass_share,
        shift=shift,
        verdicts=verdicts,
        results=results,
    )


_NOT_LEADER_WAIT = 10.0  # seconds between two looks at whether this replica leads now


class CanaryRunner(BackgroundWorker):
    """Runs the canaries on their own thread; `run_once` is one run."""

    def __init__(
        self,
        store: AlertLog,
        config: CanaryConfig,
        judge_model: str,
        build: Callable[[Mapping[str, Any]], Evaluator],
        budget: JudgeBudget,
        book: AlertBook,
        metrics: Metrics,
        workers: int,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._store = store
        self._config = config
        self._model = judge_model
        try:
            calibration = load_calibration(Path(config.cases))
        except SuiteError as exc:
            raise ConfigError(f"monitoring.canaries.cases: {exc}") from None
        self._pairs = canary_pairs(calibration, config.sample)
        names = sorted({p.evaluator for p in self._pairs})
        self._evaluators = {name: build({"name": name, "judge": True}) for name in names}
        self._budget = budget
        self._book = book
        self._metrics = metrics
        self._workers = workers
        self._clock = clock
        self._specs = (
            AlertSpec(
                f"{config.name}-accuracy",
                config.severity,
                None,
                f"judge canary accuracy >= {config.min_accuracy:g}",
                config.every,
                tuple(config.notify),
            ),
            AlertSpec(
                f"{config.name}-shift",
                config.severity,
                None,
                f"judge verdicts unlike the first run's <= {config.max_shift:g}",
                config.every,
                tuple(config.notify),
            ),
        )
        super().__init__("ragpulse-canaries")

    def _run(self) -> None:
        while not self._stopping.is_set():
            wait = self._seconds_to_next_run()
            if wait > 0:
                self._stopping.wait(wait)
                continue
            try:
                if not self._store.is_leader():  # one replica runs them for all
                    self._stopping.wait(_NOT_LEADER_WAIT)
                    continue
                self.run_once()
            except Exception:
                log_failure(
                    log,
                    self._store,
                    "canaries",
                    "the judge canary run failed; retrying at the next one",
                )
                self._stopping.wait(self._config.every)

    def _seconds_to_next_run(self) -> float:
        """A restart does not run the canaries again before `every` has passed since the last run."""
        runs = self._store.read_canary_runs()
        if not runs.num_rows:
            return 0.0
        last = runs["started_at"][-1].as_py()
        return (last + timedelta(seconds=self._config.every) - self._clock()).total_seconds()

    def run_once(self) -> dict[str, Any]:
        """Judge the pairs (if the budget lets them), record the run, and the alerts' observations."""
        started = self._clock()
        row: dict[str, Any] = {
            "run_id": secrets.token_hex(8),
            "started_at": started,
            "judge_model": self._model,
        }
        refused = self._budget.admit(len(self._pairs), time.monotonic())
        if refused is not None:
            log.warning("judge canary run skipped: %s", refused)
            row.update(status=refused, finished_at=self._clock(), pairs=0)
            self._write(row)
            self._metrics.canary_runs.labels(refused).inc()
            return row
        scores = map_in_order(self._judge, list(range(len(self._pairs))), self._workers)
        for score in scores:
            self._budget.used_tokens(score.judge_tokens, time.monotonic())
        result = outcome(self._pairs, scores, self._reference())
        row.update(
            status="done",
            finished_at=self._clock(),
            pairs=result.pairs,
            correct=result.correct,
            errors=result.errors,
            accuracy=result.accuracy,
            pass_share=result.pass_share,
            shift=result.shift,
            verdicts=orjson.dumps(result.verdicts).decode(),
            results=orjson.dumps(result.results).decode(),
        )
        self._write(row)
        self._metrics.canary_runs.labels("done").inc()
        self._metrics.canary_accuracy.set(result.accuracy)
        self._book.record(self._observations(result), row["finished_at"])
        return row

    def _judge(self, index: int) -> Score:
        pair = self._pairs[index]
        try:
            return self._evaluators[pair.evaluator](case_trace(pair.case))
        except Exception as exc:  # fail closed: a canary that could not judge is not correct
            log.exception("judge canary %s raised", pair.key)
            return Score.fail_error(pair.evaluator, "evaluator_error", f"the evaluator raised {exc!r}")

    def _reference(self) -> dict[str, str] | None:
        """The first completed run's verdict per pair."""
        for run in self._store.read_canary_runs().to_pylist():
            if run["status"] == "done" and run["results"]:
                return {f"{r['case']}/{r['evaluator']}": r["judged"] for r in orjson.loads(run["results"])}
        return None

    def _observations(self, result: CanaryOutcome) -> list[tuple[AlertSpec, Observation]]:
        accuracy, shift = self._specs
        config = self._config
        seen = [
            (
                accuracy,
                Observation(
                    None,
                    "firing" if result.accuracy < config.min_accuracy else "ok",
                    result.accuracy,
                    result.pairs,
                    f"judge {self._model}: {result.correct} of {result.pairs} canary verdicts right",
                ),
            )
        ]
        if result.shift is not None:
            seen.append(
                (
                    shift,
                    Observation(
                        None,
                        "firing" if result.shift > config.max_shift else "ok",
                        result.shift,
                        result.pairs,
                        f"judge {self._model}: {result.shift:.0%} of canary verdicts unlike the first run's",
                    ),
                )
            )
        return seen

    def _write(self, row: dict[str, Any]) -> None:
        self._store.write_canary_run(CANARY_RUNS.arrow_table({k: [v] for k, v in row.items()}, 1))
