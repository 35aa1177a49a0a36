"""Shared fixtures: a real ragpulse service on loopback ports with a real DuckDB file."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from collector.config import Config
from collector.service import BackgroundService, Service


def make_config(tmp_path: Path, **sections: dict[str, Any]) -> Config:
    """A config on free loopback ports and a fresh database file; `sections` override keys."""
    data: dict[str, Any] = {
        "receivers": {"host": "127.0.0.1", "grpc_port": 0, "http_port": 0},
        "store": {"path": str(tmp_path / "ragpulse.duckdb")},
        # Map in the assembler thread: a worker process per test service would cost a second of
        # start-up each. The worker-process path has its own tests.
        "assembler": {"workers": 0},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return Config.model_validate(data)


@pytest.fixture
def config_factory(tmp_path: Path) -> Callable[..., Config]:
    return lambda **sections: make_config(tmp_path, **sections)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    """A running service with default settings."""
    with BackgroundService(make_config(tmp_path)) as svc:
        yield svc


def sql(svc: Service, query: str) -> list[dict[str, Any]]:
    """Rows of a query through the running service's /api/sql."""
    response = httpx.post(f"{svc.http_url}/api/sql", json={"query": query}, timeout=30)
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()
    return rows


@pytest.fixture
def query() -> Callable[[Service, str], list[dict[str, Any]]]:
    return sql


RAGPULSE = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "ragpulse"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServeProcess:
    """`ragpulse serve` as a subprocess on fixed ports (a restart is reachable at the same address),
    for tests that kill it. `start(**assembler)` sets `RAGPULSE_ASSEMBLER__*` for that run."""

    def __init__(self, db: Path, log: Path) -> None:
        self.db = db
        self.log = log
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, **assembler: str) -> None:
        assert self.proc is None or self.proc.poll() is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
        env.update({f"RAGPULSE_ASSEMBLER__{k.upper()}": v for k, v in assembler.items()})
        command = [str(RAGPULSE), "serve", "--db", str(self.db)]
        command += ["--grpc-port", str(self.grpc_port), "--http-port", str(self.http_port)]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.db.parent,
                env={**env, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"ragpulse serve exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                if httpx.get(f"{self.http_url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        pytest.fail(f"ragpulse serve did not become healthy:\n{self.log.read_text()}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(10) == -signal.SIGKILL

    def terminate(self, timeout: float = 15) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"ragpulse serve did not exit within {timeout} s of SIGTERM:\n{self.log.read_text()}")

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator[ServeProcess]:
    srv = ServeProcess(tmp_path / "ragpulse.duckdb", tmp_path / "serve.log")
    try:
        yield srv
    finally:
        srv.cleanup()
