"""Probe runs read back: the list of runs, and one run's report (its counts, then each case with its
HTTP result, whether its trace arrived, and its scores).

Everything goes through a `Query` (SQL string -> rows), so `ragpulse probes` reads a database file or
a running server alike (like `ragpulse check`), and the dashboard's `/api/probes` shows the same.
"""

from __future__ import annotations

from typing import Any

from collector.store.reads import Query
from collector.store.reads.probes import run_sql, runs_sql, scores_sql, traces_sql

# Said where no probe has run yet: where probes come from.
SET_UP = "probes are set up under probes: (docs/probes.md)"
LATEST = "latest"


class UnknownRun(LookupError):
    """No probe run has this id (or, for `latest`, no run of the probe yet)."""


def list_runs(query: Query, probe: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
    """The newest `limit` runs (of `probe`, or of every probe)."""
    return query(runs_sql(probe, limit))


def probe_report(query: Query, run_id: str = LATEST, probe: str | None = None) -> dict[str, Any]:
    """One run (`latest`: the newest, of `probe` when given) and, per case, its result joined with
    its app trace and that trace's scores by name. `UnknownRun` when there is no such run."""
    found = query(run_sql(None if run_id == LATEST else run_id, probe))
    if not found:
        if run_id == LATEST:
            raise UnknownRun("no probe run yet" + (f" of probe {probe!r}" if probe else f"; {SET_UP}"))
        raise UnknownRun(f"no probe run {run_id!r}" + (f" of probe {probe!r}" if probe else ""))
    run = found[0]
    results: list[dict[str, Any]] = run.pop("results", None) or []
    app_ids = sorted({str(r["app_trace_id"]) for r in results if r.get("app_trace_id")})
    traces = {row["trace_id"]: row for row in query(traces_sql(app_ids))} if app_ids else {}
    scores: dict[str, dict[str, dict[str, Any]]] = {}
    for row in query(scores_sql(app_ids)) if app_ids else []:
        # One entry per score name (a trace's first span scored under that name).
        scores.setdefault(row.pop("trace_id"), {}).setdefault(row.pop("name"), row)
    cases = []
    for result in results:
        app = str(result.get("app_trace_id"))
        cases.append({**result, "trace": traces.get(app), "scores": scores.get(app, {})})
    return {"run": run, "cases": cases}
