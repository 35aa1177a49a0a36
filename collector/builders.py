"""The service's components, built from the config: one builder per config section, in the order the
service starts them (`BUILDERS`); it stops them in reverse (collector/lifecycle.py).

Each builder takes the `Parts` built so far (the store, the writer, the pipeline, ...), adds its own
to them, and returns its components. A new component is one builder (or a line in one) and, for a
new section, one line in `BUILDERS`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from starlette.applications import Starlette
from starlette.middleware import Middleware

from collector.api import Api
from collector.auth.grpc import AuthInterceptor
from collector.auth.http import AuthMiddleware
from collector.background import BackgroundWorker
from collector.dashboard import pages
from collector.dashboard.api import DashboardApi
from collector.dashboard.data import dashboard_data
from collector.exporters.evaluations import EvaluationExporter
from collector.exporters.forwarder import Forwarder
from collector.exporters.webhooks import WebhookNotifier
from collector.feedback.api import FeedbackApi
from collector.http_server import HttpServer, listen
from collector.lifecycle import Component
from collector.mcp.http import McpEndpoint
from collector.monitoring.canaries import CanaryRunner
from collector.monitoring.evaluator import AlertBook, AlertEvaluator
from collector.parts import Parts
from collector.pipeline import IngestPipeline
from collector.probes.runner import ProbeRunner
from collector.process_memory import MemoryReleaser
from collector.processors.assembly.assembler import TraceAssembler
from collector.processors.judging import JudgeHealth, JudgeStage
from collector.processors.slices import slicing
from collector.processors.spill import SpillDirectory, spill_directory
from collector.receivers.otlp_grpc import OtlpGrpcReceiver
from collector.receivers.otlp_http import OtlpHttpReceiver
from collector.rescore.api import RescoreApi
from collector.rescore.jobs import RescoreJobs
from collector.server_file import server_file
from collector.sessions.refresher import SessionJudge, SessionRefresher
from collector.store import Store, StoreError, open_store
from collector.store.health import StoreProbe, store_error_reason
from collector.store.maintenance import StoreMaintainer
from collector.store.retention import RetentionKeeper
from collector.store.writer import SpanWriter
from evaluators.conversation import make_conversation_resolved
from evaluators.registry import build_evaluator

if TYPE_CHECKING:  # the judge client (and `openai`) loads only when a judge is configured
    from evaluators.judge.client import JudgeClient

log = logging.getLogger(__name__)

Builder = Callable[[Parts], list[Component]]


class StoreCloser(Component):
    """The store as a component: opened when built, closed last (after every writer has stopped)."""

    name = "store"

    def __init__(self, store: Store, sidecar: str | None) -> None:
        self._store = store
        self._sidecar = sidecar  # the server file beside a DuckDB file, removed once it is closed

    def start(self) -> None:
        pass

    def stop(self, deadline: float | None = None) -> None:
        """Close the store; a store that cannot write its last checkpoint ends the stop with one
        line (`StoreError`, exit 1), not a traceback: what was acknowledged is in the write-ahead
        log, replayed at the next start."""
        try:
            self._store.close()
        except Exception as exc:
            reason = store_error_reason(exc)
            if reason is None:
                raise
            raise StoreError(
                f"ragpulse stopped, but the store could not write its last checkpoint ({reason}); "
                "every acknowledged span is in the write-ahead log and is replayed at the next start"
            ) from None
        finally:
            if self._sidecar is not None:
                with contextlib.suppress(OSError):
                    server_file(self._sidecar).unlink()

    def health(self) -> dict[str, object]:
        return self._store.health.as_dict()


class JudgeCheck(BackgroundWorker):
    """The judge's pre-run check, repeated every minute while it fails: a judge that is down is
    reported loudly and in /healthz, but ragpulse keeps ingesting (its scores are errors)."""

    def __init__(self, judge: JudgeClient, health: JudgeHealth) -> None:
        super().__init__("ragpulse-judge-check")
        self.name = "judge"  # its health is the judge's, under "judge" in /healthz
        self._judge = judge
        self._health = health

    def _run(self) -> None:
        while True:
            try:
                self._judge.check()
            except Exception as exc:
                self._health.ok, self._health.error = False, str(exc)
                log.error("THE JUDGE IS NOT ANSWERING; judge scores are errors until it does: %s", exc)
            else:
                self._health.ok, self._health.error = True, None
                log.info("judge %s answered its pre-run check", self._judge.model)
                return
            if self._stopping.wait(60):
                return

    def health(self) -> dict[str, object]:
        return self._health.as_dict()


class JudgeClients(Component):
    """The judge clients' connections, closed once the components that ask them have stopped."""

    name = "judge-clients"

    def __init__(self, *clients: JudgeClient | None) -> None:
        self._clients = clients

    def start(self) -> None:
        pass

    def stop(self, deadline: float | None = None) -> None:
        from collector.judge_setup import close_judge

        for client in self._clients:
            close_judge(client)


def store(parts: Parts) -> list[Component]:
    """`store:`: the store (opened, migrated), its probe, and the memory releaser beside it."""
    cfg = parts.config
    parts.store = open_store(parts.store_config)
    # The view's `status` depends on the configured idle timeout, which a view cannot read.
    parts.store.define_sessions_view(cfg.sessions.idle_timeout)
    parts.metrics.watch_store(parts.store.health)
    parts.store_probe = StoreProbe(parts.store)
    sidecar = None if parts.store.shared else cfg.store.path  # a lake is opened by many: no sidecar
    parts.writer = SpanWriter(
        parts.store, parts.metrics, cfg.store.max_queue_spans, cfg.store.max_commit_spans
    )
    # Slice dimensions' columns before anything reads or writes them (alerts may cut by them).
    parts.dimensions, parts.caps = slicing(
        parts.store, cfg.monitoring.dimensions, cfg.monitoring.dimension_rerank_every, time.monotonic()
    )
    return [StoreCloser(parts.store, sidecar), parts.store_probe, MemoryReleaser()]


def monitoring(parts: Parts) -> list[Component]:
    """`monitoring:`: the webhook notifier (it also delivers what an earlier run left pending), the
    alert evaluator when there are rules, the judge canaries when `monitoring.canaries` is set. A
    canary file that cannot be read stops the start here, before anything else runs."""
    config, store, metrics = parts.config.monitoring, parts.the_store, parts.metrics
    components: list[Component] = []
    if config.webhooks:
        parts.webhook_notifier = WebhookNotifier(store, config, metrics)
        components.append(parts.webhook_notifier)
    wake = parts.webhook_notifier.wake if parts.webhook_notifier else None
    parts.alert_book = AlertBook(store, config, metrics, on_notifications=wake)
    if config.alerts:
        parts.alert_evaluator = AlertEvaluator(
            store, config, metrics, parts.alert_book, parts.config.sql.timeout
        )
        components.append(parts.alert_evaluator)
    if config.canaries is not None:
        from collector.judge_setup import open_judge

        # A client of its own, caches off: a canary must ask the judge every time.
        judge = open_judge(parts.config.judge, check=False, persistent_cache=False, cache_size=0)
        judge.on_rate_limited = metrics.rate_limit_counter("canaries")
        parts.canary_runner = CanaryRunner(
            store,
            config.canaries,
            judge.model,
            lambda entry: build_evaluator(entry, judge),
            parts.judge_budget,
            parts.alert_book,
            metrics,
            parts.config.judge.max_concurrency,
        )
        components += [JudgeClients(judge), parts.canary_runner]
    return components


def sessions(parts: Parts) -> list[Component]:
    """`sessions:`: the refresher of `sessions`' rows, started before the stages that write turns
    and scores and stopped after them (its last round takes their last writes)."""
    parts.session_refresher = SessionRefresher(parts.the_store, parts.config.sessions)
    return [parts.session_refresher]


def scoring(parts: Parts) -> list[Component]:
    """`scoring:` (with `judge:`): the judge's pre-run check and the judge stage when a judge
    evaluates any entry, the evaluation exporter when `exporters.otlp.endpoint` is set. The
    deterministic evaluators run in the assembler's mapping jobs (`parts.scoring`)."""
    cfg = parts.config
    if not cfg.assembler.enabled:
        return []
    setup = parts.scoring = cfg.scoring_setup()
    if setup is None:
        return []
    components: list[Component] = []
    judge = None
    if setup.export_events:  # first: it stops after the judge stage, and sends what it stored
        export = parts.redactor("export")
        parts.evaluation_exporter = EvaluationExporter(
            parts.the_store, cfg.exporters, parts.metrics, redact=export.redact if export else None
        )
        components.append(parts.evaluation_exporter)
    if setup.judge_entries:
        from collector.judge_setup import open_judge

        judge = open_judge(cfg.judge, check=False)
        judge.on_rate_limited = parts.metrics.rate_limit_counter("scoring")
        parts.judge_health = JudgeHealth(judge.model)
        evaluators = [(str(e["name"]), build_evaluator(e, judge)) for e in setup.judge_entries]
        parts.judge_stage = JudgeStage(
            parts.the_store,
            evaluators,
            cfg.scoring,
            parts.judge_budget,
            cfg.judge.max_concurrency,
            parts.metrics,
            setup.export_events,
            redactor=parts.redactor("judge"),
            mapping=cfg.mapping.options(),
        )
        components += [JudgeClients(judge), JudgeCheck(judge, parts.judge_health), parts.judge_stage]
    if cfg.sessions.conversation_resolved and parts.session_refresher is not None:
        if judge is None:  # no per-trace judge score configured: a client for the sessions' alone
            from collector.judge_setup import open_judge

            judge = open_judge(cfg.judge, check=False)
            judge.on_rate_limited = parts.metrics.rate_limit_counter("scoring")
            components.append(JudgeClients(judge))
        parts.session_refresher.use_judge(
            SessionJudge(
                make_conversation_resolved(judge),
                parts.judge_budget,
                cfg.judge.max_concurrency,
                parts.redactor("judge"),
            )
        )
    # `POST /api/rescore`: runs with the same evaluators, judge and budget (stopped before them).
    from collector.rescore.setup import build_rescorer

    parts.rescore_jobs = RescoreJobs(
        build_rescorer(cfg, parts.the_store, judge, parts.judge_budget, parts.redactor("judge"))
    )
    components.append(parts.rescore_jobs)
    return components


def assembler(parts: Parts) -> list[Component]:
    """`assembler:`: the trace assembler, fed by the writer's commits (and pushing back through it
    when its backlog is full)."""
    cfg = parts.config
    if not cfg.assembler.enabled:
        return []
    parts.assembler = TraceAssembler(
        parts.the_store,
        cfg.assembler,
        parts.metrics,
        scoring=parts.scoring,
        dimensions=parts.dimensions,
        caps=parts.caps,
        spill=SpillDirectory(spill_directory(cfg.assembler, cfg.store)),
        mapping=cfg.mapping.options(),
    )
    parts.the_writer.add_listener(parts.assembler.on_commit)
    parts.the_writer.add_gate(parts.assembler.accepting)
    return [parts.assembler]


def exporters(parts: Parts) -> list[Component]:
    """`exporters:`: the forwarder of every export, when `forward_spans` and an endpoint are set."""
    cfg = parts.config.exporters
    if not (cfg.forward_spans and cfg.otlp.endpoint):
        return []
    export = parts.redactor("export")
    parts.forwarder = Forwarder(
        cfg.otlp, parts.metrics, cfg.forward_queue, redact=export.redact_message if export else None
    )
    return [parts.forwarder]


def writer(parts: Parts) -> list[Component]:
    """The span writer (`store:`'s queue and commits), started after what it feeds."""
    return [parts.the_writer]


def maintenance(parts: Parts) -> list[Component]:
    """`store.retention` and, on a lake, compaction: after the writer (their deletions and merges
    run beside span appends) and stopped before it."""
    components: list[Component] = []
    cfg, store = parts.config, parts.the_store
    if cfg.store.retention.enabled:
        parts.retention = RetentionKeeper(store, cfg.store.retention, parts.metrics)
        components.append(parts.retention)
    if store.shared:  # a lake: small files merged, old snapshots expired, by the leader
        parts.maintainer = StoreMaintainer(store, cfg.store.compact_every)
        components.append(parts.maintainer)
    return components


def receivers(parts: Parts) -> list[Component]:
    """`receivers:` (with `auth:` and `tls:`): OTLP/gRPC, and the HTTP port (OTLP/HTTP, the API,
    MCP at `/mcp`, the dashboard)."""
    cfg = parts.config
    keyring = parts.keyring
    assert keyring is not None, "the keys are read before any builder runs"
    parts.pipeline = IngestPipeline(
        parts.the_writer,
        parts.metrics,
        parts.forwarder,
        redactor=parts.redactor("storage"),
        feedback=parts.the_store,
    )
    tls = parts.tls
    parts.grpc = OtlpGrpcReceiver(
        cfg.receivers,
        parts.pipeline,
        parts.metrics,
        interceptors=[AuthInterceptor(keyring, parts.metrics)],
        credentials=tls.grpc_credentials() if tls else None,
    )
    http_receiver = OtlpHttpReceiver(cfg.receivers, parts.pipeline, parts.metrics)
    api = Api(
        parts.the_store, parts.metrics, cfg.sql, parts.assembler, health=parts.health, ready=parts.readiness
    )
    feedback = FeedbackApi(parts.the_store, parts.metrics, parts.read_rows)
    rescore = RescoreApi(parts.rescore_jobs)
    dashboard = DashboardApi(dashboard_data(parts.read_rows, cfg))
    mcp = McpEndpoint(parts.the_store, cfg)
    app = Starlette(
        routes=[
            *http_receiver.routes(),
            *api.routes(),
            *feedback.routes(),
            *rescore.routes(),
            mcp.route(),
            *dashboard.routes(),
            *pages.routes(),
        ],
        middleware=[
            Middleware(
                AuthMiddleware,
                keyring=keyring,
                metrics=parts.metrics,
                metrics_open=cfg.auth.metrics == "open",
            )
        ],
    )
    parts.http = HttpServer(
        app,
        listen(cfg.receivers.host, cfg.receivers.http_port),
        tls.uvicorn_options() if tls else {},
        on_listening=lambda: _write_sidecar(parts),
    )
    return [parts.grpc, mcp, parts.http]


def probes(parts: Parts) -> list[Component]:
    """`probes:`: once both receivers listen, so the app's spans of the first run have a home."""
    cfg = parts.config
    if not cfg.probes:
        return []
    parts.probe_runner = ProbeRunner(
        parts.the_store,
        cfg.probes,
        parts.the_pipeline,
        parts.metrics,
        cfg.sql.timeout,
        on_cases=parts.assembler.refresh_cases if parts.assembler else None,
    )
    return [parts.probe_runner]


def _write_sidecar(parts: Parts) -> None:
    """The server file beside a DuckDB file (`ragpulse sql` and the CLI find the server by it),
    written once both ports listen, before /healthz answers."""
    if parts.the_store.shared:
        return
    sidecar: dict[str, Any] = {"pid": os.getpid(), "http_url": parts.http_url, "grpc_port": parts.grpc_port}
    server_file(parts.config.store.path).write_bytes(orjson.dumps(sidecar))


# The order the service starts its components in (and stops them in reverse). Monitoring comes
# first so that a canary file that cannot be read stops the start before anything else runs.
BUILDERS: tuple[Builder, ...] = (
    store,
    monitoring,
    sessions,
    scoring,
    assembler,
    exporters,
    writer,
    maintenance,
    receivers,
    probes,
)
