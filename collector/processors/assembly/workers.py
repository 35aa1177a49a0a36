"""The mapping worker processes, and where a mapping job runs: in a worker, or in the assembler
thread when there is none (`assembler.workers: 0`) or the worker died."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from collector.processors.assembly.cases import GoldenCases
from collector.processors.mapping_job import (
    MapJob,
    MapResult,
    Scoring,
    init_worker,
    run_map_job,
    run_worker_job,
)
from collector.processors.scoring import ScoringSetup

log = logging.getLogger(__name__)


def lower_thread_priority(niceness: int) -> None:
    """Lower the calling thread's CPU priority to `niceness` (Linux schedules threads apart: a thread
    id is a process id to `setpriority`); never raise it, where the process already runs nicer.
    Elsewhere, or where the OS refuses, the thread keeps its priority."""
    if not niceness or not sys.platform.startswith("linux"):
        return
    thread = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, thread, max(niceness, os.getpriority(os.PRIO_PROCESS, thread)))
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


def submit_job(pool: ProcessPoolExecutor, job: MapJob) -> Future[MapResult]:
    """`run_worker_job(job)` in a worker of `pool`.

    A spawned process first runs the parent's main module, and the `ragpulse` command's imports
    everything (DuckDB, gRPC, the HTTP stack, the OpenTelemetry SDK): about 70 MiB a worker that
    mapping never uses. `submit` starts a worker, synchronously, when it finds none idle, so the
    main module does not name its file meanwhile, and the worker imports only what it needs."""
    with main_module_hidden():
        return pool.submit(run_worker_job, job)


@contextlib.contextmanager
def main_module_hidden() -> Iterator[None]:
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


class MappingWorkers:
    """Runs mapping jobs in the worker processes, or in this thread: without workers, or once the
    pool broke (a worker died), when jobs are mapped and scored here from then on."""

    def __init__(self, workers: int, niceness: int, scoring: ScoringSetup | None, cases: GoldenCases) -> None:
        self._workers = workers
        self.pool: ProcessPoolExecutor | None = None
        if workers:
            self.pool = mapping_pool(workers, niceness, scoring)
        # Mapping in this thread (no worker, or the worker died) scores here too.
        self._scoring = Scoring.of(scoring)
        self._cases = cases
        self._cases_sent = -1  # the version the worker process holds

    @property
    def processes(self) -> int:
        """The worker processes mapping (0: mapping in this thread)."""
        return self._workers if self.pool is not None else 0

    def submit(self, job: MapJob) -> Future[MapResult]:
        """Start mapping `job`: in a worker, or here (the future is then done)."""
        if self.pool is not None:
            # One worker keeps the index it was sent; with several, any may take the job.
            if self._cases_sent != self._cases.version or self._workers > 1:
                job.cases = self._cases.index
                self._cases_sent = self._cases.version
            try:
                return submit_job(self.pool, job)
            except BrokenProcessPool:
                self._lose_worker()
        return self._run_here(job)

    def result(self, job: MapJob, future: Future[MapResult]) -> MapResult:
        """The mapped job, once done; mapped here if its worker died."""
        try:
            return future.result()
        except BrokenProcessPool:
            self._lose_worker()
            return self._run_here(job).result()

    def shutdown(self) -> None:
        """Stop the worker processes, dropping the jobs not started."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def _run_here(self, job: MapJob) -> Future[MapResult]:
        job.cases = self._cases.index
        future: Future[MapResult] = Future()
        future.set_result(run_map_job(job, self._scoring))
        return future

    def _lose_worker(self) -> None:
        log.error("the mapping worker process died; mapping in the assembler thread from now on")
        self.pool = None
