"""A rescore run: the stored traces of a scope scored again, batch by batch, in cursor order.

Each batch (the scope's next traces by start time and trace id) is read from the store, mapped again
from its spans, scored by the deterministic evaluators asked for (in worker processes) and by the
judge evaluators asked for on the traces the judge takes (those it judged before, or `judge_rate` of
them by trace-id hash), and written in one transaction with the run's cursor
(`RescoreBook.write_rescore`): the new rows in place of the ones they replace, which move to
`score_history`. A run stopped or killed goes on, when the same request is made again, from the
last batch it stored: no trace is scored twice, none is skipped. The judge keeps to
`sampling.budget`: a run waits for the budget rather than skip traces.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from collector.processors.judge_input import judge_trace
from collector.processors.sampler import JudgeBudget, trace_hash
from collector.processors.scoring import ScoreRows, ScoringSetup, score_rows
from collector.rescore.deterministic import DeterministicScorer, DeterministicSetup, TraceInputs
from collector.rescore.request import RescoreRequest
from collector.schema.span_records import records_by_trace, span_records
from collector.schema.tables import RESCORE_RUNS
from collector.schema.windows import utc_now
from collector.store.base import RescoreBook, RescoreScope
from evaluators.metric import Evaluator
from evaluators.scores import Score
from semconv.options import DEFAULT_OPTIONS, MappingOptions

if TYPE_CHECKING:
    from collector.processors.redaction import Redactor

log = logging.getLogger(__name__)

# Traces per batch when the judge scores, per judge call slot (its calls are the slow part: a batch is
# a few rounds of them); without the judge, `scoring.rescore_batch`.
JUDGE_BATCH_PER_SLOT = 4
# A run marked `running` whose progress is older than this is taken up by the same request: its
# process died (on a file, a process that opens it marks such runs stopped at once).
LEASE_SECONDS = 900.0
_HASH_SCALE = 1 << 64


class RescoreError(ValueError):
    """A request that cannot run here (an unknown score name, a judge score without a judge, ...)."""


class RescoreBusy(RescoreError):
    """A run is in progress already (its id in the message)."""


class Stopped(Exception):
    """The run was asked to stop; what it stored stays, and the same request goes on from there."""


@dataclass
class Plan:
    """What a request scores: its scope, and the score names by who gives them."""

    request: RescoreRequest
    scope: RescoreScope
    deterministic: list[dict[str, Any]]  # the evaluator entries
    judged: list[str]  # the score names the judge gives

    @property
    def names(self) -> list[str]:
        return [str(e["name"]) for e in self.deterministic] + self.judged


@dataclass
class Estimate:
    """A dry run's answer: what a real run would do, and what it would cost."""

    window_start: datetime
    window_end: datetime
    traces: int
    judged_traces: int
    evaluators: list[str]
    judge_evaluators: list[str]
    deterministic_scores: int
    judge_calls: int
    input_tokens: int | None  # None: no judge call of these names in the window to go by
    output_tokens: int | None
    cost_usd: float | None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "dry_run": True}


@dataclass
class Progress:
    """A run as it goes (what the progress bar and the dashboard show)."""

    run_id: str
    status: str
    traces_total: int
    traces_done: int = 0
    traces_judged: int = 0
    scores_written: int = 0
    scores_replaced: int = 0
    resumed: bool = False
    waiting: str | None = None  # `throttled` / `over_budget` while the judge's budget holds it
    error: str | None = None
    evaluators: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _InFlight:
    """A batch being scored: its traces' inputs, the cursor at its last trace, the deterministic
    scores still in the workers, the judge's scores and tokens."""

    inputs: TraceInputs
    cursor: tuple[datetime, str]
    first_start: datetime  # the batch's first trace's start (its last's is the cursor's)
    pending: list[Future[ScoreRows]] = field(default_factory=list)
    parts: list[ScoreRows] = field(default_factory=list)
    judged: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=lambda: [0, 0])


@dataclass
class JudgeParts:
    """The judge a rescore uses: its evaluators (score name, evaluator), the shared budget, and how
    many calls at once."""

    evaluators: list[tuple[str, Evaluator]]
    budget: JudgeBudget
    max_concurrency: int
    conversation_turns: int = 3
    redactor: Redactor | None = None


@dataclass
class Rescorer:
    """Runs rescore requests on `store` with the configured evaluators (`setup`), the judge's
    (`judge`, None without one), `workers` processes for the deterministic ones."""

    store: RescoreBook
    setup: ScoringSetup
    judge: JudgeParts | None = None
    mapping: MappingOptions = DEFAULT_OPTIONS
    workers: int = 2
    niceness: int = 10
    batch: int = 1000  # traces per batch (`scoring.rescore_batch`)
    # After each stored batch (the command line: compute its sessions again, no refresher runs there).
    after_batch: Callable[[], object] | None = None
    prices: Callable[[int, int], float | None] = lambda i, o: None
    clock: Callable[[], float] = time.monotonic

    # ------------------------------------------------------------------ the plan

    def plan(self, request: RescoreRequest) -> Plan:
        """The request checked against the configured evaluators (`evaluators:`, and which of them
        the judge gives): RescoreError when it names a score no configured evaluator gives."""
        deterministic = {str(e["name"]): e for e in self.setup.deterministic_entries}
        judged = [str(e["name"]) for e in self.setup.judge_entries]
        wanted = list(dict.fromkeys(request.evaluators)) or [*deterministic, *judged]
        unknown = [n for n in wanted if n not in deterministic and n not in judged]
        if unknown:
            known = ", ".join([*deterministic, *judged]) or "none"
            raise RescoreError(f"no configured evaluator gives {', '.join(unknown)}; configured: {known}")
        return Plan(
            request,
            request.scope(),
            [deterministic[n] for n in wanted if n in deterministic],
            [n for n in wanted if n in judged],
        )

    def _judge_evaluators(self, plan: Plan) -> list[tuple[str, Evaluator]]:
        built = dict(self.judge.evaluators) if self.judge else {}
        missing = [n for n in plan.judged if n not in built]
        if missing:
            raise RescoreError(f"{', '.join(missing)}: given by the judge, which is not set up here")
        return [(n, built[n]) for n in plan.judged]

    def estimate(self, request: RescoreRequest) -> Estimate:
        """What `request` would do, read from the store; nothing is written."""
        plan = self.plan(request)
        totals = self.store.count_rescore_scope(plan.scope)
        judge_names = plan.judged
        if not judge_names:
            judged = 0
        elif request.judge_rate is None:
            judged = totals.judged
        else:
            judged = round(totals.traces * request.judge_rate)
        means = self.store.judge_token_means(plan.scope, judge_names)
        known = [means[n] for n in judge_names if n in means]
        input_tokens = output_tokens = None
        if known or not judge_names:
            # A name the window has no call of is taken at the mean of the others.
            fallback = (
                (sum(m[0] for m in known) / len(known), sum(m[1] for m in known) / len(known))
                if known
                else (0.0, 0.0)
            )
            per = [means.get(n, fallback) for n in judge_names]
            input_tokens = round(judged * sum(p[0] for p in per))
            output_tokens = round(judged * sum(p[1] for p in per))
        cost = (
            self.prices(input_tokens, output_tokens)
            if input_tokens is not None and output_tokens is not None
            else None
        )
        return Estimate(
            window_start=plan.scope.start,
            window_end=plan.scope.end,
            traces=totals.traces,
            judged_traces=judged,
            evaluators=[str(e["name"]) for e in plan.deterministic],
            judge_evaluators=judge_names,
            deterministic_scores=totals.traces * len(plan.deterministic),
            judge_calls=judged * len(judge_names),
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd=cost,
        )

    # ------------------------------------------------------------------ a run

    def start(
        self, request: RescoreRequest, origin: str
    ) -> tuple[Plan, Progress, tuple[datetime, str] | None]:
        """The run of `request`: the unfinished one of the same request, taken up where it stopped,
        or a new one (its window resolved now, its traces counted)."""
        plan = self.plan(request)
        self._judge_evaluators(plan)  # refused before a run is recorded
        identity = request.identity()
        found = self.store.find_rescore_run(identity)
        if found is not None:
            plan.scope = RescoreScope(
                found["window_start"], found["window_end"], plan.scope.service, plan.scope.slice
            )
            stale_before = utc_now() - timedelta(seconds=LEASE_SECONDS)
            if not self.store.claim_rescore_run(found["run_id"], stale_before):
                raise RescoreBusy(
                    f"rescore run {found['run_id']} is in progress in another process (progress at "
                    f"{found['updated_at']:%Y-%m-%d %H:%M:%S} UTC); if that process died, the same request "
                    f"takes it up {LEASE_SECONDS // 60:.0f} minutes after its last progress"
                )
            cursor = (found["cursor_start"], found["cursor_trace"]) if found["cursor_trace"] else None
            progress = Progress(
                found["run_id"],
                "running",
                int(found["traces_total"] or 0),
                int(found["traces_done"] or 0),
                int(found["traces_judged"] or 0),
                int(found["scores_written"] or 0),
                int(found["scores_replaced"] or 0),
                resumed=True,
                evaluators=plan.names,
            )
            return plan, progress, cursor
        run_id = f"rescore-{utc_now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
        total = self.store.count_rescore_scope(plan.scope).traces
        now = utc_now()
        row = {
            "run_id": run_id,
            "status": "running",
            "request": identity,
            "window_start": plan.scope.start,
            "window_end": plan.scope.end,
            "evaluators": plan.names,
            "origin": origin,
            "traces_total": total,
            "started_at": now,
            "updated_at": now,
            **dict.fromkeys(_COUNTS, 0),
        }
        self.store.open_rescore_run(RESCORE_RUNS.rows_table([row]))
        return plan, Progress(run_id, "running", total, evaluators=plan.names), None

    def run(
        self,
        request: RescoreRequest,
        origin: str = "cli",
        on_progress: Callable[[Progress], None] = lambda p: None,
        stop: threading.Event | None = None,
        started: tuple[Plan, Progress, tuple[datetime, str] | None] | None = None,
    ) -> Progress:
        """Run `request` to its end (or until `stop` is set): see the module docstring."""
        plan, progress, cursor = started or self.start(request, origin)
        judged = self._judge_evaluators(plan)
        stop = stop or threading.Event()
        on_progress(progress)
        scorer = None
        if plan.deterministic:
            export = self.setup.export_events
            scorer = DeterministicScorer(
                DeterministicSetup(plan.deterministic, self.mapping, export), self.workers, self.niceness
            )
        calls, size = None, self.batch
        if judged and self.judge is not None:
            calls = ThreadPoolExecutor(self.judge.max_concurrency, "ragpulse-rescore-judge")
            size = min(self.batch, JUDGE_BATCH_PER_SLOT * self.judge.max_concurrency)
        # Two batches at a time: the next one is read and scored in the workers while the last one
        # is written (the write is a third of the time; bench/README.md, "Rescore").
        stored: _InFlight | None = None
        try:
            try:
                while not stop.is_set():
                    batch = self.store.next_rescore_batch(plan.scope, cursor, size)
                    flight = None
                    if batch.num_rows:
                        flight = self._begin(plan, judged, progress, batch, scorer, calls, stop, on_progress)
                        cursor = flight.cursor
                    if stored is not None:
                        self._store(stored, progress, on_progress)
                    stored = flight
                    if flight is None:
                        break
            except Stopped:  # while the next batch waited for the judge's budget
                pass
            if stored is not None:  # scored whole (its judge calls made): stored, not thrown away
                self._store(stored, progress, on_progress)
            progress.status = "stopped" if stop.is_set() else "done"
        except KeyboardInterrupt:  # Ctrl-C on the command: what was stored stays
            progress.status = "stopped"
            self._end(progress)
            raise
        except BaseException as exc:
            progress.status, progress.error = "failed", f"{type(exc).__name__}: {exc}"
            self._end(progress)
            raise
        finally:
            if scorer is not None:
                scorer.close()
            if calls is not None:
                calls.shutdown(wait=False, cancel_futures=True)
        self._end(progress)
        on_progress(progress)
        return progress

    def _end(self, progress: Progress) -> None:
        try:
            self.store.set_rescore_status(progress.run_id, progress.status, progress.error)
        except Exception:  # the run's own failure is what the caller is told
            log.exception("could not record rescore run %s as %s", progress.run_id, progress.status)

    def _begin(
        self,
        plan: Plan,
        judged_by: list[tuple[str, Evaluator]],
        progress: Progress,
        batch: pa.Table,
        scorer: DeterministicScorer | None,
        calls: ThreadPoolExecutor | None,
        stop: threading.Event,
        on_progress: Callable[[Progress], None],
    ) -> _InFlight:
        """Read one batch's spans and start scoring it: the deterministic scores in the workers (not
        waited for), the judge's (waited for, within the budget)."""
        rows = batch.to_pylist()
        inputs: TraceInputs = {
            r["trace_id"]: (int(r["assembly_count"] or 1), r["expected_answer"], r["expected_documents"])
            for r in rows
        }
        spans, events = self.store.read_spans(list(inputs))
        now_us = int(time.time() * 1_000_000)
        flight = _InFlight(inputs, (rows[-1]["start_time"], rows[-1]["trace_id"]), rows[0]["start_time"])
        if scorer is not None:
            flight.pending = scorer.submit(scorer.split(spans, events, inputs, now_us, progress.run_id))
        flight.judged = [r["trace_id"] for r in rows if self._judges(plan.request, r)] if plan.judged else []
        if flight.judged and calls is not None:
            judged = self._judge(
                judged_by,
                flight.judged,
                inputs,
                spans,
                events,
                now_us,
                progress,
                calls,
                stop,
                on_progress,
                flight.tokens,
            )
            flight.parts.append(judged)
        return flight

    def _store(self, flight: _InFlight, progress: Progress, on_progress: Callable[[Progress], None]) -> None:
        """Wait for a batch's scores and store them with the cursor at its last trace."""
        parts = flight.parts + [future.result() for future in flight.pending]
        scores = pa.concat_tables([p.scores for p in parts]) if parts else ScoreRows.empty().scores
        outbox = pa.concat_tables([p.outbox for p in parts]) if parts else ScoreRows.empty().outbox
        n = len(flight.inputs)
        revisions = pa.table(
            {
                "trace_id": pa.array(list(flight.inputs), pa.string()),
                "revision": pa.array([v[0] for v in flight.inputs.values()], pa.int32()),
                # The batch's start times bound the store's look-ups of its traces.
                "start_time": pa.array(
                    [flight.first_start] * (n - 1) + [flight.cursor[0]], pa.timestamp("us")
                ),
            }
        )
        counts = {
            "traces_done": len(flight.inputs),
            "traces_judged": len(flight.judged),
            "judge_input_tokens": flight.tokens[0],
            "judge_output_tokens": flight.tokens[1],
        }
        written, replaced = self.store.write_rescore(
            progress.run_id, revisions, scores, outbox, flight.cursor, counts
        )
        progress.traces_done += len(flight.inputs)
        progress.traces_judged += len(flight.judged)
        progress.scores_written += written
        progress.scores_replaced += replaced
        progress.waiting = None
        if self.after_batch is not None:
            self.after_batch()
        on_progress(progress)

    @staticmethod
    def _judges(request: RescoreRequest, row: dict[str, Any]) -> bool:
        """Whether the judge scores this trace again: at `judge_rate` by trace-id hash (the sampler's
        hash: the same traces every time), else the traces it judged before."""
        if request.judge_rate is None:
            return bool(row["judge_status"] == "done")
        return trace_hash(row["trace_id"]) < request.judge_rate * _HASH_SCALE

    def _judge(
        self,
        evaluators: list[tuple[str, Evaluator]],
        trace_ids: Sequence[str],
        inputs: TraceInputs,
        spans: pa.Table,
        events: pa.Table,
        now_us: int,
        progress: Progress,
        calls: ThreadPoolExecutor,
        stop: threading.Event,
        on_progress: Callable[[Progress], None],
        tokens: list[int],
    ) -> ScoreRows:
        """The judge evaluators' scores of these traces, within the budget (waiting for it)."""
        assert self.judge is not None
        judge = self.judge
        wanted = set(trace_ids)
        earlier = self.store.earlier_turns(list(trace_ids), judge.conversation_turns)
        records = {t: r for t, r in records_by_trace(span_records(spans, events)).items() if t in wanted}
        futures = []
        for trace_id, trace_records in records.items():
            revision, expected_answer, expected_documents = inputs[trace_id]
            trace = judge_trace(
                trace_records,
                expected_answer,
                expected_documents,
                self.mapping,
                judge.redactor,
                earlier.get(trace_id, ()),
            )
            submitted = []
            for (
                name,
                evaluate,
            ) in evaluators:  # one call at a time: a budget below the evaluators' count still admits
                self._wait_for_budget(1, progress, stop, on_progress)
                submitted.append(calls.submit(_judged, name, evaluate, trace))
            futures.append((trace, revision, submitted))
        scored = []
        for trace, revision, pending in futures:
            scores = [f.result() for f in pending]
            for score in scores:
                tokens[0] += score.judge_input_tokens or 0
                tokens[1] += score.judge_output_tokens or 0
                judge.budget.used_tokens(score.judge_tokens, self.clock())
            scored.append((trace, revision, scores))
        return score_rows(scored, "judge", now_us, self.setup.export_events, None, progress.run_id)

    def _wait_for_budget(
        self, calls: int, progress: Progress, stop: threading.Event, on_progress: Callable[[Progress], None]
    ) -> None:
        assert self.judge is not None
        while (reason := self.judge.budget.admit(calls, self.clock())) is not None:
            if progress.waiting != reason:
                progress.waiting = reason
                on_progress(progress)
            if stop.wait(1.0):
                raise Stopped()
        if stop.is_set():
            raise Stopped()


def _judged(name: str, evaluate: Evaluator, trace: Any) -> Score:
    """One judge evaluation; an evaluator that raises fails closed, as in the judge stage."""
    try:
        return evaluate(trace)
    except Exception as exc:
        log.exception("judge evaluator %s failed on trace %s", name, trace.trace_id)
        return Score.fail_error(name, "evaluator_error", f"the evaluator raised {exc!r}")


_COUNTS = (
    "traces_done",
    "traces_judged",
    "scores_written",
    "scores_replaced",
    "judge_input_tokens",
    "judge_output_tokens",
)
