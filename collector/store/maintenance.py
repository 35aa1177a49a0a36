"""The store's periodic housekeeping (`Store.maintain`: compaction of a lake), run by the leader."""

from __future__ import annotations

import logging
import time

from collector.background import BackgroundWorker
from collector.store.base import Housekeeping

log = logging.getLogger(__name__)


# Seconds between two looks at the lease: on a lake, each look is also the replica's heartbeat.
HEARTBEAT_SECONDS = 10.0


class StoreMaintainer(BackgroundWorker):
    """Every HEARTBEAT_SECONDS, whether this replica leads (its heartbeat); every `every` seconds, on
    the replica that leads, `store.maintain()`."""

    def __init__(self, store: Housekeeping, every: float) -> None:
        super().__init__("ragpulse-store-maintenance")
        self._store = store
        self._every = every
        self._due = 0.0  # monotonic time of the next maintenance round

    def _run(self) -> None:
        self._run_every(
            min(HEARTBEAT_SECONDS, self._every),
            self.run_once,
            log,
            "store maintenance failed; retrying at the next round",
            absorb=lambda exc: self._store.health.absorb(exc, "maintenance"),
        )

    def run_once(self) -> None:
        """One round: maintain the store if this replica leads and a round is due."""
        if self._store.is_leader() and time.monotonic() >= self._due:
            self._due = time.monotonic() + self._every
            self._store.maintain()
