"""A rescore's deterministic evaluators over one batch of stored traces, as a pure function of Arrow
tables: span rows in, score rows out.

It runs in worker processes of its own (`assembler.workers` of them, spawned as the mapping workers
are: mapping and scoring are pure Python, and the other core does half the work), or in the calling
thread with none. The traces are mapped again from their stored spans with the expectations the
assembler stored, as the judge stage maps them (`judge_trace`, without redaction: the online
deterministic scores read the spans as stored too).
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from collector.processors.assembly.workers import main_module_hidden
from collector.processors.judge_input import judge_trace
from collector.processors.mapping_job import init_worker
from collector.processors.scoring import ScoreRows, score_rows
from collector.schema.span_records import records_by_trace, span_records
from evaluators.metric import Evaluator
from evaluators.registry import build_evaluators, entry_version
from semconv.options import DEFAULT_OPTIONS, MappingOptions

# trace id -> (revision, expected answer, expected documents as JSON text)
TraceInputs = dict[str, tuple[int, str | None, str | None]]


@dataclass
class DeterministicSetup:
    """What the workers need, picklable: the entries of the score names rescored without a judge."""

    entries: list[dict[str, Any]]
    mapping: MappingOptions = DEFAULT_OPTIONS
    export_events: bool = False


@dataclass
class BatchJob:
    spans: pa.Table
    events: pa.Table
    traces: TraceInputs
    now_us: int
    run_id: str


@dataclass
class _Built:
    setup: DeterministicSetup
    evaluators: list[Evaluator] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, setup: DeterministicSetup) -> _Built:
        versions = {str(e["name"]): entry_version(e) for e in setup.entries}
        return cls(setup, build_evaluators(setup.entries), versions)


_worker: _Built | None = None


def _init(niceness: int, parent: int, setup: DeterministicSetup) -> None:
    init_worker(niceness, parent)  # niceness, exit with the parent, the allocator
    global _worker
    _worker = _Built.of(setup)


def _run_in_worker(job: BatchJob) -> ScoreRows:
    assert _worker is not None, "initialised by _init"
    return score_batch(job, _worker)


def score_batch(job: BatchJob, built: _Built) -> ScoreRows:
    """The deterministic scores of the job's traces (those with spans), as rows of this run."""
    scored = []
    for trace_id, records in records_by_trace(span_records(job.spans, job.events)).items():
        inputs = job.traces.get(trace_id)
        if inputs is None:
            continue
        revision, expected_answer, expected_documents = inputs
        trace = judge_trace(records, expected_answer, expected_documents, built.setup.mapping)
        scored.append((trace, revision, [evaluate(trace) for evaluate in built.evaluators]))
    return score_rows(
        scored, "deterministic", job.now_us, built.setup.export_events, built.versions, job.run_id
    )


class DeterministicScorer:
    """Scores batches in `workers` processes (0: in this thread); `close` ends them."""

    def __init__(self, setup: DeterministicSetup, workers: int, niceness: int) -> None:
        self._built = _Built.of(setup)
        self._workers = workers
        self._pool: ProcessPoolExecutor | None = None
        if workers:
            import multiprocessing

            # Spawned, not forked: the caller may run gRPC and DuckDB threads (inside `serve`).
            self._pool = ProcessPoolExecutor(
                workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init,
                initargs=(niceness, os.getpid(), setup),
            )

    def submit(self, jobs: list[BatchJob]) -> list[Future[ScoreRows]]:
        """Start scoring `jobs` (one per worker, as `split` makes them)."""
        if self._pool is None:
            futures = []
            for job in jobs:
                future: Future[ScoreRows] = Future()
                future.set_result(score_batch(job, self._built))
                futures.append(future)
            return futures
        # A worker starts at its first job: without the main module's file, as the mapping workers do.
        with main_module_hidden():
            return [self._pool.submit(_run_in_worker, job) for job in jobs]

    def split(
        self, spans: pa.Table, events: pa.Table, traces: TraceInputs, now_us: int, run_id: str
    ) -> list[BatchJob]:
        """The batch as one job per worker (one without workers), each with its traces' rows."""
        ids = list(traces)
        parts = max(1, min(self._workers, len(ids)))
        jobs = []
        for index in range(parts):
            chunk = {t: traces[t] for t in ids[index::parts]}
            keys = pa.array(list(chunk), pa.string())
            jobs.append(
                BatchJob(
                    spans.filter(pc.is_in(spans["trace_id"], value_set=keys)),
                    events.filter(pc.is_in(events["trace_id"], value_set=keys)),
                    chunk,
                    now_us,
                    run_id,
                )
            )
        return jobs

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
