"""One round of mapping, as a pure function of Arrow tables: span rows in, trace rows out.

It runs in the mapping worker processes (`assembler.workers`, two by default) or, with none, in
the assembler thread: mapping is pure Python, and in processes of its own it uses the other cores
instead of competing with ingest for the GIL. Arrow tables cross the process boundary cheaply
(each table one Arrow IPC stream, `TraceTables.__getstate__`), and the cyclic garbage collector
pauses while a job runs.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pyarrow as pa

from collector.datasets import normalize_question
from collector.feedback.events import external_scores, response_ids
from collector.process_memory import use_system_allocator
from collector.processors.scoring import ScoringSetup, score_rows, score_trace
from collector.processors.slices import Dimension, span_resources, trace_slices
from collector.schema.span_records import last_received, records_by_trace, span_records
from collector.schema.trace_rows import AssembledTrace, TraceTables, concat_trace_tables, trace_tables
from evaluators.metric import Evaluator
from semconv import RagTrace, map_trace
from semconv.options import DEFAULT_OPTIONS, MappingOptions

log = logging.getLogger(__name__)


@dataclass
class CaseIndex:
    """Golden cases for matching: id -> (expected documents, expected answer); question -> id."""

    by_id: dict[str, tuple[list[str] | None, str | None]] = field(default_factory=dict)
    by_question: dict[str, str] = field(default_factory=dict)


@dataclass
class MapJob:
    spans: pa.Table
    events: pa.Table | None
    traces: dict[str, tuple[str, int]]  # trace id -> (assembly reason, assembly count)
    now_us: int
    cases_version: int
    cases: CaseIndex | None = None  # None: the worker's cached index (same version) still holds
    dimensions: tuple[Dimension, ...] = ()  # `monitoring.dimensions`: columns the traces rows get
    mapping: MappingOptions = DEFAULT_OPTIONS  # `mapping:`: which tool calls are retrievals


@dataclass
class MapResult:
    tables: TraceTables
    conventions: dict[str, str]  # trace id -> convention it was read with


_cached_cases: tuple[int, CaseIndex] = (-1, CaseIndex())

# Traces mapped and scored before their rows are built (see `run_map_job`).
MAP_CHUNK = 100


@dataclass
class Scoring:
    """The scoring stage a mapping job runs: the setup and its deterministic evaluators, built once."""

    setup: ScoringSetup
    evaluators: list[Evaluator]
    versions: dict[str, str]  # score name -> evaluator_version

    @classmethod
    def of(cls, setup: ScoringSetup | None) -> Scoring | None:
        return None if setup is None else cls(setup, setup.build(), setup.versions())


# The worker process's scoring stage, set by `init_worker`.
_worker_scoring: Scoring | None = None


def init_worker(niceness: int, parent: int, scoring: ScoringSetup | None = None) -> None:
    """Mapping worker initializer. Sets the worker's CPU niceness to `assembler.worker_nice`, takes
    Arrow memory as the service does, and makes the worker exit when the service is gone: a service
    killed with SIGKILL cannot shut its pool down, and the worker would linger. `parent` is the
    service's pid, passed in: a worker that starts after the service died must not take its new
    parent (init) for the service.

    The niceness is set, not added: a worker is started by whichever thread submits a job, usually
    the assembler thread, and inherits that thread's niceness (`assembler.thread_nice`); adding to
    it made every worker run at 19 whatever `worker_nice` said."""
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) != niceness:
            os.setpriority(os.PRIO_PROCESS, 0, niceness)
    except OSError:  # a lower niceness than the inherited one needs privileges
        log.warning(
            "could not set the mapping worker's niceness to %d; it keeps %d",
            niceness,
            os.getpriority(os.PRIO_PROCESS, 0),
        )

    def watch_parent() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch_parent, name="ragpulse-parent-watch", daemon=True).start()
    use_system_allocator()
    global _worker_scoring
    _worker_scoring = Scoring.of(scoring)


def run_worker_job(job: MapJob) -> MapResult:
    """`run_map_job` in the mapping worker, with the scoring stage it was started with.

    The cyclic garbage collector is paused while the job runs: a job allocates millions of
    short-lived objects, and the collector's passes over them cost a fifth of the job's CPU time
    while finding almost nothing (only the mapping tree's nodes form cycles, a dozen objects per
    trace). It runs again between jobs, and frees those then."""
    with _collector_paused():
        return run_map_job(job, _worker_scoring)


@contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def run_map_job(job: MapJob, scoring: Scoring | None = None) -> MapResult:
    """Map every trace of the job, score it (unless `scoring` is None), and build the rows to insert."""
    global _cached_cases
    if job.cases is not None:
        _cached_cases = (job.cases_version, job.cases)
    cases = _cached_cases[1] if _cached_cases[0] == job.cases_version else CaseIndex()
    received = last_received(job.spans, job.events)
    resources = span_resources(job.spans, [d.resource for d in job.dimensions if d.resource])
    by_trace = records_by_trace(span_records(job.spans, job.events))
    trace_ids = [t for t in by_trace if t in job.traces]
    parts: list[TraceTables] = []
    conventions: dict[str, str] = {}
    # A mapped and scored trace holds ~40 KB of Python objects until its rows are built: rows are
    # built MAP_CHUNK traces at a time, so a worker's memory does not grow with the job's size.
    # (An empty job still makes one part: its empty tables carry the schemas.)
    for start in range(0, max(len(trace_ids), 1), MAP_CHUNK):
        assembled = []
        scored = []
        mapped = []
        for trace_id in trace_ids[start : start + MAP_CHUNK]:
            spans = by_trace.pop(trace_id)
            reason, count = job.traces[trace_id]
            trace = map_trace(spans, job.mapping)
            mapped.append((trace, count, spans))
            item = AssembledTrace(trace, reason, count, received.get(trace_id))
            item.response_ids = response_ids(spans)
            item.case_match = match_case(trace, cases)
            item.slices = trace_slices(trace.root_span_id, spans, job.dimensions, resources)
            if scoring is not None:
                result = score_trace(trace, spans, scoring.setup, scoring.evaluators, item.slices.probe)
                item.sample_decision, item.sample_reason = result.decision.decision, result.decision.reason
                item.judge_status, item.scored = result.judge_status, bool(result.scores)
                if result.scores:
                    scored.append((trace, count, result.scores))
            assembled.append(item)
            conventions[trace_id] = trace.convention
        tables = trace_tables(assembled, job.now_us, [d.name for d in job.dimensions])
        if scored and scoring is not None:
            rows = score_rows(
                scored, "deterministic", job.now_us, scoring.setup.export_events, scoring.versions
            )
            tables.scores, tables.outbox = rows.scores, rows.outbox
        # The app's own evaluation events, scored or not: they are its scores, not ours.
        external = external_scores(mapped, job.now_us)
        if external is not None:
            tables.scores = external if tables.scores is None else pa.concat_tables([tables.scores, external])
        parts.append(tables)
    return MapResult(tables=concat_trace_tables(parts), conventions=conventions)


def match_case(trace: RagTrace, cases: CaseIndex) -> str | None:
    """Attach a golden case by `rag.case.id`, else by normalized question; fill missing expectations.
    Returns how it matched (`case_id`, `question`) or None."""
    match = None
    if trace.case_id is not None and trace.case_id in cases.by_id:
        match = "case_id"
    elif trace.case_id is None and trace.question and cases.by_question:
        case_id = cases.by_question.get(normalize_question(trace.question))
        if case_id is not None:
            trace.case_id, match = case_id, "question"
    if match and trace.case_id is not None:
        expected_documents, expected_answer = cases.by_id[trace.case_id]
        if trace.expected_documents is None:
            trace.expected_documents = expected_documents
        if trace.expected_answer is None:
            trace.expected_answer = expected_answer
    return match
