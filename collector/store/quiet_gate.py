"""A gate that lets transactions run together, and one operation run with none open.

DuckDB frees the space of deleted rows only at a checkpoint that no transaction older than the
deletion overlaps (one might still read the rows); beside one, it folds the log in but keeps the
rows' blocks until a later such checkpoint, and the file grows meanwhile (measured with duckdb 1.5.5:
after deleting half a 480 MB table, a checkpoint beside a read begun before the deletion freed none
of its blocks; alone, 855 of 1,732). The store's cursors pass through `transaction()`; its retention
checkpoint runs in `alone()`."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class QuietGate:
    """Counts transactions in flight; `alone` waits (a while) for none, and holds new ones back
    while its body runs."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._open = 0
        self._closed = False

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction: waits while an `alone` body runs."""
        with self._changed:
            self._changed.wait_for(lambda: not self._closed)
            self._open += 1
        try:
            yield
        finally:
            with self._changed:
                self._open -= 1
                self._changed.notify_all()

    @contextlib.contextmanager
    def alone(self, timeout: float) -> Iterator[bool]:
        """Run the body with no transaction open, new ones waiting until it ends; yields True. When
        some are still open after `timeout` seconds, runs it beside them and yields False (one that
        waits on a lock the caller holds would otherwise wait for ever)."""
        with self._changed:
            quiet = self._changed.wait_for(lambda: self._open == 0, timeout)
            self._closed = quiet
        try:
            yield quiet
        finally:
            if quiet:
                with self._changed:
                    self._closed = False
                    self._changed.notify_all()
