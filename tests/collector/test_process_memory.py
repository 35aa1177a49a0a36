"""How the service takes memory and gives it back: Arrow memory from the C library's allocator in the
service and its mapping workers (pyarrow's default pool kept about 100 MiB more over a burst), unless
ARROW_DEFAULT_MEMORY_POOL chooses; malloc's arenas capped, and their free pages handed back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from collector import process_memory
from collector.process_memory import ENV, use_system_allocator
from collector.processors.assembly.workers import mapping_pool
from collector.service import BackgroundService, Service
from tests.support.helpers import make_config


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


def resident_mib() -> float:
    """Resident memory counted page by page (VmRSS may lag behind a large free on newer kernels)."""
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Rss:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no Rss in smaps_rollup")


@pytest.mark.skipif(process_memory._libc is None, reason="the C library is not glibc")
def test_free_pages_kept_by_malloc_go_back_to_the_system() -> None:
    # 2 KiB objects come from malloc (Python's own allocator takes 512 bytes and less). Keeping one
    # in ten alive leaves the freed ones between live ones, where free() cannot give them back.
    blocks = [bytes(2048) for _ in range(60_000)]
    kept = blocks[::10]
    del blocks
    before = resident_mib()
    time.sleep(0.1)
    assert resident_mib() > before - 5  # free() kept them
    assert process_memory.release_free_memory()
    after = resident_mib()
    assert before - after > 25, (before, after)  # the whole free pages between live blocks
    assert len(kept) == 6_000


@pytest.mark.skipif(process_memory._libc is None, reason="the C library is not glibc")
def test_malloc_arenas_are_capped_unless_the_environment_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(process_memory.ARENAS_ENV, raising=False)
    assert process_memory.limit_malloc_arenas()
    monkeypatch.setenv(process_memory.ARENAS_ENV, "4")
    assert not process_memory.limit_malloc_arenas()


def test_the_releaser_gives_memory_back_every_so_often(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []
    monkeypatch.setattr(process_memory, "release_free_memory", lambda: calls.append(time.monotonic()))
    releaser = process_memory.MemoryReleaser(every=0.05)
    releaser.start()
    time.sleep(0.5)
    releaser.stop()
    count = len(calls)
    assert 3 <= count <= 11, calls
    time.sleep(0.2)
    assert len(calls) == count  # stopped


def test_the_service_releases_memory_while_it_runs(tmp_path: Path) -> None:
    with BackgroundService(make_config(tmp_path)) as service:
        names = {thread.name for thread in threading.enumerate()}
        assert "ragpulse-memory-release" in names
        assert service.metrics is not None
    assert "ragpulse-memory-release" not in {thread.name for thread in threading.enumerate()}
