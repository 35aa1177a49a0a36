"""The single writer: a bounded queue of decoded exports and one thread that group-commits them.

Every export waits on a future that resolves only after the transaction holding its spans has
committed, so an acknowledged span is on disk (DuckDB syncs its WAL on commit). While one commit
runs, new exports queue up and share the next one. The queue is bounded in spans: past the bound,
`submit` raises `Overloaded` and the receivers answer with a retryable status.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

from collector.lifecycle import Component, remaining
from collector.otlp.batch import SpanBatch, concat_batches
from collector.store.base import SpanLog
from collector.telemetry import Metrics

log = logging.getLogger(__name__)

CommitListener = Callable[[SpanBatch], None]


class Overloaded(RuntimeError):
    """The store is behind: the export should be retried later."""


class Stopped(RuntimeError):
    """ragpulse is shutting down and takes no more exports."""


def _rows(batch: SpanBatch) -> int:
    """A batch's weight in the queue: spans plus events."""
    return batch.accepted + batch.events.num_rows


class SpanWriter(Component):
    """Group-commits queued span batches into the store from one background thread."""

    name = "writer"

    def __init__(
        self,
        store: SpanLog,
        metrics: Metrics,
        max_queue_spans: int,
        max_commit_spans: int,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._max_queue_spans = max_queue_spans
        self._max_commit_spans = max_commit_spans
        self._queue: deque[tuple[SpanBatch, Future[None]]] = deque()
        self._queued_spans = 0
        self._cond = threading.Condition()
        self._stopping = False
        self._listeners: list[CommitListener] = []
        self._gates: list[Callable[[], bool]] = []
        self._thread = threading.Thread(target=self._run, name="ragpulse-writer", daemon=True)

    def add_listener(self, listener: CommitListener) -> None:
        """Call `listener(batch)` on the writer thread after each commit (assembler, forwarder)."""
        self._listeners.append(listener)

    def add_gate(self, accepting: Callable[[], bool]) -> None:
        """Refuse exports (`Overloaded`) while `accepting()` is False: a consumer that is behind
        (the assembler) pushes back on ingestion instead of growing without bound."""
        self._gates.append(accepting)

    def start(self) -> None:
        self._thread.start()

    @property
    def queued_spans(self) -> int:
        return self._queued_spans

    def submit(self, batch: SpanBatch) -> Future[None]:
        """Queue a batch; the future resolves once it is committed (or fails with the store's error)."""
        future: Future[None] = Future()
        size = _rows(batch)
        with self._cond:
            if self._stopping:
                raise Stopped("ragpulse is shutting down")
            if not all(accepting() for accepting in self._gates):
                self._metrics.exports_throttled.inc()
                raise Overloaded("trace assembly is behind; retry later")
            if self._queued_spans and self._queued_spans + size > self._max_queue_spans:
                self._metrics.exports_throttled.inc()
                raise Overloaded(
                    f"store is behind: {self._queued_spans} spans waiting for commit "
                    f"(limit {self._max_queue_spans})"
                )
            self._queue.append((batch, future))
            self._queued_spans += size
            self._metrics.queue_spans.set(self._queued_spans)
            self._cond.notify()
        return future

    def stop(self, deadline: float | None = None) -> None:
        """Commit everything already queued, then end the thread (waiting 30 s at most, and not
        past `deadline`)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(remaining(deadline, 30.0))

    def _take(self) -> list[tuple[SpanBatch, Future[None]]] | None:
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            if not self._queue:
                return None
            taken: list[tuple[SpanBatch, Future[None]]] = []
            spans = 0
            while self._queue and (not taken or spans + _rows(self._queue[0][0]) <= self._max_commit_spans):
                item = self._queue.popleft()
                # From here on the future cannot be cancelled. One cancelled already (its export's
                # handler was) is committed all the same, its outcome told to no one.
                item[1].set_running_or_notify_cancel()
                taken.append(item)
                spans += _rows(item[0])
            self._queued_spans -= spans
            self._metrics.queue_spans.set(self._queued_spans)
            return taken

    def _run(self) -> None:
        while (taken := self._take()) is not None:
            self._commit(taken)

    def _commit(self, taken: list[tuple[SpanBatch, Future[None]]]) -> None:
        batch = concat_batches([b for b, _ in taken])
        started = time.perf_counter()
        try:
            self._store.assert_writable()
            self._store.append_spans(batch.spans, batch.events)
        except Exception as exc:
            # Logged by the store's health: one line when writes start failing, a summary a minute.
            self._store.health.failed(exc, "span writer", spans=batch.accepted)
            self._metrics.commit_errors.inc()
            for _, future in taken:
                if not future.cancelled():
                    future.set_exception(exc)
            return
        self._store.health.succeeded()
        self._metrics.commit_seconds.observe(time.perf_counter() - started)
        self._metrics.spans_stored.inc(batch.accepted)
        self._metrics.commits.inc()
        for _, future in taken:
            if not future.cancelled():
                future.set_result(None)
        for listener in self._listeners:
            try:
                listener(batch)
            except Exception:
                log.exception("commit listener %r failed", listener)
