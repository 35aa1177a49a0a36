"""Where ragpulse's processes take memory from, and how the service gives freed memory back.

- Arrow buffers come from the C library's allocator: pyarrow's default pool (mimalloc in its
  wheels) keeps memory it has freed for reuse; over a burst the service and its mapping workers held
  about 100 MiB more that way than with the C library's allocator, at the same rate (bench/README.md,
  "Ingest"). `ARROW_DEFAULT_MEMORY_POOL` still chooses, when set.
- The C library's allocator (glibc's malloc) gives each thread that allocates at once an arena of its
  own, up to eight per core, and keeps what is freed in them for reuse. The service's threads (gRPC,
  HTTP, the span writer, the assembler, the judge) allocate and free protobuf messages and Arrow
  tables all day: its arenas held 330-450 MiB free at 2,000 spans/s (docs/operations.md, "Memory
  over time"). The service caps them at two (`M_ARENA_MAX`, as `MALLOC_ARENA_MAX=2` would; the
  variable, when set, still chooses) and hands whole free pages back to the system once a minute
  (`malloc_trim`, a few milliseconds).

DuckDB allocates with a jemalloc of its own, which returns what it frees by itself (its resident
memory stayed within 30 MiB of what it had allocated). Elsewhere than
glibc (musl, macOS) the two glibc calls do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading

import pyarrow as pa

from collector.background import BackgroundWorker

log = logging.getLogger(__name__)

ENV = "ARROW_DEFAULT_MEMORY_POOL"
ARENAS_ENV = "MALLOC_ARENA_MAX"
MALLOC_ARENAS = 2
RELEASE_EVERY = 60.0  # seconds between two `malloc_trim` calls
_M_ARENA_MAX = -8  # mallopt's parameter number, from glibc's malloc.h


def use_system_allocator() -> None:
    """Take Arrow buffers from the C library's allocator from now on, unless `ENV` names a pool."""
    if not os.environ.get(ENV):
        pa.set_memory_pool(pa.system_memory_pool())


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (it has `malloc_trim` and `mallopt`), else None."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not (hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt")):
        return None
    return libc


_libc = _glibc()
_arenas_lock = threading.Lock()


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Let malloc create at most `arenas` arenas from now on (threads that have one keep it): call it
    before the service starts its threads. `MALLOC_ARENA_MAX` in the environment wins. Returns
    whether the limit was set."""
    if _libc is None or os.environ.get(ARENAS_ENV):
        return False
    with _arenas_lock:
        return bool(_libc.mallopt(_M_ARENA_MAX, arenas))


def release_free_memory() -> bool:
    """Hand the whole free pages of every malloc arena back to the system. Returns whether any was."""
    if _libc is None:
        return False
    return bool(_libc.malloc_trim(0))


class MemoryReleaser(BackgroundWorker):
    """Calls `release_free_memory` every `every` seconds, on a thread of its own."""

    def __init__(self, every: float = RELEASE_EVERY) -> None:
        super().__init__("ragpulse-memory-release")
        self._every = every

    def _run(self) -> None:
        self._stopping.wait(self._every)  # nothing to give back at start
        self._run_every(self._every, release_free_memory, log, "releasing free memory failed")
