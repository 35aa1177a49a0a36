"""Shared fixtures: a real ragpulse service on loopback ports with a real DuckDB file."""

from __future__ import annotations

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
