"""Running independent evaluations at once, results in input order.

Judge calls spend their time waiting on the model, so suites and calibration runs score their
cases on a small thread pool: with a model answering in 1 to 3 seconds, a calibration run of a few
hundred calls takes minutes instead of the better part of an hour. The judge client bounds the
calls in flight itself (`judge.max_concurrency`, a semaphore), and everything it shares between
threads (HTTP pool, verdict cache, verdict store) is thread-safe. Deterministic scoring gains
nothing from threads (it holds the GIL), so callers use one worker when no model is involved.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def map_in_order(fn: Callable[[T], R], items: Sequence[T], workers: int, name: str = "eval") -> list[R]:
    """`fn` over `items` on up to `workers` threads (1: in the calling thread), results in the order
    of `items`. The first exception, in item order, is raised once every started call is done."""
    if workers <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix=name) as pool:
        return list(pool.map(fn, items))
