"""One lifecycle for the service's long-lived parts: every receiver, processor, exporter, monitor and
maintenance loop of `ragpulse serve` is a `Component`. The service builds them from the config, one
builder per section (collector/builders.py), starts them in that order and stops them in reverse, so
that each one stops after everything that feeds it: the receivers first, then the writer drains
what they accepted, the assembler and the judge finish what it committed, and the store closes last.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Sequence

log = logging.getLogger(__name__)

# Seconds a stop may take in all, from the first component's to the last's: each has its own drain
# bound within it (the writer's 30 s, a background loop's 15 s), and none waits past it.
STOP_SECONDS = 60.0


class Component:
    """A long-lived part of the service: its `name`, `start`, a `stop` that drains (returns once what
    it accepted is done, or at `deadline`, a `time.monotonic()` time), and its `health` for
    `/healthz` (None: nothing to report). `start` and `stop` may be coroutine functions (the
    receivers, which run on the service's event loop); the others run on a thread of their own,
    so `stop` may block."""

    name: str = ""

    def start(self) -> Awaitable[None] | None:
        raise NotImplementedError

    def stop(self, deadline: float | None = None) -> Awaitable[None] | None:
        raise NotImplementedError

    def health(self) -> dict[str, object] | None:
        """What `/healthz` says of this component under its name (None: nothing)."""
        return None


def remaining(deadline: float | None, bound: float) -> float:
    """Seconds left for a drain bounded by `bound`, and by `deadline` when given."""
    if deadline is None:
        return bound
    return max(0.0, min(bound, deadline - time.monotonic()))


async def start_all(components: Sequence[Component]) -> None:
    """Start the components in order."""
    for component in components:
        started = component.start()
        if inspect.isawaitable(started):
            await started


async def stop_all(components: Sequence[Component], seconds: float = STOP_SECONDS) -> None:
    """Stop the components in reverse order, every one of them even when one fails; then raise the
    first failure."""
    deadline = time.monotonic() + seconds
    failure: BaseException | None = None
    for component in reversed(components):
        try:
            if inspect.iscoroutinefunction(component.stop):
                await component.stop(deadline)
            else:
                await asyncio.to_thread(component.stop, deadline)
        except Exception as exc:
            if failure is None:
                failure = exc
            else:
                log.error("stopping %s failed too: %s", component.name, exc)
    if failure is not None:
        raise failure
