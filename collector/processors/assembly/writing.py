"""Mapping jobs in flight, and the writing of their rows.

A write has a fixed cost in DuckDB (a few milliseconds a statement, whatever its rows): finished
jobs are written several in one transaction, which pays it once. Jobs that share a trace (a late
span re-assembled it while the first job ran) are written apart, in order, so the later rows
replace the earlier.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import TypeVar

from collector.processors.assembly.workers import MappingWorkers
from collector.processors.mapping_job import MapJob, MapResult
from collector.processors.scoring import record_metrics, scored_received_times
from collector.processors.slices import SliceCaps
from collector.schema.trace_rows import concat_trace_tables
from collector.store.base import AssemblyTables
from collector.telemetry import Metrics

T = TypeVar("T")


@dataclass
class Prepared:
    """A mapping job, with each of its traces' (assembly reason, count), and when it was begun."""

    job: MapJob
    counts: dict[str, tuple[str, int]]
    started: float


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


class JobsInFlight:
    """The jobs sent to mapping, oldest first, until their rows are written to the store."""

    def __init__(
        self,
        workers: MappingWorkers,
        store: AssemblyTables,
        metrics: Metrics,
        caps: SliceCaps | None,
        clock: Callable[[], float],
    ) -> None:
        self._workers = workers
        self._store = store
        self._metrics = metrics
        self._caps = caps  # the cap on slice values, applied to the mapped traces
        self._clock = clock
        self._jobs: deque[tuple[Prepared, Future[MapResult]]] = deque()

    def __len__(self) -> int:
        return len(self._jobs)

    def traces(self) -> int:
        """The traces being mapped, or mapped and not written yet."""
        return sum(len(prepared.counts) for prepared, _ in self._jobs)

    def trace_ids(self) -> set[str]:
        """The traces of the jobs in flight."""
        return {trace_id for prepared, _ in self._jobs for trace_id in prepared.counts}

    def send(self, prepared: Prepared) -> None:
        """Start mapping a job (in a worker, or here: see `MappingWorkers`)."""
        self._jobs.append((prepared, self._workers.submit(prepared.job)))

    def wait_oldest(self, jobs: int) -> None:
        """Wait until the `jobs` oldest are mapped."""
        wait([future for _, future in itertools.islice(self._jobs, jobs)])

    def finish_done(self) -> None:
        """Write the jobs done at the head of the queue, in order, together where they can be."""
        done = []
        while self._jobs and self._jobs[0][1].done():
            done.append(self._jobs.popleft())
        if done:
            self._finish(done)

    def finish_all(self) -> None:
        """Write every job, waiting for those still mapping."""
        if self._jobs:
            jobs = list(self._jobs)
            self._jobs.clear()
            self._finish(jobs)

    def _finish(self, jobs: list[tuple[Prepared, Future[MapResult]]]) -> None:
        """Write the results of these jobs (waiting for each), several in one transaction, and apart
        where they share a trace (see the module's docstring)."""
        done = [(prepared, self._workers.result(prepared.job, future)) for prepared, future in jobs]
        for group in runs_without_repeats(done, lambda job: job[0].counts):
            self._write_group(group)

    def _write_group(self, group: list[tuple[Prepared, MapResult]]) -> None:
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
