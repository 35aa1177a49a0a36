"""ragpulse's own Prometheus metrics, one registry per running service (served on GET /metrics)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest


class WatchedHealth(Protocol):
    """What the metrics read of the store's health (`store/health.py`'s `StoreHealth`)."""

    writable: bool
    on_failure: Callable[[str], None] | None


class Metrics:
    """Counters and gauges of the ingest path; later components add theirs here."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # process_resident_memory_bytes, process_cpu_seconds_total, open fds: the service's own.
        ProcessCollector(registry=r)
        self.spans_received = Counter(
            "ragpulse_spans_received", "Spans received, by protocol", ["protocol"], registry=r
        )
        self.spans_rejected = Counter(
            "ragpulse_spans_rejected", "Spans rejected as invalid, by protocol", ["protocol"], registry=r
        )
        self.log_records_received = Counter(
            "ragpulse_log_records_received",
            "OTLP log records received, by protocol",
            ["protocol"],
            registry=r,
        )
        self.log_records_rejected = Counter(
            "ragpulse_log_records_rejected",
            "Log records naming an event but rejected as invalid, by protocol",
            ["protocol"],
            registry=r,
        )
        self.log_records_ignored = Counter(
            "ragpulse_log_records_ignored",
            "Log records ignored: not an event (no event name) or not tied to a span, by protocol",
            ["protocol"],
            registry=r,
        )
        self.auth_refusals = Counter(
            "ragpulse_auth_refusals",
            "Requests refused for their key, by surface (grpc, http) and reason (unauthenticated, forbidden)",
            ["surface", "reason"],
            registry=r,
        )
        self.redactions = Counter(
            "ragpulse_redactions",
            "Values redacted, by kind (a preset or pattern name) and stage (storage, judge, export)",
            ["kind", "stage"],
            registry=r,
        )
        self.requests = Counter(
            "ragpulse_export_requests",
            "Export requests answered, by protocol and outcome",
            ["protocol", "outcome"],
            registry=r,
        )
        self.exports_throttled = Counter(
            "ragpulse_exports_throttled",
            "Exports refused with a retryable status because the store was behind",
            registry=r,
        )
        self.spans_stored = Counter("ragpulse_spans_stored", "Spans committed to the store", registry=r)
        self.commits = Counter("ragpulse_commits", "Store transactions committed", registry=r)
        self.commit_errors = Counter("ragpulse_commit_errors", "Store transactions that failed", registry=r)
        self.store_writable = Gauge(
            "ragpulse_store_writable",
            "1 while the store takes writes, 0 while they fail (a full disk, a lost catalog)",
            registry=r,
        )
        self.store_writable.set(1)
        self.store_write_failures = Counter(
            "ragpulse_store_write_failures",
            "Writes that failed for the store's sake (no space, read-only, unreachable), by component",
            ["component"],
            registry=r,
        )
        self.commit_seconds = Histogram(
            "ragpulse_commit_seconds",
            "Time to commit one group of exports",
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.export_seconds = Histogram(
            "ragpulse_export_seconds",
            "Export latency from receipt to acknowledgement, by protocol",
            ["protocol"],
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.queue_spans = Gauge("ragpulse_queue_spans", "Spans waiting for commit", registry=r)
        self.forward_dropped = Counter(
            "ragpulse_forward_dropped", "Exports not forwarded downstream (queue full or error)", registry=r
        )
        self.sql_queries = Counter(
            "ragpulse_sql_queries", "SQL queries answered, by outcome", ["outcome"], registry=r
        )
        self.feedback_items = Counter(
            "ragpulse_feedback_items",
            "Feedback items received on /api/feedback, by outcome (attached to their trace now, "
            "waiting for it, refused)",
            ["outcome"],
            registry=r,
        )

        self.traces_in_flight = Gauge(
            "ragpulse_traces_in_flight", "Traces waiting to be assembled", registry=r
        )
        self.traces_assembled = Counter(
            "ragpulse_traces_assembled",
            "Traces assembled, by reason (complete, max_wait, pressure, late_span, recovery)",
            ["reason"],
            registry=r,
        )
        self.traces_unknown = Counter(
            "ragpulse_traces_unknown_convention",
            "Assembled traces with no recognisable RAG step (convention 'unknown')",
            registry=r,
        )
        self.traces_claimed_elsewhere = Counter(
            "ragpulse_traces_claimed_elsewhere",
            "Traces ready here but assembled by another replica with the same spans (ducklake)",
            registry=r,
        )
        self.assembly_errors = Counter(
            "ragpulse_assembly_errors", "Assembly rounds that failed (retried after a restart)", registry=r
        )
        self.assembly_spilled_spans = Counter(
            "ragpulse_assembly_spilled_spans",
            "Spans not kept in memory for assembly (past assembler.max_held_spans): read back from the store",
            registry=r,
        )
        self.assembly_spill_file_spans = Counter(
            "ragpulse_assembly_spill_file_spans",
            "Spans past assembler.max_held_spans kept on local disk for assembly (assembler.spill_directory)",
            registry=r,
        )
        self.assembly_seconds = Histogram(
            "ragpulse_assembly_seconds",
            "Time to map and write one round of assembled traces",
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )

        self.sampling_decisions = Counter(
            "ragpulse_sampling_decisions",
            "Complete traces by sampling decision (judge, deterministic, skip) and reason",
            ["decision", "reason"],
            registry=r,
        )
        self.scores = Counter(
            "ragpulse_scores",
            "Scores stored, by name, status and evaluator (deterministic, judge)",
            ["name", "status", "evaluator"],
            registry=r,
        )
        self.scoring_lag_seconds = Histogram(
            "ragpulse_scoring_lag_seconds",
            "From a trace's last span received to its scores stored, by evaluator",
            ["evaluator"],
            registry=r,
            buckets=(0.5, 1, 2.5, 5, 7.5, 10, 15, 30, 60, 120, 300, 600),
        )
        self.judge_rate_limited = Counter(
            "ragpulse_judge_rate_limited",
            "Judge answers 429 (rate limited), by judge (online scoring, canaries)",
            ["judge"],
            registry=r,
        )
        self.judge_rate_limit_wait = Counter(
            "ragpulse_judge_rate_limit_wait_seconds",
            "Seconds judge calls waited after a 429 before retrying (Retry-After honoured), by judge",
            ["judge"],
            registry=r,
        )
        self.judge_calls = Counter(
            "ragpulse_judge_calls",
            "Judge evaluations, by outcome (ok, error, cached)",
            ["outcome"],
            registry=r,
        )
        self.judge_tokens = Counter(
            "ragpulse_judge_tokens", "Judge tokens, by direction (input, output)", ["direction"], registry=r
        )
        self.judge_seconds = Histogram(
            "ragpulse_judge_seconds",
            "Time of one judge evaluation (its calls, retries and waits)",
            registry=r,
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120),
        )
        self.judge_queue = Gauge(
            "ragpulse_judge_queue", "Traces taken by the judge stage, not stored yet", registry=r
        )
        self.outbox_events = Gauge(
            "ragpulse_evaluation_outbox_events", "Evaluation events waiting for OTLP export", registry=r
        )
        self.evaluation_events_exported = Counter(
            "ragpulse_evaluation_events_exported", "Evaluation events the downstream acknowledged", registry=r
        )
        self.evaluation_events_dropped = Counter(
            "ragpulse_evaluation_events_dropped",
            "Evaluation events dropped unexported because the outbox was full",
            registry=r,
        )
        self.evaluation_export_errors = Counter(
            "ragpulse_evaluation_export_errors",
            "Failed OTLP exports of evaluation events (retried)",
            registry=r,
        )
        self.alert_evaluations = Counter(
            "ragpulse_alert_evaluations", "Rounds of alert evaluation completed", registry=r
        )
        self.alert_evaluation_errors = Counter(
            "ragpulse_alert_evaluation_errors",
            "Alert rules (or rounds) that could not be evaluated",
            registry=r,
        )
        self.alerts_firing = Gauge(
            "ragpulse_alert_firing",
            "1 while an alert fires, by alert, service and slice",
            ["alert", "service", "slice"],
            registry=r,
        )
        self.alert_events = Counter(
            "ragpulse_alert_events", "Alert events, by state (firing, resolved)", ["state"], registry=r
        )
        self.alert_notifications = Counter(
            "ragpulse_alert_notifications",
            "Alert notification attempts, by webhook and outcome (delivered, failed: retried)",
            ["webhook", "outcome"],
            registry=r,
        )
        self.canary_runs = Counter(
            "ragpulse_judge_canary_runs",
            "Judge canary runs, by status (done, throttled, over_budget)",
            ["status"],
            registry=r,
        )
        self.canary_accuracy = Gauge(
            "ragpulse_judge_canary_accuracy", "Accuracy of the last judge canary run", registry=r
        )
        self.alert_notifications_pending = Gauge(
            "ragpulse_alert_notifications_pending", "Alert notifications not delivered yet", registry=r
        )
        self.probe_requests = Counter(
            "ragpulse_probe_requests",
            "Probe requests sent to the app, by probe and outcome (answered, http_error, timeout, "
            "unreachable, error)",
            ["probe", "outcome"],
            registry=r,
        )
        self.probe_runs = Counter(
            "ragpulse_probe_runs",
            "Probe runs finished, by probe and status (done, failed)",
            ["probe", "status"],
            registry=r,
        )

        self.retention_traces_deleted = Counter(
            "ragpulse_retention_traces_deleted",
            "Traces deleted by retention, by reason (age: past max_age_days, size: over max_bytes)",
            ["reason"],
            registry=r,
        )
        self.retention_spans_deleted = Counter(
            "ragpulse_retention_spans_deleted",
            "Spans of the traces deleted by retention, by reason (age, size)",
            ["reason"],
            registry=r,
        )
        self.retention_errors = Counter(
            "ragpulse_retention_errors", "Retention rounds that failed (retried at the next)", registry=r
        )
        self.retention_seconds = Histogram(
            "ragpulse_retention_seconds",
            "Time of one retention round (its deletions and checkpoints)",
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )
        self.store_bytes = Gauge(
            "ragpulse_store_bytes",
            "Bytes the database takes on disk: its file plus write-ahead log (measured by retention)",
            registry=r,
        )
        self.store_free_bytes = Gauge(
            "ragpulse_store_free_bytes",
            "Free space inside the database file, reused before the file grows (measured by retention)",
            registry=r,
        )

    def redaction_counter(self, stage: str) -> Callable[[str], None]:
        """`on_match` for the redactor of `stage`: counts each value redacted, by its kind."""
        return lambda kind: self.redactions.labels(kind, stage).inc()

    def watch_store(self, health: WatchedHealth) -> None:
        """`ragpulse_store_writable` read from the store's health at each scrape, and its failed
        writes counted by component."""
        self.store_writable.set_function(lambda: 1.0 if health.writable else 0.0)
        health.on_failure = lambda component: self.store_write_failures.labels(component).inc()

    def rate_limit_counter(self, judge: str) -> Callable[[float], None]:
        """`on_rate_limited` for a judge client: counts each 429 and the seconds waited after it."""

        def counted(wait: float) -> None:
            self.judge_rate_limited.labels(judge).inc()
            self.judge_rate_limit_wait.labels(judge).inc(wait)

        return counted

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)
