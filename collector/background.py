"""The one shape of ragpulse's background components: a loop on a daemon thread of its own,
started with `start()`, asked to end with `stop()`."""

from __future__ import annotations

import threading


class BackgroundWorker:
    """Runs `_run` on a daemon thread named `name`; `_run` loops until `_stopping` is set, and waits
    on it (`self._stopping.wait(seconds)`) so that `stop` ends a wait at once."""

    def __init__(self, name: str) -> None:
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop after the round in progress (waiting at most `timeout` seconds for it)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        raise NotImplementedError
