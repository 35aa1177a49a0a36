"""Trace assembly: groups committed spans by trace, decides when a trace is complete, maps it with
`semconv.map_trace` and writes `traces`, `steps` and `documents`.

A trace is complete when its root span has arrived (OTel exports spans when they end) and no span
arrived for `decision_wait` seconds, or `max_wait` seconds after its first span. At most
`max_traces` are in flight; past that the oldest are assembled early (reason `pressure`).

A span whose parent is in another process (OTLP's span flags say so; SERVER and CONSUMER spans of
senders that do not set them) is its service's entry into the trace, and stands in for the root:
an app behind a traced gateway that reports elsewhere would otherwise wait `max_wait` for a root
that never comes. When spans of another service come after an entry span stood in and its trace
was assembled (a caller reporting here too, slowly, or a service the entry's service was called by
in the same trace), the entry's service was not the first: its entry spans stop standing in, so its
traces are not all assembled (and judged) twice. A trace that then reaches `max_wait` with only such
entry spans and no root makes them stand in again (the callers stopped reporting here). A root that
comes in time (ragpulse's own probe span, a quick gateway) changes nothing.

Spans wait in memory as the Arrow tables the writer committed (columnar text, no per-span Python
objects) and are read into records only when their trace is assembled. Events sent apart from their
spans (GenAI events on /v1/logs) count as arrivals of their trace like spans do, but never as its
root: they join a trace in flight, or start one that waits for its spans. A span or event that
arrives after its trace was assembled is stored as usual and the trace is re-assembled from the
store (reason `late_span`), replacing the earlier rows, unless all such rows only repeat rows stored
before them (an export retried after its commit, a capture replayed): nothing new, so the trace is
not assembled, nor scored, again. Each span and event is read once, the first copy committed, as the
`spans` and `span_events` views show it. On start, traces whose spans were stored
but not (or not completely) assembled, e.g. after a crash, are assembled from the store (reason
`recovery`).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import multiprocessing
import os
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import TypeVar

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from collector.otlp.batch import SpanBatch
from collector.processors.config import AssemblerConfig
from collector.processors.mapping_job import (
    CaseIndex,
    MapJob,
    MapResult,
    Scoring,
    init_worker,
    run_map_job,
    run_worker_job,
)
from collector.processors.scoring import ScoringSetup, record_metrics, scored_received_times
from collector.processors.slices import Dimension, SliceCaps
from collector.processors.spill import SpillDirectory, SpilledBatch
from collector.store.base import Store
from collector.store.health import log_failure
from collector.store.span_records import SPAN_COLUMNS, first_copies, repeats_only
from collector.store.tables import EVENT_KEY, SPAN_KEY
from collector.store.trace_rows import concat_trace_tables
from collector.telemetry import Metrics
from semconv.options import DEFAULT_OPTIONS, MappingOptions

T = TypeVar("T")

log = logging.getLogger(__name__)

# Traces per mapping job and per commit of their rows: large enough that a job's and a commit's
# fixed costs do not show. (The worker builds rows `MAP_CHUNK` traces at a time: its memory does
# not grow with this.)
ROUND_TRACES = 500
# Jobs in flight per mapping worker: one mapping and one queued behind it, so that the workers map
# on while the assembler writes. The assembler then waits for the WRITE_JOBS oldest and writes them
# in one transaction: a DuckDB statement has a fixed cost of a few ms whatever its rows, and writing
# two jobs at once took a third less CPU than writing them one by one.
JOBS_PER_WORKER = 2
WRITE_JOBS = 2
# Seconds between re-reads of the golden cases when several replicas share the store: `datasets load`
# writes the lake directly, and only the replica it went through (if any) would hear of it.
CASES_REFRESH = 30.0
# Seconds between searches for traces assembled twice (see `_reconcile`), and how far back before
# the previous search each one looks (jobs prepared before it may have been written after it).
RECONCILE_EVERY = 60.0
RECONCILE_OVERLAP = 120.0
# Traces an entry span completed, remembered (trace id -> its service) so that spans of another
# service arriving later show that it was not the first; and at most this many such services.
ENTERED_CAP = 10_000
WAITING_SERVICES_CAP = 10_000


@dataclass(slots=True)
class _Pending:
    first_seen: float
    last_seen: float
    root_seen: bool = False
    entry: str | None = None  # the service of an entry span that may stand in for the root
    batches: list[int] = field(default_factory=list)
    from_store: bool = False  # late span or recovery: read every span of the trace from the store
    spilled: bool = False  # some of its spans were not held in memory: read them from the store
    checked: bool = False  # the store was asked whether this root-less trace was assembled before
    elsewhere: bool = False  # other replicas received spans of it: read them from the store
    twice: bool = False  # found assembled twice (`_reconcile`): assembled again whatever came late

    @property
    def read_back(self) -> bool:
        return self.from_store or self.spilled or self.elsewhere


@dataclass(slots=True)
class _Arrivals:
    """What a committed batch tells assembly: the trace of each span (and of each log event, which
    comes apart from its span and never counts as a root), which spans are roots, the service of
    each span, the traces with an entry span (and its service), and the batch itself unless its
    rows are left in the store."""

    trace_ids: list[str]
    roots: list[bool]
    services: pa.ChunkedArray
    entries: dict[str, str]
    spans: int
    batch: SpanBatch | None
    file: SpilledBatch | None = None  # the batch's rows, on disk


def _arrivals(batch: SpanBatch, keep: bool, file: SpilledBatch | None = None) -> _Arrivals:
    trace_ids = batch.spans["trace_id"].to_pylist()
    roots = pc.is_null(batch.spans["parent_span_id"]).to_pylist()
    services = batch.spans["service_name"]
    entries: dict[str, str] = {}
    for row in batch.entry_rows:
        entries.setdefault(trace_ids[row], services[row].as_py())
    if batch.events.num_rows:
        event_traces = pc.unique(batch.events["trace_id"]).to_pylist()
        trace_ids += event_traces
        roots += [False] * len(event_traces)
    return _Arrivals(trace_ids, roots, services, entries, batch.spans.num_rows, batch if keep else None, file)


@dataclass
class _Prepared:
    job: MapJob
    counts: dict[str, tuple[str, int]]
    started: float


@dataclass
class _HeldBatch:
    spans: pa.Table | None  # None: on disk (`file`)
    events: pa.Table | None
    waiting: int  # traces with spans in this batch that are not assembled yet
    file: SpilledBatch | None = None


def lower_thread_priority(niceness: int) -> None:
    """Lower the calling thread's CPU priority (Linux schedules threads apart: a thread id is a
    process id to `setpriority`). Elsewhere, or where the OS refuses, the thread keeps its priority."""
    if not niceness or not sys.platform.startswith("linux"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
    except OSError:
        log.warning("could not lower the assembler thread's priority; it runs at normal priority")


def mapping_pool(workers: int, niceness: int, scoring: ScoringSetup | None) -> ProcessPoolExecutor:
    """The mapping worker processes (started by `submit_job`, as jobs come).

    Spawned, not forked: this process runs gRPC and DuckDB threads."""
    return ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=init_worker,
        initargs=(niceness, os.getpid(), scoring),
    )


def runs_without_repeats(items: Sequence[T], keys: Callable[[T], Iterable[str]]) -> Iterator[list[T]]:
    """`items` in order, cut into the longest runs in which no key (a trace id) appears twice."""
    run: list[T] = []
    seen: set[str] = set()
    for item in items:
        item_keys = set(keys(item))
        if run and not seen.isdisjoint(item_keys):
            yield run
            run, seen = [], set()
        run.append(item)
        seen |= item_keys
    if run:
        yield run


def submit_job(pool: ProcessPoolExecutor, job: MapJob) -> Future[MapResult]:
    """`run_worker_job(job)` in a worker of `pool`.

    A spawned process first runs the parent's main module, and the `ragpulse` command's imports
    everything (DuckDB, gRPC, the HTTP stack, the OpenTelemetry SDK): about 70 MiB a worker that
    mapping never uses. `submit` starts a worker, synchronously, when it finds none idle, so the
    main module does not name its file meanwhile, and the worker imports only what it needs."""
    with _main_module_hidden():
        return pool.submit(run_worker_job, job)


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """The main module as multiprocessing's spawn sees an interactive session's: no file, no spec."""
    main = sys.modules["__main__"]
    spec, file = getattr(main, "__spec__", None), getattr(main, "__file__", None)
    main.__spec__ = None
    if file is not None:
        del main.__file__
    try:
        yield
    finally:
        main.__spec__ = spec
        if file is not None:
            main.__file__ = file


class TraceAssembler:
    """Runs on its own thread, fed by the span writer's post-commit listener."""

    def __init__(
        self,
        store: Store,
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
        self._mapping = mapping  # `mapping:`, sent with every job
        # Where batches past `max_held_spans` wait for assembly (None: read back from the store).
        self._spill = spill
        # Slice dimensions the mapping job reads, and the cap on their values applied here.
        self._dimensions = tuple(dimensions)
        self._caps = caps
        # The span columns held for mapping: resources only when a dimension reads one.
        resources = ["resource_attributes"] if any(d.resource for d in dimensions) else []
        self._span_columns = [*SPAN_COLUMNS, "received_at", *resources]
        self._metrics = metrics
        self._clock = clock
        self._store = store
        self._inbox: deque[SpanBatch | _Arrivals] = deque()
        self._inbox_rows = 0  # rows of the batches in the inbox kept whole
        self._pending: dict[str, _Pending] = {}
        self._held: dict[int, _HeldBatch] = {}
        self._held_spans = 0
        # Complete traces waiting for their turn (a burst leaves more than a round maps).
        self._ready_queue: deque[tuple[str, str, _Pending]] = deque()
        self._ready_since = -math.inf  # when the ready queue last stopped being empty
        self._recently_ready: deque[tuple[float, int]] = deque()  # (round, traces it found ready)
        self._next_batch = 0
        self._assembled: OrderedDict[str, int] = OrderedDict()  # trace id -> assembly count
        self._assembled_cap = max(100_000, 2 * config.max_traces)
        # Traces assembled before this process, or evicted from memory, or by another replica.
        self._may_have_older = store.shared
        # Wall-clock seconds: traces assembled since then are searched for a second row next.
        self._reconcile_from = time.time() - RECONCILE_OVERLAP
        self._reconciled_at = clock()
        self._asked_at = -math.inf  # when the store was last asked about root-less traces
        # Services whose entry spans do not stand in for the root: other services report first.
        self._entry_waits: set[str] = set()
        self._entered: OrderedDict[str, str] = OrderedDict()  # completed by an entry span: its service
        self._cases = CaseIndex()
        self._cases_stale = True
        self._cases_loaded_at = 0.0
        self._cases_version = 0
        self._cases_sent = -1  # the version the worker process holds
        self._pool: ProcessPoolExecutor | None = None
        self._in_flight: deque[tuple[_Prepared, Future[MapResult]]] = deque()
        if config.workers:
            self._pool = mapping_pool(config.workers, config.worker_nice, scoring)
        # Mapping in this thread (no worker, or the worker died) scores here too.
        self._scoring = Scoring.of(scoring)
        self._cond = threading.Condition()
        self._stopping = False
        self._recovery_due = False  # set when the store writes again after failing
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
        item: SpanBatch | _Arrivals = batch
        if not keep:
            file = self._spill_batch(batch) if self._spill is not None else None
            item = _arrivals(batch, keep=False, file=file)
        with self._cond:
            self._inbox.append(item)
            if keep:
                self._inbox_rows += rows

    def refresh_cases(self) -> None:
        """Golden cases changed (`datasets load`): re-read them before the next assembly."""
        self._cases_stale = True

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the current round. Traces still in flight are recovered on the next start."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._spill is not None:
            self._spill.close()

    @property
    def in_flight(self) -> int:
        """Traces not assembled yet: waiting to be complete, ready, or being mapped."""
        mapping = sum(len(prepared.counts) for prepared, _ in self._in_flight)
        return len(self._pending) + len(self._ready_queue) + mapping

    def accepting(self) -> bool:
        """False when `max_backlog` traces wait for assembly: the span writer then refuses exports
        with a retryable status, so a burst beyond what assembly can absorb is pushed back."""
        return len(self._pending) + len(self._ready_queue) < self._config.max_backlog

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        lower_thread_priority(self._config.thread_nice)
        try:
            self._recover()
        except Exception:
            self._metrics.assembly_errors.inc()
            log_failure(
                log,
                self._store,
                "assembler",
                "trace recovery failed; the traces are retried on the next start",
            )
        while True:
            with self._cond:
                if not self._stopping and (not self._ready_queue or self._gathering()):
                    self._cond.wait(self._config.poll_interval)
                if self._stopping:
                    break
                batches = list(self._inbox)
                self._inbox.clear()
                self._inbox_rows = 0
                recover, self._recovery_due = self._recovery_due, False
            try:
                self.run_round(batches)
                if recover:  # after the round: its batches' traces are held by now, not taken twice
                    self._recover_after_outage()
            except Exception:
                self._metrics.assembly_errors.inc()
                log_failure(
                    log,
                    self._store,
                    "assembler",
                    "trace assembly round failed; its traces are retried on the next start",
                )
        try:
            self._finish_all()
        except Exception:
            self._metrics.assembly_errors.inc()
            log_failure(
                log,
                self._store,
                "assembler",
                "trace assembly failed at stop; its traces are retried on the next start",
            )

    def run_round(self, batches: Sequence[SpanBatch | _Arrivals]) -> int:
        """Take in committed batches, find the traces that are ready, and assemble the oldest of
        them, at most `_round_chunks` chunks per round (the rest wait in the ready queue, so a
        round stays short and new batches are taken in often). Returns how many were started."""
        now = self._clock()
        for batch in batches:
            self._hold(batch if isinstance(batch, _Arrivals) else _arrivals(batch, keep=True), now)
        ready = self._ready(now)
        if ready:
            if not self._ready_queue:
                self._ready_since = now
            if ready[-1][1] == "pressure":  # at `max_traces` (`_ready` lists these last): no waiting
                self._ready_since = -math.inf
            self._recently_ready.append((now, len(ready)))
        while self._recently_ready and now - self._recently_ready[0][0] > self._config.batch_wait:
            self._recently_ready.popleft()
        self._ready_queue.extend(ready)
        if self._may_have_older and not self._store.shared and now - self._reconciled_at >= RECONCILE_EVERY:
            self._reconcile(now)
        started = self._assemble_some(gather=True)
        self._metrics.traces_in_flight.set(self.in_flight)
        return started

    def assemble_stored(self) -> int:
        """Assemble, from the store, every trace with spans not yet assembled (run on the caller's
        thread; used at start-up and by `replay --db`). Returns how many traces were assembled."""
        before = len(self._assembled)
        self._recover()
        while self._ready_queue:
            self._assemble_some(gather=False)
        self._finish_all()
        return len(self._assembled) - before

    def _recover(self) -> None:
        pending = self._store.pending_trace_ids()
        self._may_have_older = self._store.shared or self._store.has_traces()
        if pending:
            log.info("assembling %d trace(s) stored but not assembled before the last stop", len(pending))
        self._ready_queue.extend(
            (trace_id, "recovery", _Pending(0, 0, from_store=True)) for trace_id in pending
        )

    def _recover_later(self) -> None:
        """The store writes again after failing (`StoreHealth.on_recovery`): the traces whose
        assembly could not be stored meanwhile are taken back from the store on the next round."""
        with self._cond:
            self._recovery_due = True
            self._cond.notify()

    def _recover_after_outage(self) -> None:
        """Queue the stored traces no assembly has seen that are not on their way here (held,
        queued, being mapped, or committed and waiting in the inbox): those whose assembly failed
        while the store could not write."""
        stored = self._store.pending_trace_ids()
        known = set(self._pending)
        known.update(trace_id for trace_id, _, _ in self._ready_queue)
        for prepared, _ in self._in_flight:
            known.update(prepared.counts)
        with self._cond:  # after the query: a batch committed before it is here or seen already
            for item in self._inbox:
                known.update(
                    item.trace_ids if isinstance(item, _Arrivals) else item.spans["trace_id"].to_pylist()
                )
        lost = [t for t in stored if t not in known]
        if lost:
            log.info(
                "assembling %d trace(s) whose assembly failed while the store could not write", len(lost)
            )
        self._ready_queue.extend((t, "recovery", _Pending(0, 0, from_store=True)) for t in lost)

    # ------------------------------------------------------------------ bookkeeping

    def _hold(self, arrivals: _Arrivals, now: float) -> None:
        """Note a batch's traces as arrivals, and keep its rows for their assembly: in memory, or
        on disk once `max_held_spans` are held (without a spill directory, and for a batch whose
        rows were not kept, they are read back from the store)."""
        batch = arrivals.batch
        spans = None if batch is None else batch.spans.select(self._span_columns)
        batch_id = self._next_batch
        self._next_batch += 1
        touched: set[str] = set()
        for trace_id, is_root in zip(arrivals.trace_ids, arrivals.roots, strict=True):
            pending = self._pending.get(trace_id)
            if pending is None:
                # Seen before: read it all from the store. Assembled before (count > 0): its root
                # came, so a late span waits decision_wait, not max_wait. Count 0: events only so far.
                count = self._assembled.get(trace_id)
                pending = _Pending(now, now, root_seen=bool(count), from_store=count is not None)
                self._pending[trace_id] = pending
            pending.last_seen = now
            pending.root_seen = pending.root_seen or bool(is_root)
            touched.add(trace_id)
        for trace_id, service in arrivals.entries.items():
            pending = self._pending[trace_id]
            if pending.entry is None or pending.entry in self._entry_waits:
                pending.entry = service
        if self._entered:
            self._learn_from_late_spans(arrivals)
        over = spans is not None and self._held_spans + spans.num_rows > self._config.max_held_spans
        file = arrivals.file
        if file is None and batch is not None and over and self._spill is not None:
            file = self._spill_batch(batch)
        if file is None and (batch is None or spans is None or over):
            for trace_id in touched:
                self._pending[trace_id].spilled = True
            self._metrics.assembly_spilled_spans.inc(arrivals.spans)
            return
        for trace_id in touched:
            self._pending[trace_id].batches.append(batch_id)
        if file is not None:
            self._held[batch_id] = _HeldBatch(None, None, len(touched), file)
            return
        assert batch is not None and spans is not None
        self._held[batch_id] = _HeldBatch(spans, batch.events, len(touched))
        self._held_spans += spans.num_rows

    def _learn_from_late_spans(self, arrivals: _Arrivals) -> None:
        """Spans of another service arriving for a trace whose entry span stood in for its root,
        after its assembly: that entry's service was not the first to report the trace, and its
        entry spans stop standing in (its traces wait for their root, or for the other service's
        entry span). Log events do not count: they often come apart from their spans, later."""
        for row, trace_id in enumerate(itertools.islice(arrivals.trace_ids, arrivals.spans)):
            service = self._entered.get(trace_id)
            if service is None or arrivals.services[row].as_py() == service:
                continue
            del self._entered[trace_id]
            if service not in self._entry_waits and len(self._entry_waits) < WAITING_SERVICES_CAP:
                self._entry_waits.add(service)
                log.info(
                    "spans of trace %s came after %r's entry span stood in for its root: "
                    "its traces wait for their root from now on",
                    trace_id,
                    service,
                )

    def _has_root(self, pending: _Pending) -> bool:
        """Its root span came, or an entry span stands in for a root that is reported elsewhere."""
        entry = pending.entry
        return pending.root_seen or (entry is not None and entry not in self._entry_waits)

    def _spill_batch(self, batch: SpanBatch) -> SpilledBatch:
        assert self._spill is not None
        self._metrics.assembly_spill_file_spans.inc(batch.spans.num_rows)
        return self._spill.write(batch.spans.select(self._span_columns), batch.events)

    def _ready(self, now: float) -> list[tuple[str, str, _Pending]]:
        cfg = self._config
        if self._may_have_older:
            self._find_assembled_before(now)
        ready = []
        for trace_id, p in self._pending.items():
            if now - p.last_seen >= cfg.decision_wait and self._has_root(p):
                if not p.root_seen and p.entry is not None:  # its entry span stands in for the root
                    self._entered[trace_id] = p.entry
                    if len(self._entered) > ENTERED_CAP:
                        self._entered.popitem(last=False)
                    p.root_seen = True  # taken as new, like a trace with its root (see `_prepare`)
                ready.append((trace_id, "late_span" if p.from_store else "complete", p))
            elif now - p.first_seen >= cfg.max_wait:
                if p.entry is not None and not p.root_seen and p.entry in self._entry_waits:
                    self._entry_waits.discard(p.entry)  # no one reported the trace before it
                    log.info("a trace entering %r came without its root: its entry spans stand in", p.entry)
                ready.append((trace_id, "late_span" if p.from_store else "max_wait", p))
        excess = len(self._pending) - len(ready) - cfg.max_traces
        if excess > 0:
            chosen = {trace_id for trace_id, _, _ in ready}
            oldest = sorted(
                ((p.first_seen, t) for t, p in self._pending.items() if t not in chosen),
            )[:excess]
            ready.extend((t, "pressure", self._pending[t]) for _, t in oldest)
        for trace_id, _, _ in ready:
            del self._pending[trace_id]
        return ready

    def _find_assembled_before(self, now: float) -> None:
        """Root-less traces idle for decision_wait may be late spans of a trace assembled before
        this process started (or forgotten since): ask the store once, so they need not wait for
        max_wait. The store reads all of `traces` to answer, so it is asked at most once per
        decision_wait, for every such trace at once (traffic whose spans all have a parent outside
        it would otherwise ask every round): one waits at most twice decision_wait to be asked."""
        if now - self._asked_at < self._config.decision_wait:
            return
        idle = [
            t
            for t, p in self._pending.items()
            if now - p.last_seen >= self._config.decision_wait and not p.checked and not self._has_root(p)
        ]
        if not idle:
            return
        self._asked_at = now
        earlier = self._store.assembly_counts(idle)
        for trace_id in idle:
            pending = self._pending[trace_id]
            pending.checked = True
            if trace_id in earlier:
                pending.root_seen = pending.from_store = True
                self._assembled[trace_id] = earlier[trace_id]

    def _reconcile(self, now: float) -> None:
        """Re-assemble, from the store, the traces written twice since the last search.

        A ready trace that arrived with its root and is not remembered here is taken as new without
        asking the store (see `_prepare`): the store can only answer by reading every row of
        `traces`, and asking for every job made each one dearer as the table grew. Such a trace
        may still have been assembled before: delivered again (a client's retry, a replay) after
        this process forgot it (a restart, or `_assembled_cap` traces since). It then has two rows
        in `traces`, for at most `RECONCILE_EVERY` seconds: this search finds them (one read of
        `traces` a minute, not one a job), and its re-assembly (`late_span`) reads every span of
        the trace and replaces both rows with one, as for any late span."""
        since = self._reconcile_from
        self._reconcile_from = time.time() - RECONCILE_OVERLAP
        self._reconciled_at = now
        twice = self._store.traces_assembled_twice(since)
        queued = {trace_id for trace_id, _, _ in self._ready_queue}
        for trace_id in twice:
            pending = self._pending.get(trace_id)
            if pending is not None:
                pending.from_store = pending.twice = True
            elif trace_id not in queued:
                again = _Pending(now, now, root_seen=True, from_store=True, twice=True)
                self._ready_queue.append((trace_id, "late_span", again))
        if twice:
            log.info("re-assembling %d trace(s) delivered again after their assembly", len(twice))

    def _release(self, pending: _Pending) -> None:
        for batch_id in pending.batches:
            held = self._held[batch_id]
            held.waiting -= 1
            if held.waiting <= 0:
                del self._held[batch_id]
                if held.file is not None and self._spill is not None:
                    self._spill.remove(held.file)
                elif held.spans is not None:
                    self._held_spans -= held.spans.num_rows

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
        self._finish_done()
        if not self._ready_queue or (gather and self._gathering()):
            self._finish_all()  # nothing new to overlap with: write what the workers have mapped
            return 0
        started = 0
        workers = self._config.workers if self._pool is not None else 0
        ahead = JOBS_PER_WORKER * workers
        for _ in range(workers + 1):
            if not self._ready_queue:
                break
            chunk = [self._ready_queue.popleft() for _ in range(min(ROUND_TRACES, len(self._ready_queue)))]
            started += len(chunk)
            prepared = self._prepare(chunk)
            if prepared is not None:
                self._in_flight.append((prepared, self._submit(prepared.job)))
            if len(self._in_flight) > ahead:
                oldest = itertools.islice(self._in_flight, WRITE_JOBS)
                wait([future for _, future in oldest])  # then every one done behind them
                self._finish_done()
        return started

    def _gathering(self) -> bool:
        """Whether the ready traces wait for more before a job (see `_assemble_some`)."""
        return (
            sum(n for _, n in self._recently_ready) < ROUND_TRACES
            and self._clock() - self._ready_since < self._config.batch_wait
        )

    def _finish_done(self) -> None:
        """Write the jobs done at the head of the queue, in order, together where they can be."""
        done = []
        while self._in_flight and self._in_flight[0][1].done():
            done.append(self._in_flight.popleft())
        if done:
            self._finish(done)

    def _finish_all(self) -> None:
        if self._in_flight:
            jobs = list(self._in_flight)
            self._in_flight.clear()
            self._finish(jobs)

    def _prepare(self, ready: list[tuple[str, str, _Pending]]) -> _Prepared | None:
        """Collect the rows of these traces and decide each one's assembly count."""
        started = time.perf_counter()
        if self._may_have_older:
            # A trace not known here may have been assembled before (an earlier run, or evicted
            # from memory): such traces are re-read in full from the store and replaced. Only
            # root-less ones are looked up now: they are late spans, unless their root never came.
            # One that came with its root is new but for a repeated delivery, which `_reconcile`
            # finds later (asking about every trace read all of `traces` for every job).
            unknown = [
                t
                for t, _, p in ready
                if not p.from_store and (self._store.shared or not (p.root_seen or p.checked))
            ]
            earlier = self._store.assembly_counts(unknown) if unknown else {}
            for trace_id, _, pending in ready:
                if trace_id in earlier:
                    pending.from_store = True
                    self._assembled[trace_id] = earlier[trace_id]
        if self._store.shared:
            # Spans of these traces that reached other replicas are read back from the store.
            elsewhere = self._store.traces_elsewhere([t for t, _, _ in ready])
            for trace_id, _, pending in ready:
                pending.elsewhere = pending.elsewhere or trace_id in elsewhere
        spans, events = self._gather(ready, [t for t, _, p in ready if p.read_back])
        repeated = self._repeated(ready, spans, events)
        for _, _, pending in ready:
            self._release(pending)
        if spans is None:
            return None
        if repeated:
            # Late rows that only repeat rows the store had before them (an export retried after
            # its commit, a capture replayed again): nothing new to assemble, or to score again.
            for trace_id in repeated:
                self._remember(trace_id, self._assembled.get(trace_id, 0))
            ready = [r for r in ready if r[0] not in repeated]
            others = pa.array(list(repeated), pa.string())
            spans = spans.filter(pc.invert(pc.is_in(spans["trace_id"], value_set=others)))
            if events is not None:
                events = events.filter(pc.invert(pc.is_in(events["trace_id"], value_set=others)))
        from_store = [t for t, _, p in ready if p.from_store]
        stored_counts = self._store.assembly_counts(from_store) if from_store else {}
        per_trace = pc.value_counts(spans["trace_id"])  # events alone make no trace yet
        claimed = self._store.claim_traces(
            dict(
                zip(per_trace.field("values").to_pylist(), per_trace.field("counts").to_pylist(), strict=True)
            )
        )
        if len(claimed) < len(per_trace):
            # Another replica assembled these very spans already (or more of them): not again here.
            lost = {t for t in per_trace.field("values").to_pylist() if t not in claimed}
            self._metrics.traces_claimed_elsewhere.inc(len(lost))
            ready = [r for r in ready if r[0] not in lost]
            keep = pa.array(list(claimed), pa.string())
            spans = spans.filter(pc.is_in(spans["trace_id"], value_set=keep))
            if events is not None:
                events = events.filter(pc.is_in(events["trace_id"], value_set=keep))
        if not claimed:
            for trace_id, _, _ in ready:  # traces with events only: nothing to map yet
                self._remember(trace_id, self._assembled.get(trace_id, 0))
            return None
        if self._store.shared and time.monotonic() - self._cases_loaded_at >= CASES_REFRESH:
            self._cases_stale = True  # another process may have loaded cases into the lake
        if self._cases_stale:
            self._load_cases()
        with_spans = set(claimed)
        counts = {
            t: (reason, claimed[t] or max(self._assembled.get(t, 0), stored_counts.get(t, 0)) + 1)
            for t, reason, _ in ready
            if t in with_spans
        }
        for trace_id, (_, count) in counts.items():
            # Known as assembled from here on, so a span arriving while the job runs re-assembles.
            self._remember(trace_id, count)
        for trace_id, _, _ in ready:
            if trace_id not in with_spans:
                self._remember(trace_id, self._assembled.get(trace_id, 0))  # its events are stored
        job = MapJob(
            spans,
            events,
            counts,
            int(time.time() * 1_000_000),
            self._cases_version,
            dimensions=self._dimensions,
            mapping=self._mapping,
        )
        return _Prepared(job, counts, started)

    def _submit(self, job: MapJob) -> Future[MapResult]:
        if self._pool is not None:
            # One worker keeps the index it was sent; with several, any may take the job.
            if self._cases_sent != self._cases_version or self._config.workers > 1:
                job.cases = self._cases
                self._cases_sent = self._cases_version
            try:
                return submit_job(self._pool, job)
            except BrokenProcessPool:
                self._lose_worker()
        return self._run_here(job)

    def _run_here(self, job: MapJob) -> Future[MapResult]:
        job.cases = self._cases
        future: Future[MapResult] = Future()
        future.set_result(run_map_job(job, self._scoring))
        return future

    def _lose_worker(self) -> None:
        log.error("the mapping worker process died; mapping in the assembler thread from now on")
        self._pool = None

    def _finish(self, jobs: list[tuple[_Prepared, Future[MapResult]]]) -> None:
        """Write the results of these jobs (waiting for each), several in one transaction: a write
        has a fixed cost in DuckDB (a few milliseconds a statement, whatever its rows) that one
        write of two jobs pays once. Jobs that share a trace (a late span re-assembled it while
        the first job ran) are written apart, in order, so the later rows replace the earlier."""
        done: list[tuple[_Prepared, MapResult]] = []
        for prepared, future in jobs:
            try:
                result = future.result()
            except BrokenProcessPool:
                self._lose_worker()
                result = self._run_here(prepared.job).result()
            done.append((prepared, result))
        for group in runs_without_repeats(done, lambda job: job[0].counts):
            self._write_group(group)

    def _write_group(self, group: list[tuple[_Prepared, MapResult]]) -> None:
        tables = concat_trace_tables([result.tables for _, result in group])
        replace = [t for prepared, _ in group for t, (_, count) in prepared.counts.items() if count > 1]
        if self._caps is not None:
            tables.traces = self._caps.apply(tables.traces, self._clock())
        self._store.write_traces(tables, replace)
        record_metrics(
            self._metrics,
            tables.scores,
            "deterministic",
            int(time.time() * 1_000_000),
            decisions=tables.traces,
            received_us=scored_received_times(tables.traces),
        )
        written = time.perf_counter()
        for prepared, result in group:
            for trace_id, convention in result.conventions.items():
                self._metrics.traces_assembled.labels(prepared.counts[trace_id][0]).inc()
                if convention == "unknown":
                    self._metrics.traces_unknown.inc()
            self._metrics.assembly_seconds.observe(written - prepared.started)

    def _gather(
        self, ready: list[tuple[str, str, _Pending]], from_store: list[str]
    ) -> tuple[pa.Table | None, pa.Table | None]:
        """The span and event rows of these traces: held batches (in memory or on disk) for new
        traces, the store for the others (`from_store`); each span and event once, the first copy
        committed (a client's retry may have brought a second before the trace was assembled)."""
        span_parts, event_parts = self._held_rows((t, p) for t, _, p in ready if not p.read_back)
        if from_store:
            spans, events = self._store.read_spans(from_store)
            spans = spans.select(self._span_columns)
            span_parts.append(spans.cast(span_parts[0].schema) if span_parts else spans)
            event_parts.append(events)
        if not span_parts:
            return None, None
        spans = first_copies(pa.concat_tables(span_parts, promote_options="permissive"), SPAN_KEY)
        if not event_parts:
            return spans, None
        return spans, first_copies(pa.concat_tables(event_parts, promote_options="permissive"), EVENT_KEY)

    def _repeated(
        self, ready: list[tuple[str, str, _Pending]], spans: pa.Table | None, events: pa.Table | None
    ) -> set[str]:
        """The traces assembled before whose rows held here since (all of them: none spilled) only
        repeat rows stored before them: `spans` and `events` hold the first copies, read back from
        the store. A trace found assembled twice is assembled again whatever came (one row stays)."""
        late = [(t, p) for t, _, p in ready if p.from_store and p.batches and not (p.spilled or p.twice)]
        if not late or spans is None:
            return set()
        span_parts, event_parts = self._held_rows(late)
        late_spans = pa.concat_tables(span_parts, promote_options="permissive")
        late_events = pa.concat_tables(event_parts, promote_options="permissive") if event_parts else None
        return repeats_only((late_spans, late_events), (spans, events))

    def _held_rows(self, traces: Iterable[tuple[str, _Pending]]) -> tuple[list[pa.Table], list[pa.Table]]:
        """The span and event rows of these traces in the batches held for them, in the order the
        batches were committed (the first copy of a row comes first, as in the store)."""
        wanted_from: dict[int, list[str]] = {}  # held batch id -> the traces to take from it
        for trace_id, pending in traces:
            for batch_id in pending.batches:
                wanted_from.setdefault(batch_id, []).append(trace_id)
        span_parts, event_parts = [], []
        for batch_id, trace_ids in sorted(wanted_from.items()):
            held = self._held[batch_id]
            if held.file is not None:
                batch_spans, batch_events = SpillDirectory.read(held.file)
            else:
                assert held.spans is not None
                batch_spans, batch_events = held.spans, held.events
            wanted = pa.array(trace_ids, pa.string())
            span_parts.append(batch_spans.filter(pc.is_in(batch_spans["trace_id"], value_set=wanted)))
            if batch_events is not None and batch_events.num_rows:
                event_parts.append(batch_events.filter(pc.is_in(batch_events["trace_id"], value_set=wanted)))
        return span_parts, event_parts

    def _remember(self, trace_id: str, count: int) -> None:
        self._assembled[trace_id] = count
        self._assembled.move_to_end(trace_id)
        while len(self._assembled) > self._assembled_cap:
            self._assembled.popitem(last=False)
            self._may_have_older = True

    # ------------------------------------------------------------------ golden cases

    def _load_cases(self) -> None:
        self._cases_stale = False
        self._cases_loaded_at = time.monotonic()
        index = CaseIndex()
        for row in self._store.read_cases().to_pylist():
            expected = orjson.loads(row["expected_documents"]) if row["expected_documents"] else None
            index.by_id[row["case_id"]] = (expected, row["expected_answer"])
            if row["normalized_question"]:
                index.by_question.setdefault(row["normalized_question"], row["case_id"])
        self._cases = index
        self._cases_version += 1
