"""Probes' reads: the golden cases to send, the traces a run's requests made and their scores
(`probes/runner.py`), and the runs read back (`probes/report.py`: `ragpulse probes`, the
dashboard's `/api/probes`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from collector.store.reads.predicates import sql_string, sql_strings, timestamp_sql

# The columns of a run in the list (its per-case `results` only in the report).
RUN_COLUMNS = (
    "run_id, probe, started_at, finished_at, status, cases, answered, errors, traces_received, "
    "missing_traces, error, summary"
)


def cases_sql(limit: int) -> str:
    """The stored golden cases a probe sends when it names no cases file, by id."""
    return f"SELECT case_id, question FROM cases ORDER BY case_id LIMIT {int(limit)}"


# What the runner needs to know of a trace: is it there, complete, sampled and scored.
_TRACE_COLUMNS = (
    "t.trace_id, t.case_id, t.start_time, t.span_count, t.sample_decision, t.judge_status, "
    "(SELECT count(*) FROM scores s WHERE s.trace_id = t.trace_id) AS n_scores"
)


def sent_traces_sql(trace_ids: Sequence[str]) -> str:
    """ragpulse's own traces of a run's requests (the client spans it made), by id."""
    return f"SELECT {_TRACE_COLUMNS} FROM traces t WHERE t.trace_id IN ({sql_strings(trace_ids)})"


def case_traces_sql(case_ids: Sequence[str], since: datetime) -> str:
    """The app's traces matched to these cases by question, started at or after `since`."""
    return (
        f"SELECT {_TRACE_COLUMNS} FROM traces t WHERE t.case_match = 'question' "
        f"AND t.case_id IN ({sql_strings(case_ids)}) AND t.start_time >= {timestamp_sql(since)} "
        "ORDER BY t.start_time"
    )


def trace_scores_sql(trace_ids: Sequence[str]) -> str:
    """Every score of these traces: name, value, status."""
    return f"SELECT name, value, status FROM scores WHERE trace_id IN ({sql_strings(trace_ids)})"


def _probe_filter(probe: str | None) -> str:
    return "" if probe is None else f"WHERE probe = {sql_string(probe)}"


def runs_sql(probe: str | None, limit: int) -> str:
    """Recent runs, newest first."""
    return (
        f"SELECT {RUN_COLUMNS} FROM probe_runs {_probe_filter(probe)} "
        f"ORDER BY started_at DESC, run_id LIMIT {int(limit)}"
    )


def run_sql(run_id: str | None, probe: str | None) -> str:
    """One run, with its results: by id, or the newest (of `probe`) when `run_id` is None."""
    if run_id is None:
        return f"SELECT * FROM probe_runs {_probe_filter(probe)} ORDER BY started_at DESC, run_id LIMIT 1"
    where = f"run_id = {sql_string(run_id)}"
    if probe is not None:
        where += f" AND probe = {sql_string(probe)}"
    return f"SELECT * FROM probe_runs WHERE {where}"


def traces_sql(trace_ids: Sequence[str]) -> str:
    """What a run's report shows of the app traces its cases made."""
    return (
        "SELECT trace_id, service_name, span_count, status, answer, case_id, case_match, sample_decision, "
        f"judge_status FROM traces WHERE trace_id IN ({sql_strings(trace_ids)})"
    )


def scores_sql(trace_ids: Sequence[str]) -> str:
    """The scores of those traces, by trace and name."""
    return (
        "SELECT trace_id, name, value, status, label, evaluator FROM scores "
        f"WHERE trace_id IN ({sql_strings(trace_ids)}) ORDER BY trace_id, name, span_id"
    )
