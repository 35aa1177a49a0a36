"""DuckDB's threads beside the mapping workers: `store.threads: null` leaves the workers their cores."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from collector.service import BackgroundService
from collector.store.config import StoreConfig, available_cores
from tests.support.helpers import make_config, sql


@pytest.mark.parametrize(
    ("workers", "cores", "threads"),
    [(2, 2, 1), (2, 8, 6), (4, 2, 1), (1, 4, 3)],
)
def test_null_threads_are_the_cores_the_workers_leave(workers: int, cores: int, threads: int) -> None:
    assert StoreConfig().beside_workers(workers, cores).threads == threads


def test_configured_threads_and_no_workers_keep_the_section_as_it_is() -> None:
    assert StoreConfig(threads=3).beside_workers(2, 2).threads == 3
    assert StoreConfig().beside_workers(0, 8).threads is None


def _duckdb_threads(tmp_path: Path, **sections: dict[str, object]) -> int:
    tmp_path.mkdir(exist_ok=True)
    with BackgroundService(make_config(tmp_path, **sections)) as svc:
        return int(sql(svc, "SELECT current_setting('threads') AS n")[0]["n"])


def test_serve_gives_duckdb_the_cores_its_mapping_worker_leaves(tmp_path: Path) -> None:
    assert _duckdb_threads(tmp_path, assembler={"workers": 1}) == max(1, available_cores() - 1)


def test_serve_keeps_configured_threads_and_duckdbs_default_without_workers(tmp_path: Path) -> None:
    assert _duckdb_threads(tmp_path / "a", assembler={"workers": 1}, store={"threads": 3}) == 3
    # No worker process: the assembler maps on its own thread, and DuckDB keeps its default.
    with duckdb.connect() as plain:
        row = plain.execute("SELECT current_setting('threads')").fetchone()
    assert row is not None
    default = int(row[0])
    assert _duckdb_threads(tmp_path / "b") == default
