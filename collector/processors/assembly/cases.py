"""The golden cases mapping matches traces against: read from the store, again when they change."""

from __future__ import annotations

import time

import orjson

from collector.processors.mapping_job import CaseIndex
from collector.store.base import CaseBook

# Seconds between re-reads of the golden cases when several replicas share the store: `datasets load`
# writes the lake directly, and only the replica it went through (if any) would hear of it.
CASES_REFRESH = 30.0


class GoldenCases:
    """The current case index, and its version (a worker process keeps the index it was sent)."""

    def __init__(self, store: CaseBook) -> None:
        self._store = store
        self.index = CaseIndex()
        self.version = 0
        self._stale = True
        self._loaded_at = 0.0

    def mark_stale(self) -> None:
        """The cases changed (`datasets load`): re-read them before the next assembly."""
        self._stale = True

    def refresh(self) -> None:
        """Re-read the cases if they changed, or may have: on a shared store, every CASES_REFRESH s
        (another process may have loaded cases into the lake)."""
        if self._store.shared and time.monotonic() - self._loaded_at >= CASES_REFRESH:
            self._stale = True
        if self._stale:
            self._load()

    def _load(self) -> None:
        self._stale = False
        self._loaded_at = time.monotonic()
        index = CaseIndex()
        for row in self._store.read_cases().to_pylist():
            expected = orjson.loads(row["expected_documents"]) if row["expected_documents"] else None
            index.by_id[row["case_id"]] = (expected, row["expected_answer"])
            if row["normalized_question"]:
                index.by_question.setdefault(row["normalized_question"], row["case_id"])
        self.index = index
        self.version += 1
