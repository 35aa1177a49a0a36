"""The rows of the traces in flight, held for their assembly.

Spans wait in memory as the Arrow tables the writer committed (columnar text, no per-span Python
objects) and are read into records only when their trace is assembled. Past `max_held_spans` held,
a batch's rows go to the spill directory (local disk: a sequential read, cheaper than DuckDB's), or
without one are left in the store and read back from it. A late span's trace is read whole from
the store, unless all of its late rows only repeat rows stored before them (an export retried
after its commit, a capture replayed): nothing new, so the trace is not assembled, nor scored,
again. Each span and event is read once, the first copy committed, as the `spans` and
`span_events` views show it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from collector.otlp.batch import SpanBatch
from collector.processors.assembly.completeness import Arrivals
from collector.processors.spill import SpillDirectory, SpilledBatch
from collector.schema.span_records import first_copies, repeats_only
from collector.schema.tables import EVENT_KEY, SPAN_KEY
from collector.store.base import SpanReads
from collector.telemetry import Metrics


@dataclass(slots=True)
class Inbound:
    """A committed batch on its way to assembly: its arrivals, and the batch itself unless its rows
    are left in the store (or on disk: `file`)."""

    arrivals: Arrivals
    batch: SpanBatch | None
    file: SpilledBatch | None = None  # the batch's rows, on disk


def inbound(batch: SpanBatch, keep: bool = True, file: SpilledBatch | None = None) -> Inbound:
    """What a committed batch brings: its arrivals, with the batch if `keep`."""
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
    arrivals = Arrivals(
        trace_ids, roots, batch.spans.num_rows, entries, service_of=lambda row: services[row].as_py()
    )
    return Inbound(arrivals, batch if keep else None, file)


@dataclass
class HeldBatch:
    """A committed batch held until every trace with rows in it is assembled."""

    spans: pa.Table | None  # None: on disk (`file`)
    events: pa.Table | None
    waiting: int  # traces with spans in this batch that are not assembled yet
    file: SpilledBatch | None = None


@dataclass(slots=True)
class HeldTrace:
    """Where one trace's rows wait: the held batches with rows of it, in commit order."""

    batches: list[int] = field(default_factory=list)
    spilled: bool = False  # some of its rows were not held (memory full, no spill): in the store


class Holding:
    """The held batches, in memory up to `max_held_spans` spans, then in the spill directory."""

    def __init__(
        self,
        store: SpanReads,
        max_held_spans: int,
        span_columns: list[str],
        spill: SpillDirectory | None,
        metrics: Metrics,
    ) -> None:
        self._store = store
        self._max_held_spans = max_held_spans
        self._span_columns = span_columns  # the span columns mapping reads
        self._spill = spill  # None: rows past `max_held_spans` are read back from the store
        self._metrics = metrics
        self._held: dict[int, HeldBatch] = {}
        self._held_spans = 0
        self._next_batch = 0
        self._traces: dict[str, HeldTrace] = {}

    def not_kept(self, batch: SpanBatch) -> Inbound:
        """A batch whose rows memory may not hold: written to the spill directory, if any (else
        they are read back from the store)."""
        file = self._spill_batch(batch) if self._spill is not None else None
        return inbound(batch, keep=False, file=file)

    def hold(self, item: Inbound) -> None:
        """Keep a batch's rows for the assembly of its traces: in memory, or on disk once
        `max_held_spans` are held (without a spill directory, and for a batch whose rows were not
        kept, they are read back from the store)."""
        batch = item.batch
        spans = None if batch is None else batch.spans.select(self._span_columns)
        batch_id = self._next_batch
        self._next_batch += 1
        touched = [self._traces.setdefault(t, HeldTrace()) for t in set(item.arrivals.trace_ids)]
        over = spans is not None and self._held_spans + spans.num_rows > self._max_held_spans
        file = item.file
        if file is None and batch is not None and over and self._spill is not None:
            file = self._spill_batch(batch)
        if file is None and (batch is None or spans is None or over):
            for trace in touched:
                trace.spilled = True
            self._metrics.assembly_spilled_spans.inc(item.arrivals.spans)
            return
        for trace in touched:
            trace.batches.append(batch_id)
        if file is not None:
            self._held[batch_id] = HeldBatch(None, None, len(touched), file)
            return
        assert batch is not None and spans is not None
        self._held[batch_id] = HeldBatch(spans, batch.events, len(touched))
        self._held_spans += spans.num_rows

    def take(self, trace_id: str) -> HeldTrace:
        """The rows held for a trace that is ready (none for a trace not in flight)."""
        return self._traces.pop(trace_id, None) or HeldTrace()

    def release(self, trace: HeldTrace) -> None:
        """A trace's rows were gathered: a batch none of whose traces waits any more is dropped."""
        for batch_id in trace.batches:
            held = self._held[batch_id]
            held.waiting -= 1
            if held.waiting <= 0:
                del self._held[batch_id]
                if held.file is not None and self._spill is not None:
                    self._spill.remove(held.file)
                elif held.spans is not None:
                    self._held_spans -= held.spans.num_rows

    def close(self) -> None:
        """Empty the spill directory (at stop: the store has the spans)."""
        if self._spill is not None:
            self._spill.close()

    def gather(
        self, held: Iterable[tuple[str, HeldTrace]], from_store: Sequence[str]
    ) -> tuple[pa.Table | None, pa.Table | None]:
        """The span and event rows of these traces: held batches (in memory or on disk) for new
        traces (`held`), the store for the others (`from_store`); each span and event once, the
        first copy committed (a client's retry may have brought a second before the trace was
        assembled)."""
        span_parts, event_parts = self._held_rows(held)
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

    def repeated(
        self, late: Iterable[tuple[str, HeldTrace]], spans: pa.Table | None, events: pa.Table | None
    ) -> set[str]:
        """Those of these traces assembled before (`late`: not those found assembled twice, which
        are assembled again whatever came) whose rows held here since (all of them: none spilled)
        only repeat rows stored before them: `spans` and `events` hold the first copies, read back
        from the store."""
        whole = [(t, held) for t, held in late if held.batches and not held.spilled]
        if not whole or spans is None:
            return set()
        span_parts, event_parts = self._held_rows(whole)
        late_spans = pa.concat_tables(span_parts, promote_options="permissive")
        late_events = pa.concat_tables(event_parts, promote_options="permissive") if event_parts else None
        return repeats_only((late_spans, late_events), (spans, events))

    def _held_rows(self, traces: Iterable[tuple[str, HeldTrace]]) -> tuple[list[pa.Table], list[pa.Table]]:
        """The span and event rows of these traces in the batches held for them, in the order the
        batches were committed (the first copy of a row comes first, as in the store)."""
        wanted_from: dict[int, list[str]] = {}  # held batch id -> the traces to take from it
        for trace_id, trace in traces:
            for batch_id in trace.batches:
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

    def _spill_batch(self, batch: SpanBatch) -> SpilledBatch:
        assert self._spill is not None
        self._metrics.assembly_spill_file_spans.inc(batch.spans.num_rows)
        return self._spill.write(batch.spans.select(self._span_columns), batch.events)
