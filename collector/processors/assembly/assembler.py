"""The assembler thread: takes the batches the span writer committed, finds the traces that are
ready (`completeness`) and queues them with their held rows (`holding`, `ready`), makes jobs of
them (`ready`, `claims`), maps them (`workers`) and writes the results (`writing`), a round every
`poll_interval` seconds.

On start, traces whose spans were stored but not (or not completely) assembled, e.g. after a
crash, are assembled from the store (reason `recovery`); so are, once the store writes again,
those whose assembly failed while it could not.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime

from collector.lifecycle import Component, remaining
from collector.otlp.batch import SpanBatch
from collector.processors.assembly.cases import GoldenCases
from collector.processors.assembly.claims import Claims
from collector.processors.assembly.completeness import Completeness, History, Stage, TraceState
from collector.processors.assembly.holding import Holding, Inbound, inbound
from collector.processors.assembly.ready import JobPreparer, Queued, ReadyQueue, from_store, recovery
from collector.processors.assembly.workers import MappingWorkers, lower_thread_priority
from collector.processors.assembly.writing import JobsInFlight
from collector.processors.config import AssemblerConfig
from collector.processors.scoring import ScoringSetup
from collector.processors.slices import Dimension, SliceCaps
from collector.processors.spill import SpillDirectory
from collector.schema.span_records import SPAN_COLUMNS
from collector.schema.windows import utc_now
from collector.store.base import AssemblyTables
from collector.store.health import log_failure
from collector.telemetry import Metrics
from semconv.options import DEFAULT_OPTIONS, MappingOptions

log = logging.getLogger(__name__)

# Jobs in flight per mapping worker: one mapping and one queued behind it, so that the workers map
# on while the assembler writes. The assembler then waits for the WRITE_JOBS oldest and writes them
# in one transaction: a DuckDB statement has a fixed cost of a few ms whatever its rows, and writing
# two jobs at once took a third less CPU than writing them one by one.
JOBS_PER_WORKER = 2
WRITE_JOBS = 2


class TraceAssembler(Component):
    """Runs on its own thread, fed by the span writer's post-commit listener."""

    name = "assembler"

    def __init__(
        self,
        store: AssemblyTables,
        config: AssemblerConfig,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
        scoring: ScoringSetup | None = None,
        dimensions: Sequence[Dimension] = (),
        caps: SliceCaps | None = None,
        spill: SpillDirectory | None = None,
        mapping: MappingOptions = DEFAULT_OPTIONS,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._clock = clock
        self._store = store
        # The span columns held for mapping: resources only when a dimension reads one.
        resources = ["resource_attributes"] if any(d.resource for d in dimensions) else []
        span_columns = [*SPAN_COLUMNS, "received_at", *resources]
        # `spill`: where batches past `max_held_spans` wait for assembly (None: read back from the store).
        self._holding = Holding(store, config.max_held_spans, span_columns, spill, metrics)
        self._completeness = Completeness(config)
        self._claims = Claims(store, metrics, config.max_traces, clock())
        self._cases = GoldenCases(store)
        self._workers = MappingWorkers(config.workers, config.worker_nice, scoring, self._cases)
        self._jobs = JobsInFlight(self._workers, store, metrics, caps, clock)
        self._preparer = JobPreparer(self._holding, self._claims, self._cases, tuple(dimensions), mapping)
        self._inbox: deque[SpanBatch | Inbound] = deque()
        self._inbox_rows = 0  # rows of the batches in the inbox kept whole
        self._ready = ReadyQueue(config, clock)
        self._cond = threading.Condition()
        self._stopping = False
        self._recovery_due = False  # set when the store writes again after failing
        self._history_checked = False  # the start-up recovery asked the store what it holds
        self._started_at: datetime | None = None  # `start`: the recovery takes what came before
        store.health.on_recovery(self._recover_later)
        self._thread = threading.Thread(target=self._run, name="ragpulse-assembler", daemon=True)

    # ------------------------------------------------------------------ interface

    def on_commit(self, batch: SpanBatch) -> None:
        """Writer listener: hand over a committed batch (cheap; the work happens on our thread).

        When the batches waiting for our thread already hold `max_held_spans` rows (our thread is
        behind, e.g. starved of CPU by a burst), the batch's rows go to the spill directory (or,
        without one, are read back from the store at assembly), so a burst costs disk, not memory.

        No wake-up: nothing can be assembled before decision_wait anyway, and a round per
        `poll_interval` makes fewer, larger mapping jobs and store transactions than one per commit."""
        rows = batch.spans.num_rows + batch.events.num_rows
        if not rows:
            return
        keep = self._inbox_rows + rows <= self._config.max_held_spans
        item = batch if keep else self._holding.not_kept(batch)
        with self._cond:
            self._inbox.append(item)
            if keep:
                self._inbox_rows += rows

    def refresh_cases(self) -> None:
        """Golden cases changed (`datasets load`): re-read them before the next assembly."""
        self._cases.mark_stale()

    def start(self) -> None:
        """Start the assembler thread: it first recovers the traces stored but not assembled (before
        now: the receivers start after it, and what they bring is assembled as it comes)."""
        self._started_at = utc_now()
        self._thread.start()

    def stop(self, deadline: float | None = None) -> None:
        """Stop after the current round (within 30 s, and not past `deadline`). Traces still in
        flight are recovered on the next start."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(remaining(deadline, 30.0))
        self._workers.shutdown()
        self._holding.close()

    @property
    def in_flight(self) -> int:
        """Traces not assembled yet: waiting to be complete, ready, or being mapped."""
        return len(self._completeness) + len(self._ready) + self._jobs.traces()

    @property
    def worker_pool(self) -> ProcessPoolExecutor | None:
        """The mapping worker processes (None: mapping in the assembler thread)."""
        return self._workers.pool

    def accepting(self) -> bool:
        """False when `max_backlog` traces wait for assembly: the span writer then refuses exports
        with a retryable status, so a burst beyond what assembly can absorb is pushed back."""
        return len(self._completeness) + len(self._ready) < self._config.max_backlog

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        lower_thread_priority(self._config.thread_nice)
        with self._failures_logged(
            "trace recovery failed; it is tried again when the store writes again, else on the next start"
        ):
            self._recover()
        while True:
            with self._cond:
                if not self._stopping and (not self._ready or self._ready.gathering()):
                    self._cond.wait(self._config.poll_interval)
                if self._stopping:
                    break
                batches = list(self._inbox)
                self._inbox.clear()
                self._inbox_rows = 0
                recover, self._recovery_due = self._recovery_due, False
            with self._failures_logged(
                "trace assembly round failed; its traces are retried on the next start"
            ):
                self.run_round(batches)
                if recover:  # after the round: its batches' traces are held by now, not taken twice
                    self._recover_after_outage()
        with self._failures_logged("trace assembly failed at stop; its traces are retried on the next start"):
            self._jobs.finish_all()

    @contextlib.contextmanager
    def _failures_logged(self, message: str) -> Iterator[None]:
        """Count and log a failure of the block (a storage failure once, in the store's health):
        the thread carries on."""
        try:
            yield
        except Exception:
            self._metrics.assembly_errors.inc()
            log_failure(log, self._store, "assembler", message)

    def run_round(self, batches: Sequence[SpanBatch | Inbound]) -> int:
        """Take in committed batches, find the traces that are ready, and assemble the oldest of
        them, at most one chunk more than there are workers per round (the rest wait in the ready
        queue, so a round stays short and new batches are taken in often). Returns how many were
        started."""
        now = self._clock()
        for batch in batches:
            item = batch if isinstance(batch, Inbound) else inbound(batch)
            self._completeness.arrive(item.arrivals, now, self._claims.assembled)
            self._holding.hold(item)
        self._ready.add(self._take_ready(now), now)
        if self._claims.reconcile_due(now):
            self._reconcile(now)
        started = self._assemble_some(gather=True)
        self._metrics.traces_in_flight.set(self.in_flight)
        return started

    def assemble_stored(self) -> int:
        """Assemble, from the store, every trace with spans not yet assembled (run on the caller's
        thread; used at start-up and by `replay --db`). Returns how many traces were assembled."""
        before = len(self._claims.assembled)
        self._recover()
        while self._ready:
            self._assemble_some(gather=False)
        self._jobs.finish_all()
        return len(self._claims.assembled) - before

    def _take_ready(self, now: float) -> list[Queued]:
        """Take the traces that are ready out of flight, with their held rows."""
        if self._claims.may_have_older:
            self._claims.learn(self._completeness.ask_store(now, self._store.assembly_counts))
        return [
            Queued(r.trace_id, r.reason, r.state, self._holding.take(r.trace_id))
            for r in self._completeness.ready(now)
        ]

    def _reconcile(self, now: float) -> None:
        """Re-assemble, from the store, the traces written twice since the last search (see
        `Claims.assembled_twice`): those in flight when they are ready, the others now."""
        twice = self._claims.assembled_twice(now)
        queued = self._ready.trace_ids()
        for trace_id in twice:
            if not self._completeness.mark_twice(trace_id) and trace_id not in queued:
                again = TraceState(now, now, Stage.ROOTED, history=History.ASSEMBLED_TWICE)
                self._ready.put([from_store(trace_id, "late_span", again)])
        if twice:
            log.info("re-assembling %d trace(s) delivered again after their assembly", len(twice))

    def _recover(self) -> None:
        """Queue the traces stored but not (or not completely) assembled, e.g. before a crash."""
        pending = self._store.pending_trace_ids(received_before=self._started_at)
        self._claims.check_history()
        self._history_checked = True
        if pending:
            log.info("assembling %d trace(s) stored but not assembled before the last stop", len(pending))
        self._ready.put(recovery(trace_id) for trace_id in pending)

    def _recover_later(self) -> None:
        """The store writes again after failing (`StoreHealth.on_recovery`): the traces whose
        assembly could not be stored meanwhile are taken back from the store on the next round."""
        with self._cond:
            self._recovery_due = True
            self._cond.notify()

    def _recover_after_outage(self) -> None:
        """Queue the stored traces no assembly has seen that are not on their way here (held,
        queued, being mapped, or committed and waiting in the inbox): those whose assembly failed
        while the store could not write, and, when the store failed at start, those stored before."""
        if not self._history_checked:
            self._claims.check_history()
            self._history_checked = True
        stored = self._store.pending_trace_ids()
        known = self._completeness.trace_ids()
        known.update(self._ready.trace_ids())
        known.update(self._jobs.trace_ids())
        with self._cond:  # after the query: a batch committed before it is here or seen already
            for item in self._inbox:
                known.update(
                    item.arrivals.trace_ids
                    if isinstance(item, Inbound)
                    else item.spans["trace_id"].to_pylist()
                )
        lost = [t for t in stored if t not in known]
        if lost:
            log.info(
                "assembling %d trace(s) whose assembly failed while the store could not write", len(lost)
            )
        self._ready.put(recovery(t) for t in lost)

    # ------------------------------------------------------------------ assembly

    def _assemble_some(self, gather: bool) -> int:
        """Map and write the oldest ready traces, a chunk at a time, one chunk more than there are
        workers per round at most. With worker processes, each has a job mapping and one queued
        behind it while the assembler writes, and the two oldest jobs are written together (the
        last jobs' write waits for the next round). Returns how many traces were started.

        With `gather`, at a rate too low to fill a chunk within `batch_wait` seconds, the ready
        traces wait for more, up to `batch_wait` after the first of them was ready: a write costs
        about 20 ms of CPU whatever its rows, so one write a second instead of one a round saves
        most of the service's CPU at a low rate. (At a higher rate, or at the end of a burst,
        nothing waits.)"""
        self._jobs.finish_done()
        if not self._ready or (gather and self._ready.gathering()):
            self._jobs.finish_all()  # nothing new to overlap with: write what the workers have mapped
            return 0
        started = 0
        workers = self._workers.processes
        for _ in range(workers + 1):
            if not self._ready:
                break
            chunk = self._ready.take()
            started += len(chunk)
            prepared = self._preparer.prepare(chunk)
            if prepared is not None:
                self._jobs.send(prepared)
            if len(self._jobs) > JOBS_PER_WORKER * workers:
                self._jobs.wait_oldest(WRITE_JOBS)  # then every one done behind them
                self._jobs.finish_done()
        return started
