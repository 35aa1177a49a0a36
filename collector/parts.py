"""What `ragpulse serve` is made of: the parts the builders (collector/builders.py) fill in, in order,
and the views of them the API serves (`health`, `readiness`, the dashboard's reads)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from collector.config import Config
from collector.lifecycle import Component
from collector.processors.sampler import JudgeBudget
from collector.telemetry import Metrics

if TYPE_CHECKING:
    from collector.auth import Keyring
    from collector.exporters.evaluations import EvaluationExporter
    from collector.exporters.forwarder import Forwarder
    from collector.exporters.webhooks import WebhookNotifier
    from collector.http_server import HttpServer
    from collector.monitoring.canaries import CanaryRunner
    from collector.monitoring.evaluator import AlertBook, AlertEvaluator
    from collector.pipeline import IngestPipeline
    from collector.probes.runner import ProbeRunner
    from collector.processors.assembly.assembler import TraceAssembler
    from collector.processors.config import Stage
    from collector.processors.judging import JudgeHealth, JudgeStage
    from collector.processors.redaction import Redactor
    from collector.processors.scoring import ScoringSetup
    from collector.processors.slices import Dimension, SliceCaps
    from collector.receivers.otlp_grpc import OtlpGrpcReceiver
    from collector.receivers.tls import ServerTls
    from collector.rescore.jobs import RescoreJobs
    from collector.sessions.refresher import SessionRefresher
    from collector.store import Store
    from collector.store.config import StoreConfig
    from collector.store.health import StoreProbe
    from collector.store.maintenance import StoreMaintainer
    from collector.store.retention import RetentionKeeper
    from collector.store.writer import SpanWriter


class Parts:
    """The service's parts; those its config leaves out stay None."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.metrics = Metrics()
        budget = config.sampling.budget
        # One budget for every judge call: online scoring and the canaries.
        self.judge_budget = JudgeBudget(
            budget.judge_calls_per_minute, budget.judge_tokens_per_day, time.monotonic()
        )
        self.components: list[Component] = []
        self.stopping = threading.Event()  # set once a stop is asked for: not ready any more
        # Set at start, before any builder runs.
        self.keyring: Keyring | None = None
        self.tls: ServerTls | None = None
        self.store_config: StoreConfig = config.store
        # Filled in by the builders.
        self.store: Store | None = None
        self.store_probe: StoreProbe | None = None
        self.writer: SpanWriter | None = None
        self.dimensions: tuple[Dimension, ...] = ()
        self.caps: SliceCaps | None = None
        self.alert_book: AlertBook | None = None
        self.alert_evaluator: AlertEvaluator | None = None
        self.webhook_notifier: WebhookNotifier | None = None
        self.canary_runner: CanaryRunner | None = None
        self.scoring: ScoringSetup | None = None
        self.judge_health: JudgeHealth | None = None
        self.judge_stage: JudgeStage | None = None
        self.evaluation_exporter: EvaluationExporter | None = None
        self.assembler: TraceAssembler | None = None
        self.forwarder: Forwarder | None = None
        self.retention: RetentionKeeper | None = None
        self.maintainer: StoreMaintainer | None = None
        self.pipeline: IngestPipeline | None = None
        self.grpc: OtlpGrpcReceiver | None = None
        self.http: HttpServer | None = None
        self.probe_runner: ProbeRunner | None = None
        self.rescore_jobs: RescoreJobs | None = None
        self.session_refresher: SessionRefresher | None = None

    # ------------------------------------------------------------------ for the builders

    @property
    def the_store(self) -> Store:
        assert self.store is not None, "the store is built first"
        return self.store

    @property
    def the_writer(self) -> SpanWriter:
        assert self.writer is not None, "the writer is built with the store"
        return self.writer

    @property
    def the_pipeline(self) -> IngestPipeline:
        assert self.pipeline is not None, "the pipeline is built with the receivers"
        return self.pipeline

    def redactor(self, stage: Stage) -> Redactor | None:
        """The redactor `redaction:` asks for at `stage`, counting what it redacts in /metrics."""
        return self.config.redaction.redactor(stage, self.metrics.redaction_counter(stage))

    # ------------------------------------------------------------------ ports

    @property
    def grpc_port(self) -> int:
        return self.grpc.port if self.grpc else 0

    @property
    def http_port(self) -> int:
        return self.http.port if self.http else 0

    @property
    def http_url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.config.receivers.host}:{self.http_port}"

    # ------------------------------------------------------------------ what the API serves

    def read_rows(self, sql: str) -> list[dict[str, Any]]:
        """One read-only query with the `sql:` limits (the dashboard's queries)."""
        return self.the_store.query(sql, self.config.sql.max_rows, self.config.sql.timeout).records()

    def health(self) -> dict[str, object]:
        """`GET /healthz` and `/healthz/live`: ok while the process serves (whatever the store's
        state), with what the components report (the store's state; the judge's pre-run check)."""
        body: dict[str, object] = {"status": "ok"}
        for component in self.components:
            state = component.health()
            if state is not None:
                body[component.name] = state
        return body

    def readiness(self) -> tuple[bool, dict[str, object]]:
        """`GET /healthz/ready`: ready while exports can be stored; the reason when not (the store
        cannot write, ragpulse is stopping). A judge that is down does not make it unready: spans
        are still stored and their judge scores are errors."""
        if self.stopping.is_set():
            return False, {"status": "not_ready", "reason": "ragpulse is stopping"}
        if self.store is None:
            return False, {"status": "not_ready", "reason": "starting"}
        health = self.store.health
        if not health.writable:
            state = health.as_dict()
            return False, {
                "status": "not_ready",
                "store": health.reason,
                "failing_for_s": state.get("failing_for_s"),
            }
        return True, {"status": "ready"}
