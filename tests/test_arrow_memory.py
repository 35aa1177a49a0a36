"""Arrow memory comes from the C library's allocator in the service and its mapping workers (pyarrow's
default pool kept about 100 MiB more over a burst), unless ARROW_DEFAULT_MEMORY_POOL chooses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from collector.arrow_memory import ENV, use_system_allocator
from collector.processors.assembler import mapping_pool
from collector.service import Service
from tests.helpers import make_config


@pytest.fixture
def default_pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The test process starts on pyarrow's own default pool, and gets back what it had."""
    monkeypatch.delenv(ENV, raising=False)
    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    yield
    pa.set_memory_pool(before)


def pool_backend() -> str:
    """The allocator behind the calling process's default Arrow pool (run in a mapping worker)."""
    return pa.default_memory_pool().backend_name


@pytest.mark.usefixtures("default_pool")
def test_the_service_takes_arrow_memory_from_the_system_allocator(tmp_path: Path) -> None:
    assert pool_backend() == "mimalloc"
    Service(make_config(tmp_path))
    assert pool_backend() == "system"


@pytest.mark.usefixtures("default_pool")
def test_a_mapping_worker_takes_arrow_memory_from_the_system_allocator() -> None:
    pool = mapping_pool(1, 0, None)
    try:
        assert pool.submit(pool_backend).result(timeout=60) == "system"
    finally:
        pool.shutdown()


@pytest.mark.usefixtures("default_pool")
def test_the_environment_variable_still_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "mimalloc")
    use_system_allocator()
    assert pool_backend() == "mimalloc"
    monkeypatch.setenv(ENV, "")  # set but empty: as if unset
    use_system_allocator()
    assert pool_backend() == "system"
