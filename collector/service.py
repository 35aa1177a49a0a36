"""`ragpulse serve`: the components built from the config (collector/builders.py), started in order
and stopped in reverse (collector/lifecycle.py).

Start: store -> monitoring -> scoring -> assembler -> forwarder -> writer -> retention -> receivers
-> probes. Stop runs the other way: the receivers stop taking exports, the writer commits what it
already accepted, the assembler and the judge finish what it committed, and the store checkpoints
and closes last.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from typing import Any

from collector.auth import Keyring, KeyringError
from collector.builders import BUILDERS
from collector.config import Config, ConfigError
from collector.doctor import examine
from collector.lifecycle import start_all, stop_all
from collector.parts import Parts
from collector.process_memory import limit_malloc_arenas, use_system_allocator
from collector.receivers.tls import ServerTls, TlsError

log = logging.getLogger(__name__)


class Service(Parts):
    """One ragpulse process: its parts (`Parts`), started and stopped as one."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        use_system_allocator()  # for the whole process: it is the service's
        limit_malloc_arenas()  # before the service's threads take arenas
        self._stop = asyncio.Event()
        self.listening = False  # every component started

    async def start(self) -> None:
        """Build every component from the config, then start them in order. A builder that fails
        (a file that cannot be read, a port in use) stops the start; what was started is stopped."""
        cfg = self.config
        cfg.check_evaluators()
        self.keyring = _keyring(cfg)
        self.tls = _server_tls(cfg)
        _warn_if_unsafe(cfg)
        self.store_config = cfg.store_beside_workers()
        for build in BUILDERS:
            self.components += build(self)
        await start_all(self.components)
        self.listening = True
        log.info(
            "ragpulse listening: OTLP/gRPC %s:%d, OTLP/HTTP and API %s, dashboard %s/",
            cfg.receivers.host,
            self.grpc_port,
            self.http_url,
            self.http_url,
        )
        if self.store_config.threads != cfg.store.threads:
            log.info(
                "DuckDB threads: %d, the cores the %d mapping workers leave (store.threads: null)",
                self.store_config.threads,
                cfg.assembler.workers,
            )

    async def stop(self) -> None:
        """Stop in reverse order; every export already accepted is committed before the store closes."""
        self.stopping.set()
        said = self.listening  # a start that failed says why, not that it stopped
        if said:
            log.info("ragpulse stopping: committing what was accepted")
        await stop_all(self.components)
        if said:
            log.info("ragpulse stopped")

    def request_stop(self) -> None:
        self.stopping.set()
        self._stop.set()

    async def run(self, ready: threading.Event | None = None) -> None:
        """Start, serve until SIGINT/SIGTERM (or `request_stop`), then stop cleanly."""
        loop = asyncio.get_running_loop()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self.request_stop)
        try:
            await self.start()
            if ready is not None:
                ready.set()
            await self._stop.wait()
        finally:
            await self.stop()


def _keyring(config: Config) -> Keyring:
    """The API keys (`auth:`); a key that cannot be read stops the start with its name."""
    try:
        return Keyring.from_config(config.auth)
    except KeyringError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None


def _server_tls(config: Config) -> ServerTls | None:
    """The certificate of `tls:` (None: plaintext); a file that cannot be used stops the start."""
    try:
        return ServerTls.from_config(config.tls)
    except TlsError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None


def _warn_if_unsafe(config: Config) -> None:
    """Log what `ragpulse doctor` finds unsafe (a network address without keys or TLS, a judge over
    plain HTTP): the service still starts, loudly."""
    for finding in examine(config):
        if finding.level == "unsafe":
            log.warning(
                "unsafe setup (%s): %s; fix: %s (ragpulse doctor)", finding.check, finding.detail, finding.fix
            )


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
