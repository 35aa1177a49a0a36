"""The store's periodic housekeeping (`Store.maintain`: compaction of a lake), run by the leader."""

from __future__ import annotations

import logging

from collector.background import BackgroundWorker
from collector.store.base import Store

log = logging.getLogger(__name__)


class StoreMaintainer(BackgroundWorker):
    """Every `every` seconds, on the replica that leads, `store.maintain()`."""

    def __init__(self, store: Store, every: float) -> None:
        super().__init__("ragpulse-store-maintenance")
        self._store = store
        self._every = every

    def _run(self) -> None:
        self._run_every(
            self._every, self.run_once, log, "store maintenance failed; retrying at the next round"
        )

    def run_once(self) -> None:
        """One round: maintain the store if this replica leads."""
        if self._store.is_leader():
            self._store.maintain()
