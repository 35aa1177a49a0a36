"""Re-scoring over HTTP (docs/rescore.md):

- `POST /api/rescore` (the `admin` scope): the body is a rescore request (`since`, `until`,
  `service`, `slice`, `evaluators`, `judge_rate`, `dry_run`, as `ragpulse rescore` takes them). A dry
  run answers its estimate; otherwise the run starts (or the unfinished run of the same request is
  taken up) inside the service, and the answer is its progress. 400 for a bad request, 409 while
  another run is in progress, 404 when the service does not score (`scoring.enabled: false`).
- `GET /api/rescore`: the latest runs, newest first, the live one with its progress.
- `GET /api/rescore/{run_id}`: one run.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from collector.api import OrjsonResponse
from collector.rescore.jobs import RescoreJobs
from collector.rescore.request import RescoreRequest
from collector.rescore.runner import RescoreBusy, RescoreError

# What a run's row says; the live run adds its progress (`waiting`, `resumed`).
_RUNS_LISTED = 20


class RescoreApi:
    """The routes of re-scoring, over the service's `RescoreJobs` (None: the service does not score)."""

    def __init__(self, jobs: RescoreJobs | None) -> None:
        self._jobs = jobs

    def routes(self) -> list[Route]:
        return [
            Route("/api/rescore", self.start, methods=["POST"]),
            Route("/api/rescore", self.runs, methods=["GET"]),
            Route("/api/rescore/{run_id}", self.run, methods=["GET"]),
        ]

    async def start(self, request: Request) -> Response:
        """Start a run, or answer a dry run's estimate; see the module docstring."""
        if self._jobs is None:
            return _error("this service does not score (scoring.enabled is false)", 404)
        try:
            body = orjson.loads(await request.body() or b"{}")
            asked = RescoreRequest.model_validate(body)
        except orjson.JSONDecodeError:
            return _error('the body must be JSON: {"since": "7d", "evaluators": ["faithfulness"], ...}', 400)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"]) or "body"
            return _error(f"{where}: {problem['msg']}", 400)
        try:
            if asked.dry_run:
                estimate = await run_in_threadpool(self._jobs.rescorer.estimate, asked)
                return OrjsonResponse(estimate.as_dict())
            return OrjsonResponse(await run_in_threadpool(self._jobs.run, asked))
        except RescoreBusy as exc:
            return _error(str(exc), 409)
        except (RescoreError, ValueError) as exc:
            return _error(str(exc), 400)

    async def runs(self, request: Request) -> Response:
        """The latest runs, newest first."""
        if self._jobs is None:
            return OrjsonResponse({"runs": []})
        rows = await run_in_threadpool(self._jobs.rescorer.store.rescore_runs, None, _RUNS_LISTED)
        return OrjsonResponse({"runs": [self._with_live(row) for row in rows]})

    async def run(self, request: Request) -> Response:
        """One run, as stored, with its live progress when it is this service's current run."""
        run_id = request.path_params["run_id"]
        rows = (
            []
            if self._jobs is None
            else await run_in_threadpool(self._jobs.rescorer.store.rescore_runs, run_id, 1)
        )
        if not rows:
            return _error(f"no rescore run {run_id}", 404)
        return OrjsonResponse(self._with_live(rows[0]))

    def _with_live(self, row: dict[str, Any]) -> dict[str, Any]:
        """A stored run row (its request parsed), updated from the live progress when it is that run:
        the stored counts lag by at most one batch."""
        row = {**row, "request": orjson.loads(row["request"]) if row.get("request") else None}
        live = self._jobs.live() if self._jobs is not None else None
        if live is not None and live["run_id"] == row["run_id"]:
            row.update({k: v for k, v in live.items() if k != "evaluators"})
        row.setdefault("waiting", None)
        row.setdefault("resumed", False)
        return row


def _error(message: str, status: int) -> Response:
    return OrjsonResponse({"error": message}, status_code=status)
