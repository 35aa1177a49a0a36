"""What was assembled, and how many times: the memory of this process, the store's answers about
the traces it does not remember, the claims of replicas sharing the store, and the search for
traces assembled twice.

Each assembly of a trace has a count (1 the first time): a late span's re-assembly replaces the
earlier rows. A trace not remembered here may have been assembled before (an earlier run, or
evicted from memory), or by another replica: the store knows, but each question reads all of
`traces`, so only root-less traces are asked about as they are assembled (see `look_up`), and the
others are found by a search once a minute (see `assembled_twice`).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from collector.processors.assembly.completeness import Stage, TraceState
from collector.store.base import AssemblyTables
from collector.telemetry import Metrics

log = logging.getLogger(__name__)

# Seconds between searches for traces assembled twice (see `assembled_twice`), and how far back
# before the previous search each one looks (jobs prepared before it may have been written after it).
RECONCILE_EVERY = 60.0
RECONCILE_OVERLAP = 120.0


class Claims:
    """The traces assembled here (trace id -> assembly count, the most recent last), and the
    store's word on the others."""

    def __init__(self, store: AssemblyTables, metrics: Metrics, max_traces: int, now: float) -> None:
        self._store = store
        self._metrics = metrics
        self._assembled: OrderedDict[str, int] = OrderedDict()  # trace id -> assembly count
        self._assembled_cap = max(100_000, 2 * max_traces)
        # Traces assembled before this process, or evicted from memory, or by another replica.
        self.may_have_older = store.shared
        # Wall-clock seconds: traces assembled since then are searched for a second row next.
        self._reconcile_from = time.time() - RECONCILE_OVERLAP
        self._reconciled_at = now

    @property
    def assembled(self) -> Mapping[str, int]:
        """The traces remembered as assembled, and how many times (0: only events of it, stored)."""
        return self._assembled

    def remember(self, trace_id: str, count: int | None = None) -> None:
        """Remember a trace as assembled `count` times (None: as often as remembered, or 0),
        forgetting the oldest past the cap."""
        self._assembled[trace_id] = self._assembled.get(trace_id, 0) if count is None else count
        self._assembled.move_to_end(trace_id)
        while len(self._assembled) > self._assembled_cap:
            self._assembled.popitem(last=False)
            self.may_have_older = True

    def learn(self, counts: Mapping[str, int]) -> None:
        """The store's assembly counts of traces it found assembled before."""
        for trace_id, count in counts.items():
            self._assembled[trace_id] = count

    def check_history(self) -> None:
        """At start (recovery): any trace may have been assembled before if the store has some."""
        self.may_have_older = self._store.shared or self._store.has_traces()

    def look_up(self, ready: Sequence[tuple[str, TraceState]]) -> set[str]:
        """Ask the store what it knows of these ready traces: those found assembled before become
        late (read whole from the store). Returns those of which other replicas received spans."""
        if self.may_have_older:
            # A trace not known here may have been assembled before (an earlier run, or evicted
            # from memory): such traces are re-read in full from the store and replaced. Only
            # root-less ones are looked up now: they are late spans, unless their root never came.
            # One that came with its root is new but for a repeated delivery, which `assembled_twice`
            # finds later (asking about every trace read all of `traces` for every job).
            unknown = [
                t
                for t, s in ready
                if not s.late and (self._store.shared or not (s.stage is Stage.ROOTED or s.asked))
            ]
            earlier = self._store.assembly_counts(unknown) if unknown else {}
            for trace_id, state in ready:
                if trace_id in earlier:
                    state.found_assembled()
                    self._assembled[trace_id] = earlier[trace_id]
        if not self._store.shared:
            return set()
        # Spans of these traces that reached other replicas are read back from the store.
        return self._store.traces_elsewhere([t for t, _ in ready])

    def assembly_counts(
        self, ready: Sequence[tuple[str, str, bool]], spans: pa.Table
    ) -> tuple[dict[str, tuple[str, int]], set[str]]:
        """Claim these ready traces (trace id, reason, late) for assembly here, with the spans
        gathered for them, and decide each claimed one's assembly count; every trace not lost is
        remembered as assembled. Returns the claimed traces' (reason, count), and the traces
        lost: another replica assembled these very spans already (or more of them)."""
        late = [t for t, _, is_late in ready if is_late]
        stored = self._store.assembly_counts(late) if late else {}
        per_trace = pc.value_counts(spans["trace_id"])  # events alone make no trace yet
        span_counts = dict(
            zip(per_trace.field("values").to_pylist(), per_trace.field("counts").to_pylist(), strict=True)
        )
        claimed = self._store.claim_traces(span_counts)
        lost: set[str] = set()
        if len(claimed) < len(span_counts):
            lost = {t for t in span_counts if t not in claimed}
            self._metrics.traces_claimed_elsewhere.inc(len(lost))
        counts = {
            t: (reason, claimed[t] or max(self._assembled.get(t, 0), stored.get(t, 0)) + 1)
            for t, reason, _ in ready
            if t in claimed
        }
        for trace_id, (_, count) in counts.items():
            # Known as assembled from here on, so a span arriving while the job runs re-assembles.
            self.remember(trace_id, count)
        for trace_id, _, _ in ready:
            if trace_id not in claimed and trace_id not in lost:
                self.remember(trace_id)  # events only: stored, nothing to map yet
        return counts, lost

    def reconcile_due(self, now: float) -> bool:
        """Whether to search for traces assembled twice (a file store's; with a shared store the
        traces are looked up as they are assembled)."""
        return self.may_have_older and not self._store.shared and now - self._reconciled_at >= RECONCILE_EVERY

    def assembled_twice(self, now: float) -> list[str]:
        """The traces written twice since the last search, to be re-assembled from the store.

        A ready trace that arrived with its root and is not remembered here is taken as new without
        asking the store (see `look_up`): the store can only answer by reading every row of
        `traces`, and asking for every job made each one dearer as the table grew. Such a trace
        may still have been assembled before: delivered again (a client's retry, a replay) after
        this process forgot it (a restart, or `_assembled_cap` traces since). It then has two rows
        in `traces`, for at most `RECONCILE_EVERY` seconds: this search finds them (one read of
        `traces` a minute, not one a job), and its re-assembly (`late_span`) reads every span of
        the trace and replaces both rows with one, as for any late span."""
        since = self._reconcile_from
        self._reconcile_from = time.time() - RECONCILE_OVERLAP
        self._reconciled_at = now
        return self._store.traces_assembled_twice(since)
