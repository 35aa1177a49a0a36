"""Shared fixtures: a real ragpulse service on loopback ports with a real DuckDB file, a `ragpulse
serve` subprocess, and the OpenAI-protocol stub. The fixtures of one folder's tests are in its own
conftest.py (tests/collector/store/conftest.py, ...); plain helpers are in tests/support/."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import semconv
from collector.service import BackgroundService, Service
from evaluators.judge import JudgeClient
from tests.support.helpers import ServeProcess, make_config, sql
from tests.support.judging import evaluator_client
from tests.support.openai_stub import OpenAIStub
from tests.support.postgres import PostgresServer


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to test a stale build: the mapping's modules compiled (setup.py) before their sources
    last changed would run the old code in place of the new."""
    package = Path(semconv.__file__).parent
    built = list(package.rglob("*.so"))
    if not built:
        return
    newest_source = max(package.rglob("*.py"), key=lambda path: path.stat().st_mtime)
    oldest_build = min(path.stat().st_mtime for path in built)
    if newest_source.stat().st_mtime > oldest_build:
        pytest.exit(
            f"{newest_source} changed after the mapping was compiled: run `make compile` "
            "(or delete semconv's .so files to test it interpreted)",
            returncode=4,
        )


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    """A running service with default settings."""
    with BackgroundService(make_config(tmp_path)) as svc:
        yield svc


@pytest.fixture
def query() -> Callable[[Service, str], list[dict[str, Any]]]:
    """`sql`, for tests that take it as a fixture."""
    return sql


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator[ServeProcess]:
    """A `ragpulse serve` subprocess on this test's tmp_path, not started yet; killed at the end."""
    srv = ServeProcess(tmp_path / "ragpulse.duckdb", tmp_path / "serve.log")
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    """The OpenAI-protocol stub server, running for this test."""
    with OpenAIStub() as server:
        yield server


@pytest.fixture
def client(stub: OpenAIStub) -> JudgeClient:
    """The judge client of the judge-evaluator tests, on `stub` (tests.support.judging.evaluator_client)."""
    return evaluator_client(stub)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server for a module's lake tests (a catalog database per test: `new_lake`)."""
    server = PostgresServer().start()
    yield server
    server.stop()
