"""The agent-framework tests' fixtures (tests/support/agentic.py has what else they share): the sandbox
every test runs in, `loopback_only` (no connection or name lookup beyond loopback, checked by
`agentic.assert_no_network`) and `sandbox` (the same in an empty working directory, checked by
`Sandbox.check`); `capture`, a private OpenTelemetry SDK provider writing to memory; and
`no_leaked_context`."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.agentic import LOOPBACK, Sandbox


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every connection to, and every name lookup of, a non-loopback host refused (the stub is on
    loopback); the refused addresses and host names, for `assert_no_network`."""
    refused: list[Any] = []
    connect = socket.socket.connect
    getaddrinfo = socket.getaddrinfo

    def guarded_connect(sock: socket.socket, address: Any) -> Any:
        if isinstance(address, tuple) and address[0] not in LOOPBACK:
            refused.append(address)
            raise OSError(f"test sandbox: no network ({address!r})")
        return connect(sock, address)

    def guarded_lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in LOOPBACK and host not in (b"127.0.0.1", b"localhost"):
            refused.append(host)
            raise socket.gaierror(socket.EAI_NONAME, f"test sandbox: no network ({host!r})")
        return getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_lookup)
    return refused


@pytest.fixture
def sandbox(loopback_only: list[Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Sandbox:
    """`loopback_only`, in a new, empty working directory (`cwd` in tmp_path)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return Sandbox(loopback_only, cwd)


@pytest.fixture
def no_leaked_context() -> Iterator[None]:
    """Fail a test whose library left an OTel context attached (later tests' spans would get a parent
    from it), and put the original context back so that the leak stops here."""
    before = otel_context.get_current()
    yield
    if otel_context.get_current() is not before:
        otel_context.attach(before)
        pytest.fail("the test left an OpenTelemetry context attached")


@pytest.fixture
def capture() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """A private SDK tracer provider (never the global one) writing to memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()
