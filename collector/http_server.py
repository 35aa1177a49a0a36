"""The service's HTTP port as a component: OTLP/HTTP, the API and the dashboard on one uvicorn server,
on a socket bound when the component is built (connections queue from then on)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette

from collector.lifecycle import Component


class _UvicornServer(uvicorn.Server):
    # The service owns SIGINT/SIGTERM so it can drain the writer before exiting.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class HttpServer(Component):
    """uvicorn serving `app` on `sock`; `on_listening` runs just before it answers (the service
    writes its sidecar file there, so a client that saw it healthy also finds the file)."""

    name = "http"

    def __init__(
        self,
        app: Starlette,
        sock: socket.socket,
        tls_options: dict[str, Any],
        on_listening: Callable[[], None] = lambda: None,
    ) -> None:
        self.socket = sock
        self._on_listening = on_listening
        self._server = _UvicornServer(
            uvicorn.Config(
                app,
                log_level="warning",
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=5,
                **tls_options,
            )
        )
        self._task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        return int(self.socket.getsockname()[1])

    async def start(self) -> None:
        """Serve, and return once uvicorn has started (or raise why it could not)."""
        self._on_listening()
        self._task = asyncio.create_task(self._server.serve(sockets=[self.socket]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise OSError("HTTP server failed to start")
            await asyncio.sleep(0.01)

    async def stop(self, deadline: float | None = None) -> None:
        """Stop taking requests; those in progress get uvicorn's 5 s (`timeout_graceful_shutdown`)."""
        if self._task is None:  # never served (a later component failed to start)
            self.socket.close()
            return
        self._server.should_exit = True
        await self._task


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket for the HTTP port (0 picks a free one)."""
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
