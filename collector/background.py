"""The one shape of ragpulse's background components: a loop on a daemon thread of its own,
started with `start()`, asked to end with `stop()`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from collector.lifecycle import Component, remaining


class BackgroundWorker(Component):
    """Runs `_run` on a daemon thread named `name`; `_run` loops until `_stopping` is set, and waits
    on it (`self._stopping.wait(seconds)`) so that `stop` ends a wait at once. A component that
    does one round every so many seconds writes `_run` as one call of `_run_every`."""

    def __init__(self, name: str) -> None:
        self.name = name.removeprefix("ragpulse-")
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, deadline: float | None = None) -> None:
        """Stop after the round in progress (waiting for it 15 s at most, and not past `deadline`)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(remaining(deadline, 15.0))

    def _run(self) -> None:
        raise NotImplementedError

    def _run_every(
        self,
        seconds: float,
        one_round: Callable[[], object],
        log: logging.Logger,
        failed: str,
        on_error: Callable[[], object] | None = None,
        absorb: Callable[[BaseException], bool] | None = None,
    ) -> None:
        """The loop of a periodic component: `one_round` now, then every `seconds` until stopped. A
        round that raises is logged on `log` as `failed` (with the traceback) and counted with
        `on_error`, unless `absorb` takes the error (a storage failure, counted in the store's
        health instead of a traceback a round); the next round runs as planned."""
        while not self._stopping.is_set():
            try:
                one_round()
            except Exception as exc:
                if on_error is not None:
                    on_error()
                if absorb is None or not absorb(exc):
                    log.exception(failed)
            self._stopping.wait(seconds)
