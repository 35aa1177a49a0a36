"""Probe runs read back: the list of runs, and one run's report (its counts, then each case with its
HTTP result, whether its trace arrived, and its scores).

Everything goes through a `Query` (SQL string -> rows), so `ragpulse probes` reads a database file or
a running server alike (like `ragpulse check`), and the dashboard's `/api/probes` shows the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from collector.monitoring.gates import Query
from collector.monitoring.windows import sql_string

LATEST = "latest"
# The columns of a run in the list (its per-case `results` only in the report).
RUN_COLUMNS = (
    "run_id, probe, started_at, finished_at, status, cases, answered, errors, traces_received, "
    "missing_traces, error, summary"
)


class UnknownRun(LookupError):
    """No probe run has this id (or, for `latest`, no run of the probe yet)."""


def _probe_filter(probe: str | None) -> str:
    return "" if probe is None else f"WHERE probe = {sql_string(probe)}"


def runs_sql(probe: str | None, limit: int) -> str:
    """Recent runs, newest first."""
    return (
        f"SELECT {RUN_COLUMNS} FROM probe_runs {_probe_filter(probe)} "
        f"ORDER BY started_at DESC, run_id LIMIT {int(limit)}"
    )


def run_sql(run_id: str, probe: str | None) -> str:
    """One run, with its results: by id, or the newest (of `probe`) for `latest`."""
    if run_id == LATEST:
        return f"SELECT * FROM probe_runs {_probe_filter(probe)} ORDER BY started_at DESC, run_id LIMIT 1"
    where = f"run_id = {sql_string(run_id)}"
    if probe is not None:
        where += f" AND probe = {sql_string(probe)}"
    return f"SELECT * FROM probe_runs WHERE {where}"


def _in(ids: Iterable[str]) -> str:
    return ", ".join(sql_string(i) for i in ids) or "NULL"


def traces_sql(trace_ids: Iterable[str]) -> str:
    return (
        "SELECT trace_id, service_name, span_count, status, answer, case_id, case_match, sample_decision, "
        f"judge_status FROM traces WHERE trace_id IN ({_in(trace_ids)})"
    )


def scores_sql(trace_ids: Iterable[str]) -> str:
    return (
        "SELECT trace_id, name, value, status, label, evaluator FROM scores "
        f"WHERE trace_id IN ({_in(trace_ids)}) ORDER BY trace_id, name, span_id"
    )


def list_runs(query: Query, probe: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
    """The newest `limit` runs (of `probe`, or of every probe)."""
    return query(runs_sql(probe, limit))


def probe_report(query: Query, run_id: str = LATEST, probe: str | None = None) -> dict[str, Any]:
    """One run (`latest`: the newest, of `probe` when given) and, per case, its result joined with
    its app trace and that trace's scores by name. `UnknownRun` when there is no such run."""
    found = query(run_sql(run_id, probe))
    if not found:
        if run_id == LATEST:
            raise UnknownRun("no probe run yet" + (f" of probe {probe!r}" if probe else ""))
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
