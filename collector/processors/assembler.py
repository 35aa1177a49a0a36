"""Trace assembly: groups committed spans by trace, decides when a trace is complete, maps it with
`semconv.map_trace` and writes `traces`, `steps` and `documents`.

A trace is complete when its root span has arrived (OTel exports spans when they end) and no span
arrived for `decision_wait` seconds, or `max_wait` seconds after its first span. At most
`max_traces` are in flight; past that the oldest are assembled early (reason `pressure`).

Spans wait in memory as the Arrow tables the writer committed (columnar text, no per-span Python
objects) and are read into records only when their trace is assembled. A span that arrives after
its trace was assembled is stored as usual and the trace is re-assembled from the store (reason
`late_span`), replacing the earlier rows. On start, traces whose spans were stored but not (or not
completely) assembled, e.g. after a crash, are assembled from the store (reason `recovery`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from collector.config import AssemblerConfig
from collector.datasets import normalize_question
from collector.otlp.batch import SpanBatch
from collector.processors.span_records import SPAN_COLUMNS, records_by_trace, span_records
from collector.store.duckdb_store import Store
from collector.store.trace_rows import AssembledTrace, trace_tables
from collector.store.trace_store import TraceStore, last_received
from collector.telemetry import Metrics
from semconv import RagTrace, SpanRecord, map_trace

log = logging.getLogger(__name__)

RECOVERY_CHUNK = 2_000  # traces read back from the store per recovery round


@dataclass
class _Pending:
    first_seen: float
    last_seen: float
    root_seen: bool = False
    batches: set[int] = field(default_factory=set)
    from_store: bool = False  # late span or recovery: read every span of the trace from the store


@dataclass
class _HeldBatch:
    spans: pa.Table
    events: pa.Table
    waiting: int  # traces with spans in this batch that are not assembled yet


@dataclass
class _CaseIndex:
    by_id: dict[str, tuple[list[str] | None, str | None]] = field(default_factory=dict)
    by_question: dict[str, str] = field(default_factory=dict)


class TraceAssembler:
    """Runs on its own thread, fed by the span writer's post-commit listener."""

    def __init__(
        self,
        store: Store,
        config: AssemblerConfig,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._clock = clock
        self._store = TraceStore(store)
        self._inbox: deque[SpanBatch] = deque()
        self._pending: dict[str, _Pending] = {}
        self._held: dict[int, _HeldBatch] = {}
        self._next_batch = 0
        self._assembled: OrderedDict[str, int] = OrderedDict()  # trace id -> assembly count
        self._assembled_cap = max(100_000, 2 * config.max_traces)
        self._may_have_older = False  # traces assembled before this process, or evicted from memory
        self._cases = _CaseIndex()
        self._cases_stale = True
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="ragpulse-assembler", daemon=True)

    # ------------------------------------------------------------------ interface

    def on_commit(self, batch: SpanBatch) -> None:
        """Writer listener: hand over a committed batch (cheap; the work happens on our thread)."""
        if batch.spans.num_rows:
            with self._cond:
                self._inbox.append(batch)
                self._cond.notify()

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
        self._store.close()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        try:
            self._recover()
        except Exception:
            self._metrics.assembly_errors.inc()
            log.exception("trace recovery failed; the traces are retried on the next start")
        while True:
            with self._cond:
                if not self._stopping:
                    self._cond.wait(self._config.poll_interval)
                if self._stopping:
                    return
                batches = list(self._inbox)
                self._inbox.clear()
            try:
                self.run_round(batches)
            except Exception:
                self._metrics.assembly_errors.inc()
                log.exception("trace assembly round failed; its traces are retried on the next start")

    def run_round(self, batches: list[SpanBatch]) -> int:
        """Take in committed batches, then assemble every trace that is ready. Returns how many."""
        now = self._clock()
        for batch in batches:
            self._hold(batch, now)
        ready = self._ready(now)
        self._metrics.traces_in_flight.set(len(self._pending) - len(ready))
        if ready:
            self._assemble(ready)
        return len(ready)

    def _recover(self) -> None:
        pending = self._store.pending_trace_ids()
        self._may_have_older = self._store.has_traces()
        if pending:
            log.info("assembling %d trace(s) stored but not assembled before the last stop", len(pending))
        for start in range(0, len(pending), RECOVERY_CHUNK):
            chunk = pending[start : start + RECOVERY_CHUNK]
            self._assemble([(trace_id, "recovery", _Pending(0, 0, from_store=True)) for trace_id in chunk])

    # ------------------------------------------------------------------ bookkeeping

    def _hold(self, batch: SpanBatch, now: float) -> None:
        spans = batch.spans.select([*SPAN_COLUMNS, "received_at"])
        batch_id = self._next_batch
        self._next_batch += 1
        trace_ids = spans["trace_id"].to_pylist()
        roots = pc.is_null(spans["parent_span_id"]).to_pylist()
        touched: set[str] = set()
        for trace_id, is_root in zip(trace_ids, roots, strict=True):
            pending = self._pending.get(trace_id)
            if pending is None:
                pending = _Pending(now, now, from_store=trace_id in self._assembled)
                self._pending[trace_id] = pending
            pending.last_seen = now
            pending.root_seen = pending.root_seen or bool(is_root)
            touched.add(trace_id)
        for trace_id in touched:
            self._pending[trace_id].batches.add(batch_id)
        self._held[batch_id] = _HeldBatch(spans, batch.events, len(touched))

    def _ready(self, now: float) -> list[tuple[str, str, _Pending]]:
        cfg = self._config
        ready = []
        for trace_id, p in self._pending.items():
            if p.root_seen and now - p.last_seen >= cfg.decision_wait:
                ready.append((trace_id, "late_span" if p.from_store else "complete", p))
            elif now - p.first_seen >= cfg.max_wait:
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

    def _release(self, pending: _Pending) -> None:
        for batch_id in pending.batches:
            held = self._held[batch_id]
            held.waiting -= 1
            if held.waiting <= 0:
                del self._held[batch_id]

    # ------------------------------------------------------------------ assembly

    def _assemble(self, ready: list[tuple[str, str, _Pending]]) -> None:
        started = time.perf_counter()
        if self._may_have_older:
            # A trace not known here may have been assembled before (an earlier run, or evicted
            # from memory): such traces are re-read in full from the store and replaced.
            unknown = [t for t, _, p in ready if not p.from_store]
            earlier = self._store.assembly_counts(unknown) if unknown else {}
            for trace_id, _, pending in ready:
                if trace_id in earlier:
                    pending.from_store = True
                    self._assembled[trace_id] = earlier[trace_id]
        from_store = [t for t, _, p in ready if p.from_store]
        stored_counts = self._store.assembly_counts(from_store) if from_store else {}
        records, received = self._read_records(ready, from_store)
        if self._cases_stale:
            self._load_cases()
        assembled = []
        for trace_id, reason, pending in ready:
            self._release(pending)
            spans = records.get(trace_id)
            if not spans:
                continue
            previous = max(self._assembled.get(trace_id, 0), stored_counts.get(trace_id, 0))
            trace = map_trace(spans)
            item = AssembledTrace(trace, reason, previous + 1, received.get(trace_id))
            item.case_match = self._match_case(trace)
            assembled.append(item)
        if not assembled:
            return
        replace = [a.trace.trace_id for a in assembled if a.assembly_count > 1]
        self._store.write(trace_tables(assembled, int(time.time() * 1_000_000)), replace)
        for item in assembled:
            self._remember(item.trace.trace_id, item.assembly_count)
            self._metrics.traces_assembled.labels(item.reason).inc()
            if item.trace.convention == "unknown":
                self._metrics.traces_unknown.inc()
        self._metrics.assembly_seconds.observe(time.perf_counter() - started)

    def _read_records(
        self, ready: list[tuple[str, str, _Pending]], from_store: list[str]
    ) -> tuple[dict[str, list[SpanRecord]], dict[str, int]]:
        """Span records per trace: held batches for new traces, the store for the others."""
        in_memory: dict[int, list[str]] = {}
        for trace_id, _, pending in ready:
            if not pending.from_store:
                for batch_id in pending.batches:
                    in_memory.setdefault(batch_id, []).append(trace_id)
        span_parts, event_parts = [], []
        for batch_id, trace_ids in in_memory.items():
            held = self._held[batch_id]
            wanted = pa.array(trace_ids, pa.string())
            span_parts.append(held.spans.filter(pc.is_in(held.spans["trace_id"], value_set=wanted)))
            if held.events.num_rows:
                event_parts.append(held.events.filter(pc.is_in(held.events["trace_id"], value_set=wanted)))
        if from_store:
            spans, events, _ = self._store.read_spans(from_store)
            span_parts.append(spans.cast(span_parts[0].schema) if span_parts else spans)
            event_parts.append(events)
        if not span_parts:
            return {}, {}
        spans = pa.concat_tables(span_parts, promote_options="permissive")
        events = pa.concat_tables(event_parts, promote_options="permissive") if event_parts else None
        return records_by_trace(span_records(spans, events)), last_received(spans)

    def _remember(self, trace_id: str, count: int) -> None:
        self._assembled[trace_id] = count
        self._assembled.move_to_end(trace_id)
        while len(self._assembled) > self._assembled_cap:
            self._assembled.popitem(last=False)
            self._may_have_older = True

    # ------------------------------------------------------------------ golden cases

    def _load_cases(self) -> None:
        self._cases_stale = False
        index = _CaseIndex()
        for row in self._store.cases().to_pylist():
            expected = orjson.loads(row["expected_documents"]) if row["expected_documents"] else None
            index.by_id[row["case_id"]] = (expected, row["expected_answer"])
            if row["normalized_question"]:
                index.by_question.setdefault(row["normalized_question"], row["case_id"])
        self._cases = index

    def _match_case(self, trace: RagTrace) -> str | None:
        """Attach a golden case by `rag.case.id`, else by question; fills missing expectations."""
        match = None
        if trace.case_id is not None and trace.case_id in self._cases.by_id:
            match = "case_id"
        elif trace.case_id is None and trace.question:
            case_id = self._cases.by_question.get(normalize_question(trace.question))
            if case_id is not None:
                trace.case_id, match = case_id, "question"
        if match and trace.case_id is not None:
            expected_documents, expected_answer = self._cases.by_id[trace.case_id]
            if trace.expected_documents is None:
                trace.expected_documents = expected_documents
            if trace.expected_answer is None:
                trace.expected_answer = expected_answer
        return match
