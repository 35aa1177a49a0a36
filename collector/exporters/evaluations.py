"""Evaluation exporter: scores out to a downstream OTLP backend as `gen_ai.evaluation.result` events.

Each score's event waits in the store's `evaluation_outbox` (written in the transaction that
stores the score), so nothing is lost when the downstream is down or ragpulse restarts. A thread
reads the oldest events, groups them into short evaluation spans, one per evaluated span,
evaluator and revision (same trace id, parented to the evaluated span), and sends them with the
OpenTelemetry SDK's OTLP span exporter (gRPC or HTTP, `exporters.otlp.headers`). Events are deleted
once the downstream acknowledged them; a failed export is retried with backoff, without ever
touching ingestion. The outbox is bounded (`exporters.outbox_max_events`): past it the oldest
events are dropped and counted (`ragpulse_evaluation_events_dropped_total`).

A trace re-assembled after a late span is scored again; its new events carry the new
`ragpulse.revision`, and events of the earlier revision not exported yet are dropped with it, so
a downstream sees, per evaluated span, the revisions in order and should keep the highest.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

import orjson
import pyarrow as pa
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from collector.background import BackgroundWorker
from collector.exporters.config import ExportersConfig, OtlpExporterConfig
from collector.store.base import EvaluationOutbox
from collector.store.health import log_failure
from collector.telemetry import Metrics

log = logging.getLogger(__name__)

EVALUATION_SPAN = "ragpulse.evaluation"
_RESOURCE = Resource.create({"service.name": "ragpulse"})
_SCOPE = InstrumentationScope("ragpulse")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_BACKOFF_MAX = 30.0


class SpanExporter(Protocol):
    def export(self, spans: Any) -> SpanExportResult: ...

    def shutdown(self) -> None: ...


def otlp_span_exporter(config: OtlpExporterConfig) -> SpanExporter:
    """The OpenTelemetry SDK's OTLP span exporter for `exporters.otlp` (gRPC or HTTP protobuf)."""
    endpoint = config.endpoint or ""
    if config.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        target = endpoint.split("://", 1)[-1].rstrip("/")
        secure = endpoint.startswith("https://")
        return GrpcExporter(
            endpoint=target, insecure=not secure, headers=config.headers, timeout=config.timeout
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    base = endpoint if "://" in endpoint else f"http://{endpoint}"
    base = base.rstrip("/").removesuffix("/v1/traces")
    return HttpExporter(endpoint=f"{base}/v1/traces", headers=config.headers, timeout=config.timeout)


def evaluation_spans(rows: pa.Table, redact: Callable[[str], str] | None = None) -> list[ReadableSpan]:
    """Outbox rows as evaluation spans: one per (trace, evaluated span, evaluator, revision), each
    event one score. A span's id is derived from its events' ids, so a retried export of the same
    events sends the same span. With `redact`, the events' text (explanations, claims) is redacted."""
    groups: dict[tuple[str, str, str, int], list[dict[str, Any]]] = {}
    for row in rows.to_pylist():
        key = (row["trace_id"], row["span_id"], row["evaluator"] or "", int(row["revision"] or 0))
        groups.setdefault(key, []).append(row)
    spans = []
    for (trace_id, parent_id, evaluator, revision), events in groups.items():
        times = [_ns(e["time"]) for e in events]
        identity = hashlib.blake2b("".join(sorted(e["event_id"] for e in events)).encode(), digest_size=8)
        context = SpanContext(
            int(trace_id, 16), int.from_bytes(identity.digest(), "big") or 1, False, _SAMPLED
        )
        parent = SpanContext(int(trace_id, 16), int(parent_id, 16), True, _SAMPLED)
        spans.append(
            ReadableSpan(
                name=EVALUATION_SPAN,
                context=context,
                parent=parent,
                resource=_RESOURCE,
                attributes={"ragpulse.evaluator": evaluator, "ragpulse.revision": revision},
                events=[
                    Event(e["name"], _attributes(e["attributes"], redact), timestamp=t)
                    for e, t in zip(events, times, strict=True)
                ],
                kind=SpanKind.INTERNAL,
                start_time=min(times),
                end_time=max(times),
                instrumentation_scope=_SCOPE,
            )
        )
    return spans


def _ns(value: Any) -> int:
    return int(value.timestamp() * 1e9) if hasattr(value, "timestamp") else int(value)


def _attributes(text: str | None, redact: Callable[[str], str] | None) -> dict[str, Any]:
    values = orjson.loads(text) if text else {}
    return {
        k: redact(v) if redact is not None and isinstance(v, str) else v
        for k, v in values.items()
        if isinstance(v, str | bool | int | float)
    }


class EvaluationExporter(BackgroundWorker):
    """Drains the evaluation outbox to the downstream, on its own thread."""

    def __init__(
        self,
        store: EvaluationOutbox,
        config: ExportersConfig,
        metrics: Metrics,
        exporter: SpanExporter | None = None,
        sleep: Callable[[float], None] | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self._store = store
        self._redact = redact
        self._config = config
        self._metrics = metrics
        self._exporter = exporter or otlp_span_exporter(config.otlp)
        super().__init__("ragpulse-evaluation-export")
        self._sleep = sleep or self._stopping.wait

    def stop(self, deadline: float | None = None) -> None:
        """Stop after the export in progress; what is left stays in the outbox for the next start."""
        super().stop(deadline)
        self._exporter.shutdown()

    def _run(self) -> None:
        backoff = 0.0
        while not self._stopping.is_set():
            try:
                sent = self.export_once()
            except Exception:
                log_failure(
                    log,
                    self._store,
                    "evaluation exporter",
                    "exporting evaluation events failed; they stay in the outbox",
                )
                sent = None
            if sent is None:  # failed: back off, up to _BACKOFF_MAX
                self._metrics.evaluation_export_errors.inc()
                backoff = min(_BACKOFF_MAX, max(self._config.export_interval, backoff * 2))
                self._sleep(backoff)
                continue
            backoff = 0.0
            if sent < self._config.export_batch:  # drained: wait for more
                self._sleep(self._config.export_interval)

    def export_once(self) -> int | None:
        """Send one batch of the oldest events; how many were acknowledged, or None on failure."""
        dropped = self._store.trim_outbox(self._config.outbox_max_events)
        if dropped:
            log.warning("evaluation outbox full: dropped the %d oldest unexported events", dropped)
            self._metrics.evaluation_events_dropped.inc(dropped)
        rows = self._store.read_outbox(self._config.export_batch)
        self._metrics.outbox_events.set(self._store.outbox_depth())
        if not rows.num_rows:
            return 0
        result = self._exporter.export(evaluation_spans(rows, self._redact))
        if result is not SpanExportResult.SUCCESS:
            log.warning("the downstream refused %d evaluation events; retrying", rows.num_rows)
            return None
        self._store.delete_outbox(rows["event_id"].to_pylist())
        self._metrics.evaluation_events_exported.inc(rows.num_rows)
        self._metrics.outbox_events.set(self._store.outbox_depth())
        return rows.num_rows
