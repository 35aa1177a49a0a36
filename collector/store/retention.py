"""Retention: whole traces deleted past an age (`store.retention.max_age_days`) and, oldest first,
when the database passes a size on disk (`store.retention.max_bytes`).

`RetentionKeeper` runs one round every `check_every` seconds on a thread of its own (the first at
start). A round deletes through the store's own write path (`Store.delete_traces`), a few thousand
traces per transaction, and checkpoints after each transaction: deletions never conflict with span
appends, so ingestion goes on, paused only for the checkpoints. Derived aggregates
(`score_aggregates`), alerts, canary runs and cases are kept.

What DuckDB does with the space (measured with duckdb 1.5, see docs/operations.md "Retention"): a
checkpoint after a deletion frees the deleted rows' blocks, but the file is truncated only where its
end became free; blocks freed elsewhere are reused by later writes before the file grows. So the size
cap holds by reuse: the file stops growing rather than shrinking at once. The decisions below are
pure functions (`bytes_to_free`, `traces_to_delete`, `age_cutoff`); the keeper does the I/O.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from collector.background import BackgroundWorker
from collector.store.base import Housekeeping, StorageSize
from collector.store.config import RetentionConfig
from collector.telemetry import Metrics

log = logging.getLogger(__name__)

# Hysteresis: past the cap, a round deletes down to this share of it, so that the next few minutes of
# ingestion do not start another round at once.
LOW_WATER = 0.9
# Past the cap, the excess may be free space inside the file (reused before the file grows, but not
# given back): a round never deletes data below this share of the cap for it, else a file that
# cannot shrink would be emptied round after round.
MIN_LIVE_SHARE = 0.5
# Trace ids fetched per query, in delete batches: one grouping of every trace per this many batches.
_BATCHES_PER_QUERY = 10


def utc_now() -> datetime:
    """Now, as the naive UTC time stored timestamps are compared with."""
    return datetime.now(UTC).replace(tzinfo=None)


def age_cutoff(now: datetime, max_age_days: float) -> datetime:
    """Traces whose newest span ended before this are past `max_age_days`."""
    return now - timedelta(days=max_age_days)


def bytes_to_free(size: StorageSize, max_bytes: int) -> int:
    """How many bytes of data to delete: none while the file and its log fit in `max_bytes`; past
    it, enough to bring them to `LOW_WATER` of it, but never the data below `MIN_LIVE_SHARE` of it
    (the rest of the excess is free space in the file, which later writes reuse)."""
    if size.on_disk <= max_bytes:
        return 0
    wanted = size.on_disk - int(LOW_WATER * max_bytes)
    allowed = size.live - int(MIN_LIVE_SHARE * max_bytes)
    return max(0, min(wanted, allowed))


def traces_to_delete(nbytes: int, live_bytes: int, traces: int) -> int:
    """How many traces hold about `nbytes`, given that `traces` traces hold `live_bytes` (the same
    average size for every trace: an estimate, corrected by the next round)."""
    if nbytes <= 0 or traces <= 0:
        return 0
    per_trace = max(1.0, live_bytes / traces)
    return min(traces, math.ceil(nbytes / per_trace))


def traces_over_cap(nbytes: int, live_bytes: int, traces: int, hold: int | None) -> int:
    """How many of the `traces` stored traces a size round deletes to free about `nbytes`. `hold`:
    the most traces kept while deletions give no space back (`held_traces`); then only the traces
    past it are deleted, so that space DuckDB has not freed yet (it frees a row group only once all
    its rows are gone) does not make round after round delete everything."""
    wanted = traces_to_delete(nbytes, live_bytes, traces)
    return wanted if hold is None else min(wanted, max(0, traces - hold))


def held_traces(hold: int | None, traces: int) -> int:
    """The hold after a size round whose deletions gave no space back: the `traces` stored now, but
    never more than an earlier hold. Traces keep arriving while a round deletes; a hold raised to
    each round's count would let the store grow by them, round after round, for as long as DuckDB
    gives nothing back."""
    return traces if hold is None else min(hold, traces)


def batches(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    """`items` in consecutive slices of at most `size`."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass
class RoundReport:
    """What one round removed, by reason (`age`, `size`), and the bytes on disk around it."""

    traces: dict[str, int] = field(default_factory=dict)
    spans: dict[str, int] = field(default_factory=dict)
    bytes_before: int = 0
    bytes_after: int = 0

    @property
    def deleted(self) -> int:
        """Traces deleted, for every reason."""
        return sum(self.traces.values())

    def part(self, reason: str) -> str:
        """`N traces (M spans)` deleted for `reason`, as the round's log line says it."""
        return f"{self.traces.get(reason, 0)} traces ({self.spans.get(reason, 0)} spans)"


class RetentionKeeper(BackgroundWorker):
    """Deletes traces past `max_age_days` and, oldest first, over `max_bytes`, every `check_every`
    seconds on its own thread; `run_once` is one round."""

    def __init__(
        self,
        store: Housekeeping,
        config: RetentionConfig,
        metrics: Metrics,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._store = store
        self._config = config
        self._metrics = metrics
        self._clock = clock
        # The most traces kept while size rounds free no space (see held_traces, traces_over_cap).
        self._hold: int | None = None
        super().__init__("ragpulse-retention")

    def _run(self) -> None:
        self._run_every(
            self._config.check_every,
            lambda: self._store.is_leader() and self.run_once(),  # one replica deletes for all
            log,
            "retention round failed; retrying at the next round",
            self._metrics.retention_errors.inc,
            absorb=lambda exc: self._store.health.absorb(exc, "retention"),
        )

    def run_once(self) -> RoundReport:
        """One round: delete what is past the age, then what is over the size cap; log and count it."""
        started = time.perf_counter()
        report = RoundReport(bytes_before=self._measure().on_disk)
        if self._config.max_age_days is not None:
            self._delete_expired(self._config.max_age_days, report)
        if self._config.max_bytes is not None:
            self._delete_over_cap(self._config.max_bytes, report)
        report.bytes_after = self._measure().on_disk
        self._metrics.retention_seconds.observe(time.perf_counter() - started)
        if report.deleted:
            parts = []
            if self._config.max_age_days is not None:
                parts.append(f"{report.part('age')} past {self._config.max_age_days:g} days")
            if self._config.max_bytes is not None:
                parts.append(f"{report.part('size')} over the {self._config.max_bytes}-byte cap")
            log.info(
                "retention: deleted %s; store %d -> %d bytes",
                " and ".join(parts),
                report.bytes_before,
                report.bytes_after,
            )
        else:
            log.debug("retention: nothing to delete; store %d bytes", report.bytes_after)
        return report

    def _measure(self) -> StorageSize:
        size = self._store.storage_size()
        self._metrics.store_bytes.set(size.on_disk)
        self._metrics.store_free_bytes.set(size.free_bytes)
        return size

    def _delete_expired(self, max_age_days: float, report: RoundReport) -> None:
        cutoff = age_cutoff(self._clock(), max_age_days)
        limit = self._config.delete_batch * _BATCHES_PER_QUERY
        while not self._stopping.is_set():
            trace_ids = self._store.oldest_traces(limit, before=cutoff)
            self._delete(trace_ids, "age", report)
            if len(trace_ids) < limit:  # all of them: the rest is younger
                return

    def _delete_over_cap(self, max_bytes: int, report: RoundReport) -> None:
        size = self._measure()
        if size.on_disk <= max_bytes:
            self._hold = None
            return
        # The log may be most of the excess: folded into the file it takes less (compressed), and
        # the deletions of the age pass are freed.
        self._store.checkpoint()
        size = self._measure()
        nbytes = bytes_to_free(size, max_bytes)
        if not nbytes:
            if size.on_disk > max_bytes:
                log.debug(
                    "retention: the store takes %d bytes, over the %d-byte cap, but %d of them are "
                    "free space in the file, reused before it grows; nothing deleted",
                    size.on_disk,
                    max_bytes,
                    size.free_bytes,
                )
            return
        wanted = traces_over_cap(nbytes, size.live, self._store.count_traces(), self._hold)
        # One estimate per round, however many traces it means: the next round measures what the
        # deletions and the reuse of free space achieved before deleting more.
        deleted = 0
        while deleted < wanted and not self._stopping.is_set():
            limit = min(wanted - deleted, self._config.delete_batch * _BATCHES_PER_QUERY)
            trace_ids = self._store.oldest_traces(limit)
            # The oldest ids can be rows whose spans a round deleted already (assembled meanwhile):
            # deleted again, they do not count, and the next ids make up for them.
            deleted += self._delete(trace_ids, "size", report, limit)
            if len(trace_ids) < limit:  # nothing else is stored
                break
        if deleted:
            # Space given back (even if the file keeps it, as free space): the estimate can be
            # trusted next round. None given back: hold the number of traces (never raising it).
            freed = self._measure().live < size.live
            self._hold = None if freed else held_traces(self._hold, self._store.count_traces())
            if self._hold is not None:
                log.info(
                    "retention: deleting %d traces gave no space back yet (DuckDB frees whole row "
                    "groups); keeping at most %d traces until the store is under the cap",
                    deleted,
                    self._hold,
                )

    def _delete(
        self, trace_ids: Sequence[str], reason: str, report: RoundReport, quota: int | None = None
    ) -> int:
        """Delete these traces in batches (stopping once `quota` traces with spans are deleted);
        returns how many were."""
        total = 0
        for batch in batches(trace_ids, self._config.delete_batch):
            if self._stopping.is_set() or (quota is not None and total >= quota):
                break  # stopping: the rest waits for the next start
            deleted = self._store.delete_traces(batch)
            total += deleted.traces
            report.traces[reason] = report.traces.get(reason, 0) + deleted.traces
            report.spans[reason] = report.spans.get(reason, 0) + deleted.spans
            self._metrics.retention_traces_deleted.labels(reason).inc(deleted.traces)
            self._metrics.retention_spans_deleted.labels(reason).inc(deleted.spans)
            # After each batch, so that ingestion waits for one short checkpoint at a time and the
            # freed space is reusable at once.
            self._store.checkpoint()
        return total
