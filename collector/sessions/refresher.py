"""The sessions refresher: every `sessions.refresh_interval` seconds, the rows of `sessions` whose
turns or scores were written since are computed again (`Store.refresh_sessions`), so that a list
of sessions is read from `session_rollups` instead of aggregated from every turn per request.

It starts before the assembler and the judge and stops after them, with a last round, so a clean
stop leaves `sessions` current. Its first round also computes again the sessions touched shortly
before the last recorded refresh (`CATCH_UP_SECONDS`): what a process that was killed before its
round had written.
"""

from __future__ import annotations

import logging

from collector.background import BackgroundWorker
from collector.lifecycle import remaining
from collector.store.base import SessionRollups

log = logging.getLogger(__name__)

# At start, the sessions with a turn assembled or scored this long before the last recorded refresh
# are computed again: a write commits a few seconds at most after the time it stamps on its rows.
CATCH_UP_SECONDS = 300.0


class SessionRefresher(BackgroundWorker):
    """Keeps `session_rollups` current (see the module's docstring)."""

    def __init__(self, store: SessionRollups, interval: float) -> None:
        super().__init__("ragpulse-sessions")
        self._store = store
        self._interval = interval
        self._caught_up = False

    def _run(self) -> None:
        self._run_every(
            self._interval,
            self.run_once,
            log,
            "computing the sessions failed; retrying at the next round",
            absorb=lambda exc: self._store.health.absorb(exc, "sessions"),
        )

    def run_once(self) -> int:
        """One round; returns how many sessions were computed."""
        if not self._caught_up:
            computed = self._store.refresh_sessions(catch_up=CATCH_UP_SECONDS)
            self._caught_up = True
            return computed
        return self._store.refresh_sessions()

    def stop(self, deadline: float | None = None) -> None:
        """Stop the rounds, then run a last one: what the stages stopped before it wrote."""
        super().stop(deadline)
        if remaining(deadline, 15.0) > 0:
            try:
                self.run_once()
            except Exception as exc:
                if not self._store.health.absorb(exc, "sessions"):
                    log.exception("computing the sessions at stop failed")
