"""The judge stage: judge evaluators on judge-sampled traces, off the ingest and assembly paths.

Its work list is the store: the assembler marks a judge-sampled trace `judge_status = 'pending'`
in the transaction that stores it, and this stage stores the judge's scores and marks the trace
`done` in one transaction. So a trace complete before a crash is judged after the restart, and
once: a trace is never `done` without its scores, and never pending with them.

One thread takes up to `scoring.judge_queue` pending traces from the store, reads and maps them
again, asks the budget (`sampling.budget`), and hands one task per (trace, judge evaluator) to a
pool of `judge.max_concurrency` threads; finished traces are stored together every
`scoring.judge_poll_interval`. A trace re-assembled while it was judged (a late span) is judged
again at its new revision; the stale result is dropped by the store.

A judge that is down fails closed: each evaluation is an `error` score with the reason (timeout,
connection, ...), stored like any other; ingestion, assembly and deterministic scoring go on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa

from collector.lifecycle import Component, remaining
from collector.processors.config import ScoringConfig
from collector.processors.judge_input import judge_trace
from collector.processors.redaction import Redactor
from collector.processors.sampler import JudgeBudget
from collector.processors.scoring import ScoreRows, record_metrics, score_rows
from collector.schema.span_records import records_by_trace, span_records
from collector.store.base import JudgeQueue
from collector.store.health import log_failure
from collector.telemetry import Metrics
from evaluators.metric import Evaluator
from evaluators.scores import Score
from semconv import RagTrace
from semconv.options import DEFAULT_OPTIONS, MappingOptions

log = logging.getLogger(__name__)


@dataclass
class _Work:
    trace: RagTrace
    revision: int
    scores: list[Score | None]
    left: int
    received_us: int | None = None
    reason: str = "sampled"  # the sampling reason the assembler stored


@dataclass
class JudgeHealth:
    """The judge's pre-run check, for `/healthz`: None until it has run."""

    model: str
    ok: bool | None = None
    error: str | None = None
    checked_at: float | None = None

    def as_dict(self) -> dict[str, object]:
        return {"model": self.model, "ok": self.ok, "error": self.error}


class JudgeStage(Component):
    """Runs the judge evaluators on the store's pending traces (see the module docstring)."""

    name = "judge-stage"

    def __init__(
        self,
        store: JudgeQueue,
        evaluators: Sequence[tuple[str, Evaluator]],
        config: ScoringConfig,
        budget: JudgeBudget,
        max_concurrency: int,
        metrics: Metrics,
        export_events: bool,
        clock: Callable[[], float] = time.monotonic,
        redactor: Redactor | None = None,
        mapping: MappingOptions = DEFAULT_OPTIONS,
    ) -> None:
        self._store = store
        self._mapping = mapping  # `mapping:`: the traces are mapped again as the assembler mapped them
        # `redaction.apply_to: [judge]`: the traces are mapped from redacted copies of their spans.
        self._redactor = redactor
        # (score name, evaluator): the name labels the error score of an evaluator that raised.
        self._evaluators = list(evaluators)
        self._config = config
        self._metrics = metrics
        self._export_events = export_events
        self._clock = clock
        self._budget = budget
        self._pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="ragpulse-judge-call")
        self._lock = threading.Lock()
        self._taken: dict[str, _Work] = {}  # trace id -> work in progress
        self._done: list[_Work] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ragpulse-judge", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, deadline: float | None = None) -> None:
        """Stop taking work and store what is finished (within 10 s, and not past `deadline`);
        traces still being judged stay pending in the store and are judged again after the next
        start."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(remaining(deadline, 10.0))
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.run_round()
            except Exception:
                log_failure(
                    log,
                    self._store,
                    "judge",
                    "judge round failed; its traces stay pending and are retried",
                )
            self._stopping.wait(self._config.judge_poll_interval)
        try:
            self._store_finished()
        except Exception:
            log_failure(
                log,
                self._store,
                "judge",
                "storing judge scores at stop failed; the traces stay pending",
            )

    def run_round(self) -> int:
        """Store finished traces, then take new pending ones. Returns how many were stored."""
        stored = self._store_finished()
        self._take_work()
        return stored

    def _take_work(self) -> None:
        with self._lock:
            taken = list(self._taken)
        room = self._config.judge_queue - len(taken)
        if room <= 0 or not self._evaluators:
            return
        pending = self._store.pending_judge_work(room, exclude=taken)
        if not pending.num_rows:
            return
        refused: dict[str, list[str]] = {}
        for work in self._load(pending):
            reason = self._budget.admit(len(self._evaluators), self._clock())
            if reason is not None:
                refused.setdefault(reason, []).append(work.trace.trace_id)
                continue
            # A judge decision is counted here, once the budget let it stand (see `record_metrics`).
            self._metrics.sampling_decisions.labels("judge", work.reason).inc()
            with self._lock:
                self._taken[work.trace.trace_id] = work
            for index, (_, evaluate) in enumerate(self._evaluators):
                future = self._pool.submit(evaluate, work.trace)
                future.add_done_callback(_Callback(self, work, index))
        self._metrics.judge_queue.set(len(self._taken))
        for reason, trace_ids in refused.items():
            self._store.skip_judge_work(trace_ids, reason)
            self._metrics.sampling_decisions.labels("deterministic", reason).inc(len(trace_ids))

    def _load(self, pending: pa.Table) -> list[_Work]:
        """The pending traces mapped again from their stored spans, with the expectations the
        assembler stored (their own, or their golden case's)."""
        rows = {row["trace_id"]: row for row in pending.to_pylist()}
        spans, events = self._store.read_spans(rows)
        # A chat turn is judged with the turns of its session before it (`scoring.conversation_turns`).
        earlier = self._store.earlier_turns(list(rows), self._config.conversation_turns)
        works = []
        for trace_id, records in records_by_trace(span_records(spans, events)).items():
            row = rows[trace_id]
            trace = judge_trace(
                records,
                row["expected_answer"],
                row["expected_documents"],
                self._mapping,
                self._redactor,
                earlier.get(trace_id, ()),
            )
            received = max((r.end_us or 0 for r in records), default=None)
            n = len(self._evaluators)
            revision = int(row["assembly_count"] or 1)
            works.append(_Work(trace, revision, [None] * n, n, received, row["sample_reason"] or "sampled"))
        return works

    def _finished(self, work: _Work, index: int, future: Future[Score]) -> None:
        if future.cancelled():  # stopping: the trace stays pending in the store
            return
        try:
            score = future.result()
        except Exception as exc:  # a scorer bug: fail closed, never a missing or passing score
            log.exception("judge evaluator failed on trace %s", work.trace.trace_id)
            name = self._evaluators[index][0]
            score = Score.fail_error(name, "evaluator_error", f"the evaluator raised {exc!r}")
        self._count(score)
        with self._lock:
            work.scores[index] = score
            work.left -= 1
            if work.left == 0:
                self._done.append(work)

    def _count(self, score: Score) -> None:
        self._metrics.judge_calls.labels("error" if score.status == "error" else "ok").inc()
        self._metrics.judge_tokens.labels("input").inc(score.judge_input_tokens or 0)
        self._metrics.judge_tokens.labels("output").inc(score.judge_output_tokens or 0)
        if score.latency_ms is not None:
            self._metrics.judge_seconds.observe(score.latency_ms / 1000)
        self._budget.used_tokens(score.judge_tokens, self._clock())

    def _store_finished(self) -> int:
        with self._lock:
            done, self._done = self._done, []
        if not done:
            return 0
        now_us = int(time.time() * 1_000_000)
        scored = [(w.trace, w.revision, [s for s in w.scores if s is not None]) for w in done]
        rows = score_rows(scored, "judge", now_us, self._export_events) if scored else ScoreRows.empty()
        revisions = pa.table(
            {
                "trace_id": pa.array([w.trace.trace_id for w in done], pa.string()),
                "revision": pa.array([w.revision for w in done], pa.int32()),
            }
        )
        try:
            stored = self._store.write_judge_scores(revisions, rows.scores, rows.outbox)
        finally:
            with self._lock:
                for work in done:
                    self._taken.pop(work.trace.trace_id, None)
                self._metrics.judge_queue.set(len(self._taken))
        record_metrics(self._metrics, rows.scores, "judge", now_us, received_us=[w.received_us for w in done])
        return stored


class _Callback:
    """`future.add_done_callback` target carrying which trace and evaluator the future is."""

    def __init__(self, stage: JudgeStage, work: _Work, index: int) -> None:
        self._stage, self._work, self._index = stage, work, index

    def __call__(self, future: Future[Score]) -> None:
        self._stage._finished(self._work, self._index, future)
