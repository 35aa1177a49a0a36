"""The ingest pipeline every receiver feeds: decode -> group-committed store -> post-commit consumers.

Receivers only speak their protocol and know only this module: `IngestPipeline.export` /
`export_logs` and the two errors they raise, `Overloaded` (come back later) and `Stopped`
(shutting down). The pipeline turns an `ExportTraceServiceRequest` (or the span events of an
`ExportLogsServiceRequest`) into a stored batch and tells the receiver what to acknowledge
(partial success) once the commit is durable.
"""

from __future__ import annotations

import asyncio
import functools
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collector.exporters.forwarder import Forwarder
from collector.feedback.events import response_evaluations
from collector.otlp.batch import SpanBatch, decode_request
from collector.otlp.logs import decode_logs_request
from collector.store.writer import Overloaded, SpanWriter, Stopped
from collector.telemetry import Metrics

if TYPE_CHECKING:
    from collector.processors.redaction import Redactor
    from collector.store.base import FeedbackBook

# The errors of `export` / `export_logs`, which receivers import from here: they see the pipeline,
# never the writer behind it.
__all__ = ["ExportOutcome", "IngestPipeline", "Overloaded", "Stopped"]


@dataclass(frozen=True)
class ExportOutcome:
    """What the receiver acknowledges: spans (or log records) rejected as invalid, and why (empty
    when none; for logs it also tells how many records were ignored)."""

    accepted: int
    rejected: int
    message: str


_DONE: Future[None] = Future()
_DONE.set_result(None)


async def _committed(future: Future[None]) -> None:
    """Wait for a queued batch's commit. A handler cancelled meanwhile (its client's deadline passed)
    leaves the batch's future alone: the batch was received whole and is committed and forwarded
    all the same, where a cancelled future would have been neither told nor forwarded."""
    await asyncio.shield(asyncio.wrap_future(future))


class IngestPipeline:
    """Decodes exports (redacting them on the way with a `redactor`: `redaction.apply_to:
    [storage]`), hands them to the writer, and forwards them once they are committed."""

    def __init__(
        self,
        writer: SpanWriter,
        metrics: Metrics,
        forwarder: Forwarder | None = None,
        redactor: Redactor | None = None,
        feedback: FeedbackBook | None = None,
    ) -> None:
        self._writer = writer
        self._metrics = metrics
        self._forwarder = forwarder
        self._redactor = redactor
        # Where evaluation events that name a response (not a span) go (None: they are dropped).
        self._feedback = feedback

    def submit(
        self,
        request: ExportTraceServiceRequest,
        protocol: str,
        rejected_before: int = 0,
        errors_before: list[str] | None = None,
    ) -> tuple[ExportOutcome, Future[None]]:
        """Decode and queue one export. The future resolves when its spans are committed.

        Raises `Overloaded` (retry later) or `Stopped` without storing anything.
        `rejected_before` counts spans a decoder already refused (e.g. malformed OTLP/JSON spans).
        """
        batch = decode_request(request, redactor=self._redactor)
        if rejected_before:
            batch.rejected += rejected_before
            batch.errors[:0] = errors_before or []
        future = self._writer.submit(batch) if batch.accepted or batch.events.num_rows else _DONE
        self._count(batch, protocol)
        if self._forwarder is not None:
            future.add_done_callback(functools.partial(self._forward_when_committed, request))
        return ExportOutcome(batch.accepted, batch.rejected, batch.error_message()), future

    async def export(
        self,
        request: ExportTraceServiceRequest,
        protocol: str,
        rejected_before: int = 0,
        errors_before: list[str] | None = None,
    ) -> ExportOutcome:
        """`submit`, then wait (without blocking the event loop) until the commit is durable."""
        outcome, future = self.submit(request, protocol, rejected_before, errors_before)
        await _committed(future)
        return outcome

    def submit_logs(
        self,
        request: ExportLogsServiceRequest,
        protocol: str,
        rejected_before: int = 0,
        errors_before: list[str] | None = None,
    ) -> tuple[ExportOutcome, Future[None]]:
        """Decode and queue the span events of one log export, like `submit` for spans; when
        forwarding, the whole export (plain log records too) is forwarded once committed."""
        outcome, future, _ = self._submit_logs(request, protocol, rejected_before, errors_before)
        return outcome, future

    def _submit_logs(
        self,
        request: ExportLogsServiceRequest,
        protocol: str,
        rejected_before: int,
        errors_before: list[str] | None,
    ) -> tuple[ExportOutcome, Future[None], list[dict[str, Any]]]:
        batch = decode_logs_request(request, redactor=self._redactor)
        if rejected_before:
            batch.rejected += rejected_before
            batch.errors[:0] = errors_before or []
        future = self._writer.submit(batch) if batch.events.num_rows else _DONE
        self._metrics.log_records_received.labels(protocol).inc(batch.received)
        if batch.rejected:
            self._metrics.log_records_rejected.labels(protocol).inc(batch.rejected)
        if batch.ignored:
            self._metrics.log_records_ignored.labels(protocol).inc(batch.ignored)
        if self._forwarder is not None:
            future.add_done_callback(functools.partial(self._forward_when_committed, request))
        accepted = batch.events.num_rows + len(batch.evaluations)
        return ExportOutcome(accepted, batch.rejected, batch.error_message()), future, batch.evaluations

    async def export_logs(
        self,
        request: ExportLogsServiceRequest,
        protocol: str,
        rejected_before: int = 0,
        errors_before: list[str] | None = None,
    ) -> ExportOutcome:
        """`submit_logs`, then wait until the commit is durable. Evaluation events that name a
        response are stored as feedback rows then (`feedback`): a store that cannot take them makes
        the export `Overloaded`, to be sent again (their ids are their content: nothing twice)."""
        outcome, future, evaluations = self._submit_logs(request, protocol, rejected_before, errors_before)
        await _committed(future)
        if evaluations and self._feedback is not None:
            rows = response_evaluations(evaluations, time.time_ns() // 1000)
            if not rows.num_rows:
                return outcome
            try:
                await asyncio.to_thread(self._feedback.write_feedback, rows)
            except Exception as exc:
                if not self._feedback.health.absorb(exc, "feedback"):
                    raise
                raise Overloaded(f"the store cannot write: {exc}") from None
        return outcome

    def _forward_when_committed(
        self, request: ExportTraceServiceRequest | ExportLogsServiceRequest, committed: Future[None]
    ) -> None:
        if self._forwarder is not None and committed.exception() is None:
            self._forwarder.enqueue(request)

    def _count(self, batch: SpanBatch, protocol: str) -> None:
        self._metrics.spans_received.labels(protocol).inc(batch.accepted + batch.rejected)
        if batch.rejected:
            self._metrics.spans_rejected.labels(protocol).inc(batch.rejected)
