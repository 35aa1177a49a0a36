"""Rescore runs inside `ragpulse serve` (`POST /api/rescore`): one run at a time, on a thread of its
own, beside ingest, assembly and the judge stage; its progress read by `GET /api/rescore`. At stop,
the run is asked to stop after the batch it is scoring is abandoned: what it stored stays, and the
same request, made again, goes on from there."""

from __future__ import annotations

import logging
import threading
from typing import Any

from collector.lifecycle import Component, remaining
from collector.rescore.request import RescoreRequest
from collector.rescore.runner import Progress, RescoreBusy, Rescorer

log = logging.getLogger(__name__)


class RescoreJobs(Component):
    """Starts and watches the server's rescore runs."""

    name = "rescore"

    def __init__(self, rescorer: Rescorer) -> None:
        self.rescorer = rescorer
        self._lock = threading.Lock()
        self._live: Progress | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Nothing runs until asked for. A run left `running` by a killed process is `stopped` now (on
        a file this service holds no one else runs one; on a lake another replica may)."""
        store = self.rescorer.store
        if not store.shared and store.stop_orphaned_rescore_runs():
            log.info("rescore runs left running by a process that ended are marked stopped")

    def stop(self, deadline: float | None = None) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(remaining(deadline, 10.0))

    def run(self, request: RescoreRequest) -> dict[str, Any]:
        """Start `request` (or take up its unfinished run) on a thread; its progress now. RescoreBusy
        while another run is in progress; RescoreError for a request that cannot run."""
        with self._lock:
            if self._live is not None and self._live.status == "running":
                raise RescoreBusy(f"rescore run {self._live.run_id} is in progress; wait for it to end")
            if self._stop.is_set():
                raise RescoreBusy("the service is stopping")
            started = self.rescorer.start(request, "server")
            self._live = started[1]
            self._thread = threading.Thread(
                target=self._run, args=(request, started), name="ragpulse-rescore", daemon=True
            )
            self._thread.start()
            return self._live.as_dict()

    def _run(self, request: RescoreRequest, started: Any) -> None:
        try:
            self.rescorer.run(request, "server", self._on_progress, self._stop, started)
        except Exception:
            log.exception("rescore run %s failed", started[1].run_id)

    def _on_progress(self, progress: Progress) -> None:
        with self._lock:
            self._live = progress

    def live(self) -> dict[str, Any] | None:
        """The run this server runs now (or ran last), as it goes."""
        with self._lock:
            return None if self._live is None else self._live.as_dict()

    def health(self) -> dict[str, object] | None:
        live = self.live()
        if live is None:
            return None
        return {key: live[key] for key in ("run_id", "status", "traces_done", "traces_total")}
