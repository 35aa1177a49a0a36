"""Where ragpulse's processes take Arrow memory from.

pyarrow's default pool (mimalloc in its wheels) keeps memory it has freed for reuse; over a burst the
service and its mapping workers held about 100 MiB more that way than with the C library's allocator,
at the same rate (bench/README.md, "Ingest"). `ARROW_DEFAULT_MEMORY_POOL` still chooses, when set.
"""

from __future__ import annotations

import os

import pyarrow as pa

ENV = "ARROW_DEFAULT_MEMORY_POOL"


def use_system_allocator() -> None:
    """Take Arrow buffers from the C library's allocator from now on, unless `ENV` names a pool."""
    if not os.environ.get(ENV):
        pa.set_memory_pool(pa.system_memory_pool())
