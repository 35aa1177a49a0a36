"""`ragpulse serve`: the components wired together, started and stopped in order.

Start: store (migrations) -> writer -> forwarder -> receivers. Stop runs the other way: receivers
stop taking exports, the writer commits what it already accepted, the store checkpoints and closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware

from collector.api import Api
from collector.arrow_memory import use_system_allocator
from collector.auth import Keyring, KeyringError
from collector.auth.grpc import AuthInterceptor
from collector.auth.http import AuthMiddleware
from collector.config import Config, ConfigError
from collector.dashboard import pages
from collector.dashboard.api import DashboardApi
from collector.dashboard.data import dashboard_data
from collector.doctor import examine
from collector.exporters.evaluations import EvaluationExporter
from collector.exporters.forwarder import Forwarder
from collector.exporters.webhooks import WebhookNotifier
from collector.monitoring.canaries import CanaryRunner
from collector.monitoring.evaluator import AlertBook, AlertEvaluator
from collector.pipeline import IngestPipeline
from collector.probes.runner import ProbeRunner
from collector.processors.assembler import TraceAssembler
from collector.processors.config import Stage
from collector.processors.judging import JudgeHealth, JudgeStage
from collector.processors.redaction import Redactor
from collector.processors.sampler import JudgeBudget
from collector.processors.scoring import ScoringSetup
from collector.processors.slices import slicing
from collector.processors.spill import SpillDirectory, spill_directory
from collector.receivers.otlp_grpc import OtlpGrpcReceiver
from collector.receivers.otlp_http import OtlpHttpReceiver
from collector.receivers.tls import ServerTls, TlsError
from collector.server_file import server_file
from collector.store import Store, StoreError, open_store
from collector.store.health import StoreProbe, store_error_reason
from collector.store.maintenance import StoreMaintainer
from collector.store.retention import RetentionKeeper
from collector.store.writer import SpanWriter
from collector.telemetry import Metrics
from evaluators.registry import build_evaluator

if TYPE_CHECKING:  # the judge client (and `openai`) loads only when a judge is configured
    from evaluators.judge.client import JudgeClient

log = logging.getLogger(__name__)


class _UvicornServer(uvicorn.Server):
    # The service owns SIGINT/SIGTERM so it can drain the writer before exiting.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Service:
    """One ragpulse process: receivers, pipeline, writer and store."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.metrics = Metrics()
        use_system_allocator()  # for the whole process: it is the service's
        self.store: Store | None = None
        self.writer: SpanWriter | None = None
        self.forwarder: Forwarder | None = None
        self.assembler: TraceAssembler | None = None
        self.judge_stage: JudgeStage | None = None
        self.judge_health: JudgeHealth | None = None
        self.evaluation_exporter: EvaluationExporter | None = None
        self.alert_book: AlertBook | None = None
        self.canary_runner: CanaryRunner | None = None
        self.retention: RetentionKeeper | None = None
        self.maintainer: StoreMaintainer | None = None
        self.probe_runner: ProbeRunner | None = None
        self.store_probe: StoreProbe | None = None
        budget = config.sampling.budget
        # One budget for every judge call: online scoring and the canaries.
        self.judge_budget = JudgeBudget(
            budget.judge_calls_per_minute, budget.judge_tokens_per_day, time.monotonic()
        )
        self.alert_evaluator: AlertEvaluator | None = None
        self.webhook_notifier: WebhookNotifier | None = None
        self._judge: JudgeClient | None = None
        self._canary_judge: JudgeClient | None = None
        self._stopped = threading.Event()
        self._grpc: OtlpGrpcReceiver | None = None
        self._http: _UvicornServer | None = None
        self._http_task: asyncio.Task[None] | None = None
        self._http_socket: socket.socket | None = None
        self._stop = asyncio.Event()
        self._tls: ServerTls | None = None

    @property
    def grpc_port(self) -> int:
        return self._grpc.port if self._grpc else 0

    @property
    def http_port(self) -> int:
        return self._http_socket.getsockname()[1] if self._http_socket else 0

    @property
    def http_url(self) -> str:
        scheme = "https" if self._tls else "http"
        return f"{scheme}://{self.config.receivers.host}:{self.http_port}"

    async def start(self) -> None:
        cfg = self.config
        cfg.check_evaluators()
        keyring = self._keyring()
        self._tls = self._server_tls()
        _warn_if_unsafe(cfg)
        store_config = cfg.store_beside_workers()
        self.store = open_store(store_config)
        self.metrics.watch_store(self.store.health)
        self.store_probe = StoreProbe(self.store)
        self.store_probe.start()
        self.writer = SpanWriter(
            self.store, self.metrics, cfg.store.max_queue_spans, cfg.store.max_commit_spans
        )
        # Slice dimensions' columns before anything reads or writes them (alerts may cut by them).
        dimensions, caps = slicing(self.store, cfg.monitoring, time.monotonic())
        # First: a canary file that cannot be read stops the start before anything else runs.
        self._start_monitoring(self.store)
        if cfg.assembler.enabled:
            scoring = self._start_scoring(self.store)
            self.assembler = TraceAssembler(
                self.store,
                cfg.assembler,
                self.metrics,
                scoring=scoring,
                dimensions=dimensions,
                caps=caps,
                spill=SpillDirectory(spill_directory(cfg)),
                mapping=cfg.mapping.options(),
            )
            self.writer.add_listener(self.assembler.on_commit)
            self.writer.add_gate(self.assembler.accepting)
            self.assembler.start()
        self.writer.start()
        if cfg.store.retention.enabled:  # after the writer: its deletions run beside span appends
            self.retention = RetentionKeeper(self.store, cfg.store.retention, self.metrics)
            self.retention.start()
        if self.store.shared:  # a lake: small files merged, old snapshots expired, by the leader
            self.maintainer = StoreMaintainer(self.store, cfg.store.compact_every)
            self.maintainer.start()
        if cfg.exporters.forward_spans and cfg.exporters.otlp.endpoint:
            export = self._redactor("export")
            self.forwarder = Forwarder(
                cfg.exporters.otlp,
                self.metrics,
                cfg.exporters.forward_queue,
                redact=export.redact_message if export else None,
            )
            self.forwarder.start()
        storage = self._redactor("storage")
        pipeline = IngestPipeline(self.writer, self.metrics, self.forwarder, redactor=storage)

        self._grpc = OtlpGrpcReceiver(
            cfg.receivers,
            pipeline,
            self.metrics,
            interceptors=[AuthInterceptor(keyring, self.metrics)],
            credentials=self._tls.grpc_credentials() if self._tls else None,
        )
        await self._grpc.start()

        http_receiver = OtlpHttpReceiver(cfg.receivers, pipeline, self.metrics)
        api = Api(self.store, self.metrics, cfg.sql, self.assembler, health=self.health, ready=self.readiness)
        dashboard = DashboardApi(dashboard_data(self._read_rows, cfg))
        app = Starlette(
            routes=[*http_receiver.routes(), *api.routes(), *dashboard.routes(), *pages.routes()],
            middleware=[
                Middleware(
                    AuthMiddleware,
                    keyring=keyring,
                    metrics=self.metrics,
                    metrics_open=cfg.auth.metrics == "open",
                )
            ],
        )
        self._http_socket = _listen(cfg.receivers.host, cfg.receivers.http_port)
        # Written once both sockets listen (connections queue from here), before /healthz answers,
        # so a client that saw the server healthy also finds the sidecar.
        if not self.store.shared:  # a lake is opened by any number of processes: no sidecar
            server_file(cfg.store.path).write_bytes(
                orjson.dumps({"pid": os.getpid(), "http_url": self.http_url, "grpc_port": self.grpc_port})
            )
        self._http = _UvicornServer(
            uvicorn.Config(
                app,
                log_level="warning",
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=5,
                **(self._tls.uvicorn_options() if self._tls else {}),
            )
        )
        self._http_task = asyncio.create_task(self._http.serve(sockets=[self._http_socket]))
        while not self._http.started:
            if self._http_task.done():
                self._http_task.result()
                raise OSError("HTTP server failed to start")
            await asyncio.sleep(0.01)
        if cfg.probes:  # once both receivers listen: the app's spans of the first run have a home
            self.probe_runner = ProbeRunner(
                self.store,
                cfg.probes,
                pipeline,
                self.metrics,
                cfg.sql.timeout,
                on_cases=self.assembler.refresh_cases if self.assembler else None,
            )
            self.probe_runner.start()
        log.info(
            "ragpulse listening: OTLP/gRPC %s:%d, OTLP/HTTP and API %s",
            cfg.receivers.host,
            self.grpc_port,
            self.http_url,
        )
        if store_config.threads != cfg.store.threads:
            log.info(
                "DuckDB threads: %d, the cores the %d mapping workers leave (store.threads: null)",
                store_config.threads,
                cfg.assembler.workers,
            )

    def _start_scoring(self, store: Store) -> ScoringSetup | None:
        """The online scoring stages `scoring:` asks for: the deterministic evaluators' setup (run by
        the assembler's mapping job), the judge stage when a judge evaluates any entry, and the
        evaluation exporter when `exporters.otlp.endpoint` is set."""
        cfg = self.config
        setup = ScoringSetup.of_config(cfg)
        if setup is None:
            return None
        if setup.judge_entries:
            from evaluators.judge.build import open_judge

            judge = self._judge = open_judge(cfg.judge, check=False)
            judge.on_rate_limited = self.metrics.rate_limit_counter("scoring")
            self.judge_health = JudgeHealth(judge.model)
            threading.Thread(target=self._check_judge, name="ragpulse-judge-check", daemon=True).start()
            evaluators = [(str(e["name"]), build_evaluator(e, judge)) for e in setup.judge_entries]
            self.judge_stage = JudgeStage(
                store,
                evaluators,
                cfg.scoring,
                self.judge_budget,
                cfg.judge.max_concurrency,
                self.metrics,
                setup.export_events,
                redactor=self._redactor("judge"),
                mapping=cfg.mapping.options(),
            )
            self.judge_stage.start()
        if setup.export_events:
            export = self._redactor("export")
            self.evaluation_exporter = EvaluationExporter(
                store, cfg.exporters, self.metrics, redact=export.redact if export else None
            )
            self.evaluation_exporter.start()
        return setup

    def _start_monitoring(self, store: Store) -> None:
        """The alert evaluator when `monitoring.alerts` has rules, the judge canaries when
        `monitoring.canaries` is set, and the webhook notifier when there are webhooks (it also
        delivers what an earlier run left pending)."""
        monitoring = self.config.monitoring
        if monitoring.webhooks:
            self.webhook_notifier = WebhookNotifier(store, monitoring, self.metrics)
            self.webhook_notifier.start()
        wake = self.webhook_notifier.wake if self.webhook_notifier else None
        self.alert_book = AlertBook(store, monitoring, self.metrics, on_notifications=wake)
        if monitoring.alerts:
            self.alert_evaluator = AlertEvaluator(
                store, monitoring, self.metrics, self.alert_book, self.config.sql.timeout
            )
            self.alert_evaluator.start()
        if monitoring.canaries is not None:
            from evaluators.judge.build import open_judge

            # A client of their own, caches off: a canary must ask the judge every time.
            judge = self._canary_judge = open_judge(
                self.config.judge, check=False, persistent_cache=False, cache_size=0
            )
            judge.on_rate_limited = self.metrics.rate_limit_counter("canaries")
            self.canary_runner = CanaryRunner(
                store,
                monitoring.canaries,
                judge.model,
                lambda entry: build_evaluator(entry, judge),
                self.judge_budget,
                self.alert_book,
                self.metrics,
                self.config.judge.max_concurrency,
            )
            self.canary_runner.start()

    def _check_judge(self) -> None:
        """The judge's pre-run check, repeated every minute while it fails: a judge that is down
        is reported loudly and in /healthz, but ragpulse keeps ingesting (its scores are errors)."""
        assert self._judge is not None and self.judge_health is not None
        while True:
            try:
                self._judge.check()
            except Exception as exc:
                self.judge_health.ok, self.judge_health.error = False, str(exc)
                log.error("THE JUDGE IS NOT ANSWERING; judge scores are errors until it does: %s", exc)
            else:
                self.judge_health.ok, self.judge_health.error = True, None
                log.info("judge %s answered its pre-run check", self._judge.model)
                return
            if self._stopped.wait(60):
                return

    def _keyring(self) -> Keyring:
        """The API keys (`auth:`); a key that cannot be read stops the start with its name."""
        try:
            keyring = Keyring.from_config(self.config.auth)
        except KeyringError as exc:
            raise ConfigError(f"invalid configuration: {exc}") from None
        return keyring

    def _redactor(self, stage: Stage) -> Redactor | None:
        """The redactor `redaction:` asks for at `stage`, counting what it redacts in /metrics."""
        return self.config.redaction.redactor(stage, self.metrics.redaction_counter(stage))

    def _server_tls(self) -> ServerTls | None:
        """The certificate of `tls:` (None: plaintext); a file that cannot be used stops the start."""
        try:
            tls = ServerTls.from_config(self.config.tls)
        except TlsError as exc:
            raise ConfigError(f"invalid configuration: {exc}") from None
        return tls

    def _read_rows(self, sql: str) -> list[dict[str, Any]]:
        """One read-only query with the `sql:` limits (the dashboard's queries)."""
        assert self.store is not None
        return self.store.query(sql, self.config.sql.max_rows, self.config.sql.timeout).records()

    def health(self) -> dict[str, object]:
        """`GET /healthz` and `/healthz/live`: ok while the process serves (whatever the store's
        state), with the store's and the judge's state."""
        body: dict[str, object] = {"status": "ok"}
        if self.store is not None:
            body["store"] = self.store.health.as_dict()
        if self.judge_health is not None:
            body["judge"] = self.judge_health.as_dict()
        return body

    def readiness(self) -> tuple[bool, dict[str, object]]:
        """`GET /healthz/ready`: ready while exports can be stored; the reason when not (the store
        cannot write, ragpulse is stopping). A judge that is down does not make it unready: spans
        are still stored and their judge scores are errors."""
        if self._stop.is_set():
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

    async def stop(self) -> None:
        """Stop in reverse order; every export already accepted is committed before the store closes."""
        if self.probe_runner:  # first: its runs submit spans to the pipeline and record themselves
            await asyncio.to_thread(self.probe_runner.stop)
        if self._grpc:
            await self._grpc.stop(grace=5)
        if self._http and self._http_task:
            self._http.should_exit = True
            await self._http_task
        if self.writer:
            await asyncio.to_thread(self.writer.stop)
        self._stopped.set()
        if self.assembler:
            await asyncio.to_thread(self.assembler.stop)
        if self.judge_stage:
            await asyncio.to_thread(self.judge_stage.stop)
        if self.canary_runner:
            await asyncio.to_thread(self.canary_runner.stop)
        if self._judge is not None or self._canary_judge is not None:
            from evaluators.judge.build import close_judge

            close_judge(self._judge)
            close_judge(self._canary_judge)
        if self.evaluation_exporter:
            await asyncio.to_thread(self.evaluation_exporter.stop)
        if self.alert_evaluator:
            await asyncio.to_thread(self.alert_evaluator.stop)
        if self.webhook_notifier:
            await asyncio.to_thread(self.webhook_notifier.stop)
        if self.forwarder:
            await asyncio.to_thread(self.forwarder.stop)
        if self.retention:  # before the store closes; a round in progress stops between batches
            await asyncio.to_thread(self.retention.stop)
        if self.maintainer:
            await asyncio.to_thread(self.maintainer.stop)
        if self.store_probe:
            await asyncio.to_thread(self.store_probe.stop)
        if self.store:
            try:
                self._close_store(self.store)
            finally:
                if not self.store.shared:
                    with contextlib.suppress(OSError):
                        server_file(self.config.store.path).unlink()

    @staticmethod
    def _close_store(store: Store) -> None:
        """Close the store; a store that cannot write its last checkpoint ends the stop with one
        line (`StoreError`, exit 1), not a traceback: what was acknowledged is in the write-ahead
        log, replayed at the next start."""
        try:
            store.close()
        except Exception as exc:
            reason = store_error_reason(exc)
            if reason is None:
                raise
            raise StoreError(
                f"ragpulse stopped, but the store could not write its last checkpoint ({reason}); "
                "every acknowledged span is in the write-ahead log and is replayed at the next start"
            ) from None

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self, ready: threading.Event | None = None) -> None:
        """Start, serve until SIGINT/SIGTERM (or `request_stop`), then stop cleanly."""
        loop = asyncio.get_running_loop()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._stop.set)
        try:
            await self.start()
            if ready is not None:
                ready.set()
            await self._stop.wait()
        finally:
            await self.stop()


def _warn_if_unsafe(config: Config) -> None:
    """Log what `ragpulse doctor` finds unsafe (a network address without keys or TLS, a judge over
    plain HTTP): the service still starts, loudly."""
    for finding in examine(config):
        if finding.level == "unsafe":
            log.warning(
                "unsafe setup (%s): %s; fix: %s (ragpulse doctor)", finding.check, finding.detail, finding.fix
            )


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Naming the protocol matters: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
    # sockets whose proto is IPPROTO_TCP, and accepted connections inherit it. With proto 0, a
    # response written as headers then body waited for the client's delayed ACK: 40 ms per request
    # on a kept-alive connection (the dashboard's fetches, API clients, /metrics scrapers).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen for OTLP/HTTP on {host}:{port}: {exc.strerror}") from None
    sock.listen(1024)
    sock.setblocking(False)
    return sock


class BackgroundService:
    """Runs a Service on its own event loop thread: for `ragpulse demo` and the tests.

    `with BackgroundService(config) as svc:` returns once the ports are bound; leaving the block
    stops the service and waits until the store is closed.
    """

    def __init__(self, config: Config) -> None:
        self.service = Service(config)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="ragpulse-service", daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.service.run(self._ready))
        except BaseException as exc:
            self._error = exc
            self._ready.set()
        finally:
            self._loop.close()

    def __enter__(self) -> Service:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self.service

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self.service.request_stop)
            self._thread.join(60)
