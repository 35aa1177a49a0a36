"""Whether the store can write, told by the writes themselves, and what the log says about it.

Every write that fails for the store's sake (a full disk, a file system made read-only, a database
file removed, the lake's catalog unreachable) is reported here instead of logging a traceback per
batch. The log gets one ERROR line when writes start failing, one summary line a minute while it
lasts (failed writes, spans refused) and one INFO line when a write succeeds again.
`/healthz/ready` answers 503 with the reason while `writable` is False, and the Prometheus gauge
`ragpulse_store_writable` follows it.

A write that fails for another reason (a bug, a conflict) is not the store's state: `absorb` says
so, and its caller logs it with its traceback as before.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol

import duckdb

from collector.background import BackgroundWorker

log = logging.getLogger(__name__)

# A summary line at most this often while writes fail.
SUMMARY_SECONDS = 60.0
# Writable again only after a success with no failure for this long: on a nearly full disk small
# commits squeeze through between failing ones, and the log would flip between the two states.
QUIET_SECONDS = 5.0

# What an OS or DuckDB error says, and the reason an operator reads for it.
_REASONS = (
    ("no space left on device", "no space left on device"),
    ("disk quota exceeded", "disk quota exceeded"),
    ("read-only file system", "the file system is read-only"),
    ("permission denied", "permission denied"),
    ("operation not permitted", "the database files cannot be written (operation not permitted)"),
    ("database has been invalidated", "the database was invalidated by an earlier write failure"),
    ("no such file or directory", "a file of the store is gone"),
    ("could not connect", "the catalog database cannot be reached"),
    ("connection refused", "the catalog database cannot be reached"),
    ("server closed the connection", "the catalog database closed the connection"),
    ("connection to server", "the catalog database cannot be reached"),
    ("terminating connection", "the catalog database closed the connection"),
    # libpq's words for a connection lost between statements (a background read while the catalog
    # was down failed with the first one, and logged a traceback).
    ("no connection to the server", "the catalog database cannot be reached"),
    ("could not receive data from server", "the catalog database cannot be reached"),
    ("could not send data to server", "the catalog database cannot be reached"),
    # PostgreSQL refuses every statement of a transaction after one failed: the catalog was lost
    # under it (a bad statement of ours would have failed first, and been logged as a bug).
    ("current transaction is aborted", "the catalog database aborted the transaction"),
    ("input/output error", "input/output error"),
    # DuckDB's memory (`store.memory_limit`) could not hold what a write or read needed: every
    # thread of the service would otherwise log a traceback a round (docs/operations.md).
    ("out of memory error", "DuckDB ran out of its memory (store.memory_limit)"),
)


def store_error_reason(exc: BaseException) -> str | None:
    """The reason `exc` says the store cannot write (e.g. "no space left on device"), or None when
    it is not a storage failure (a bug, a write-write conflict, bad input)."""
    text = str(exc).lower()
    for needle, reason in _REASONS:
        if needle in text:
            return reason
    if isinstance(exc, duckdb.FatalException | duckdb.IOException | OSError):
        return first_line(exc)
    return None


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (DuckDB's run to several), or its type when empty."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class StoreHealth:
    """The store's writability: fed by every write, read by `/healthz/ready` and `/metrics`."""

    def __init__(self, where: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.where = where  # the file or lake, named in log lines
        self._clock = clock
        self._lock = threading.Lock()
        self.writable = True
        self.reason: str | None = None
        self._since = self._last_failure = 0.0
        self._last_summary = 0.0
        # Since writes started failing: in all, and since the last summary line.
        self._failed = self._refused = 0
        self._failed_window = self._refused_window = 0
        self.failures_total = 0
        self.on_failure: Callable[[str], None] | None = None  # counted in /metrics, by component
        # Called once writes go through again (the assembler takes back the traces it could not store).
        self._on_recovery: list[Callable[[], None]] = []

    def failed(self, exc: BaseException, component: str, spans: int = 0) -> None:
        """A write of `component` failed, refusing `spans` spans (not acknowledged: clients retry)."""
        known = store_error_reason(exc)
        reason = known or first_line(exc)
        log.debug("%s: write failed", component, exc_info=exc)
        now = self._clock()
        with self._lock:
            self.failures_total += 1
            self._failed += 1
            self._failed_window += 1
            self._refused += spans
            self._refused_window += spans
            first = self.writable
            self.writable, self.reason = False, reason
            self._last_failure = now
            if first:
                self._since = self._last_summary = now
        if self.on_failure is not None:
            self.on_failure(component)
        if first:
            log.error(
                "THE STORE CANNOT WRITE (%s): %s; exports are refused with a retryable status until it "
                "can, and /healthz/ready answers 503",
                self.where,
                reason,
                # An error that is not a known storage failure may be a bug: its traceback, once.
                exc_info=exc if known is None else None,
            )
        else:
            self.summarize()

    def absorb(self, exc: BaseException, component: str) -> bool:
        """Count `exc` as a failed write of `component` when it is a storage failure and say True;
        say False for any other error (the caller logs it, traceback and all)."""
        if store_error_reason(exc) is None:
            return False
        self.failed(exc, component)
        return True

    def on_recovery(self, listener: Callable[[], None]) -> None:
        """Call `listener()` each time the store writes again after failing."""
        self._on_recovery.append(listener)

    def still_failing(self, exc: BaseException) -> None:
        """A probe found the store still unable to write: its latest reason, and the summary."""
        with self._lock:
            if not self.writable:
                self.reason = store_error_reason(exc) or first_line(exc)
        self.summarize()

    def succeeded(self) -> None:
        """A write went through: the store can write again, once no write failed for a few seconds."""
        if self.writable:  # the hot path: one attribute read, no lock
            return
        now = self._clock()
        with self._lock:
            if self.writable or now - self._last_failure < QUIET_SECONDS:
                return
            lasted = now - self._since
            failed, refused = self._failed, self._refused
            self.writable, self.reason = True, None
            self._failed = self._refused = self._failed_window = self._refused_window = 0
        log.info(
            "the store writes again (%s) after %.0f s: %d failed writes, %d spans refused "
            "(clients retry them)",
            self.where,
            lasted,
            failed,
            refused,
        )
        for listener in self._on_recovery:
            listener()

    def summarize(self) -> None:
        """While writes fail: one line a minute with what failed since the last one."""
        now = self._clock()
        with self._lock:
            if self.writable or now - self._last_summary < SUMMARY_SECONDS:
                return
            failed, refused = self._failed_window, self._refused_window
            self._failed_window = self._refused_window = 0
            self._last_summary = now
            lasted = now - self._since
        log.error(
            "the store still cannot write (%s) after %.0f s: %s; %d failed writes, %d spans refused "
            "in the last minute",
            self.where,
            lasted,
            self.reason,
            failed,
            refused,
        )

    def as_dict(self) -> dict[str, object]:
        """The readiness answer's `store` part."""
        if self.writable:
            return {"writable": True}
        failing_for = round(self._clock() - self._since, 1)
        return {"writable": False, "reason": self.reason, "failing_for_s": failing_for}


class HasHealth(Protocol):
    """What `log_failure` needs of a store (every interface in `store/base.py` has it)."""

    health: StoreHealth


class HealthyStore(HasHealth, Protocol):
    """What the store probe needs of a store (`Store` has it): its health, and the two ways to try
    it."""

    def assert_writable(self) -> None: ...

    def probe_write(self) -> None: ...


class StoreProbe(BackgroundWorker):
    """While writes fail, tries the store every `every` seconds (`Store.probe_write`), so that it is
    found writable again without waiting for traffic (a pod that is not ready gets none); while
    they succeed, checks now and then that the database file is still the one opened."""

    def __init__(self, store: HealthyStore, every: float = 5.0, check_every: float = 30.0) -> None:
        super().__init__("ragpulse-store-probe")
        self._store = store
        self._every = every
        self._check_every = check_every

    def _run(self) -> None:
        health = self._store.health
        checked = time.monotonic()
        while not self._stopping.wait(self._every):
            try:
                if health.writable:
                    if time.monotonic() - checked < self._check_every:
                        continue
                    checked = time.monotonic()
                    self._store.assert_writable()
                else:
                    self._store.probe_write()
            except Exception as exc:
                if health.writable:
                    health.failed(exc, "store probe")
                else:
                    health.still_failing(exc)
            else:
                health.succeeded()


def log_failure(
    logger: logging.Logger, store: HasHealth, component: str, message: str, *args: object
) -> None:
    """In an `except` block: a storage failure (no space, read-only, lost catalog) is counted in the
    store's health, which logs it once and a summary a minute; anything else is logged on `logger`
    with its traceback, as a bug should be."""
    exc = sys.exc_info()[1]
    if exc is not None and store.health.absorb(exc, component):
        return
    logger.exception(message, *args)
