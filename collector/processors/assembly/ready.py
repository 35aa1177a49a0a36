"""Ready traces, until they are mapping jobs: the queue where they wait for their turn (and, at a
low rate, for company), and a chunk of them made into a job: their rows gathered, their assembly
counts decided."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from collector.processors.assembly.cases import GoldenCases
from collector.processors.assembly.claims import Claims
from collector.processors.assembly.completeness import History, TraceState
from collector.processors.assembly.holding import HeldTrace, Holding
from collector.processors.assembly.writing import Prepared
from collector.processors.config import AssemblerConfig
from collector.processors.mapping_job import MapJob
from collector.processors.slices import Dimension
from semconv.options import MappingOptions

# Traces per mapping job and per commit of their rows: large enough that a job's and a commit's
# fixed costs do not show. (The worker builds rows `MAP_CHUNK` traces at a time: its memory does
# not grow with this.)
ROUND_TRACES = 500


class Queued(NamedTuple):
    """A ready trace waiting for its turn: why it is ready, its state, and where its rows are held."""

    trace_id: str
    reason: str
    state: TraceState
    held: HeldTrace


def from_store(trace_id: str, reason: str, state: TraceState) -> Queued:
    """A trace queued to be assembled from the store alone (recovery, or found assembled twice)."""
    return Queued(trace_id, reason, state, HeldTrace())


def recovery(trace_id: str) -> Queued:
    """A trace stored but not (or not completely) assembled: assembled from the store."""
    return from_store(trace_id, "recovery", TraceState(0, 0, history=History.ASSEMBLED_BEFORE))


class ReadyQueue:
    """Ready traces waiting for their turn, oldest first (a burst leaves more than a round maps)."""

    def __init__(self, config: AssemblerConfig, clock: Callable[[], float]) -> None:
        self._config = config
        self._clock = clock
        self._queue: deque[Queued] = deque()
        self._since = -math.inf  # when the queue last stopped being empty
        self._recently: deque[tuple[float, int]] = deque()  # (round, traces it found ready)

    def __len__(self) -> int:
        return len(self._queue)

    def trace_ids(self) -> set[str]:
        """The traces queued."""
        return {queued.trace_id for queued in self._queue}

    def add(self, ready: Sequence[Queued], now: float) -> None:
        """Queue the traces a round found ready at `now` (those of `pressure` last)."""
        if ready:
            if not self._queue:
                self._since = now
            if ready[-1].reason == "pressure":  # at `max_traces`: no waiting
                self._since = -math.inf
            self._recently.append((now, len(ready)))
        while self._recently and now - self._recently[0][0] > self._config.batch_wait:
            self._recently.popleft()
        self._queue.extend(ready)

    def put(self, queued: Iterable[Queued]) -> None:
        """Queue traces to assemble from the store (they are not counted in the rate)."""
        self._queue.extend(queued)

    def take(self) -> list[Queued]:
        """The oldest traces, a job's worth."""
        return [self._queue.popleft() for _ in range(min(ROUND_TRACES, len(self._queue)))]

    def gathering(self) -> bool:
        """Whether the ready traces wait for more before a job: at a rate too low to fill a job
        within `batch_wait` seconds, up to `batch_wait` after the first of them was ready."""
        return (
            sum(n for _, n in self._recently) < ROUND_TRACES
            and self._clock() - self._since < self._config.batch_wait
        )


class JobPreparer:
    """Makes a chunk of ready traces a mapping job."""

    def __init__(
        self,
        holding: Holding,
        claims: Claims,
        cases: GoldenCases,
        dimensions: tuple[Dimension, ...],
        mapping: MappingOptions,
    ) -> None:
        self._holding = holding
        self._claims = claims
        self._cases = cases
        self._dimensions = dimensions  # slice dimensions the mapping job reads
        self._mapping = mapping  # `mapping:`, sent with every job

    def prepare(self, ready: list[Queued]) -> Prepared | None:
        """Collect the rows of these traces and decide each one's assembly count (None: nothing
        to map)."""
        started = time.perf_counter()
        elsewhere = self._claims.look_up([(q.trace_id, q.state) for q in ready])
        # Late traces, and spans not held here (spilled, or received by other replicas), are read
        # from the store.
        back = [q.state.late or q.held.spilled or q.trace_id in elsewhere for q in ready]
        spans, events = self._holding.gather(
            [(q.trace_id, q.held) for q, b in zip(ready, back, strict=True) if not b],
            [q.trace_id for q, b in zip(ready, back, strict=True) if b],
        )
        late = [(q.trace_id, q.held) for q in ready if q.state.history is History.ASSEMBLED_BEFORE]
        repeated = self._holding.repeated(late, spans, events)
        for queued in ready:
            self._holding.release(queued.held)
        if spans is None:
            return None
        if repeated:
            # Late rows that only repeat rows the store had before them (an export retried after
            # its commit, a capture replayed again): nothing new to assemble, or to score again.
            for trace_id in repeated:
                self._claims.remember(trace_id)
            ready = [q for q in ready if q.trace_id not in repeated]
            spans, events = _rows_of(spans, events, repeated, keep=False)
        counts, lost = self._claims.assembly_counts(
            [(q.trace_id, q.reason, q.state.late) for q in ready], spans
        )
        if lost:
            spans, events = _rows_of(spans, events, counts, keep=True)
        if not counts:
            return None
        self._cases.refresh()
        job = MapJob(
            spans,
            events,
            counts,
            int(time.time() * 1_000_000),
            self._cases.version,
            dimensions=self._dimensions,
            mapping=self._mapping,
        )
        return Prepared(job, counts, started)


def _rows_of(
    spans: pa.Table, events: pa.Table | None, trace_ids: Iterable[str], keep: bool
) -> tuple[pa.Table, pa.Table | None]:
    """The rows of these traces (`keep`), or those of every other trace."""
    value_set = pa.array(list(trace_ids), pa.string())

    def wanted(table: pa.Table) -> pa.ChunkedArray:
        found = pc.is_in(table["trace_id"], value_set=value_set)
        return found if keep else pc.invert(found)

    return spans.filter(wanted(spans)), None if events is None else events.filter(wanted(events))
