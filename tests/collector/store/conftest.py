"""The store's tests' fixtures: a DuckDB store on a real file, with the settings of `store_config`
(the defaults; a module that needs others overrides `store_config`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.store.config import StoreConfig
from collector.store.duckdb_store import DuckDBStore


@pytest.fixture
def store_config() -> StoreConfig:
    """The settings `store` opens its file with."""
    return StoreConfig()


@pytest.fixture
def store(tmp_path: Path, store_config: StoreConfig) -> Iterator[DuckDBStore]:
    """A DuckDB store on a new file in this test's tmp_path, closed at the end."""
    store = DuckDBStore(tmp_path / "store.duckdb", store_config)
    yield store
    store.close()
