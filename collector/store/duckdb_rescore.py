"""`ragpulse rescore`'s rows in a DuckDB database (both backends): its runs, the traces of its window
in cursor order, and one batch's scores put in place of those they replace.

A batch is written in one transaction: the rows of `scores` it replaces (same trace and score name,
ragpulse's own, trace-level) move to `score_history`, the new rows go in, the aggregate keys of the
old rows are counted again from `scores` (as a re-assembly does), and the run's cursor and counts
advance. So `scores` holds one current row per trace, span and name, every read of it counts the
latest, and a run killed between two batches goes on from the last one it stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from collector.schema.tables import RESCORE_RUNS, SCORES
from collector.store import duckdb_sessions as sessions
from collector.store.base import RescoreScope, RescoreScopeError, RescoreTotals
from collector.store.duckdb_rows import arrow_table, quoted, registered
from collector.store.reads.predicates import OUR_EVALUATORS

# What the runs listing shows of each run (`RESCORE_RUNS` but its cursor).
_RUN_COLUMNS = tuple(c for c in RESCORE_RUNS.column_names if not c.startswith("cursor_"))
# Runs that may be taken up again by a rerun of the same request.
UNFINISHED = ("running", "stopped", "failed")


def scope_where(scope: RescoreScope, dimensions: Sequence[str]) -> tuple[str, list[Any]]:
    """SQL (on `traces`) and its parameters: the traces of `scope` a rescore scores: those sampled for
    scoring (`judge` or `deterministic`), started in the window, not waiting for the judge (the
    judge stage scores those, with the current config)."""
    clauses = [
        "sample_decision IN ('judge', 'deterministic')",
        "judge_status IS DISTINCT FROM 'pending'",
        "start_time >= ?",
        "start_time < ?",
    ]
    params: list[Any] = [scope.start, scope.end]
    if scope.service is not None:
        clauses.append("service_name = ?")
        params.append(scope.service)
    if scope.slice is not None:
        name, value = scope.slice
        if name not in dimensions:
            known = ", ".join(dimensions) or "none is declared (monitoring.dimensions)"
            raise RescoreScopeError(f"slice: {name!r} is not a slice dimension; dimensions: {known}")
        clauses.append(f"{quoted([name])} = ?")
        params.append(value)
    return " AND ".join(clauses), params


def count_scope(
    con: duckdb.DuckDBPyConnection, scope: RescoreScope, dimensions: Sequence[str]
) -> RescoreTotals:
    """How many traces the scope holds, and how many of them the judge scored before."""
    where, params = scope_where(scope, dimensions)
    traces, judged = con.execute(
        f"SELECT count(*), count(*) FILTER (WHERE judge_status = 'done') FROM traces WHERE {where}", params
    ).fetchone() or (0, 0)
    return RescoreTotals(int(traces), int(judged))


def next_batch(
    con: duckdb.DuckDBPyConnection,
    scope: RescoreScope,
    dimensions: Sequence[str],
    after: tuple[datetime, str] | None,
    limit: int,
) -> pa.Table:
    """The scope's next `limit` traces after `after` (start time, trace id), in that order, with
    what scoring them again needs."""
    where, params = scope_where(scope, dimensions)
    if after is not None:
        where += " AND (start_time > ? OR (start_time = ? AND trace_id > ?))"
        params += [after[0], after[0], after[1]]
    return arrow_table(
        con.execute(
            "SELECT trace_id, start_time, assembly_count, judge_status, expected_answer, "
            "CAST(expected_documents AS VARCHAR) AS expected_documents "
            f"FROM traces WHERE {where} ORDER BY start_time, trace_id LIMIT ?",
            [*params, limit],
        )
    )


def judge_token_means(
    con: duckdb.DuckDBPyConnection, scope: RescoreScope, dimensions: Sequence[str], names: Sequence[str]
) -> dict[str, tuple[float, float]]:
    """Per judge score name: the mean input and output tokens of the judge calls that gave it in the
    scope (what the history cost), for a dry run's estimate."""
    if not names:
        return {}
    where, params = scope_where(scope, dimensions)
    rows = con.execute(
        "SELECT name, avg(judge_input_tokens), avg(judge_output_tokens) FROM scores "
        f"WHERE evaluator = 'judge' AND judge_model IS NOT NULL AND name IN (SELECT unnest(?)) "
        f"AND trace_id IN (SELECT trace_id FROM traces WHERE {where}) GROUP BY name",
        [list(names), *params],
    ).fetchall()
    return {name: (float(i or 0), float(o or 0)) for name, i, o in rows}


# ---------------------------------------------------------------- runs


def find_run(con: duckdb.DuckDBPyConnection, request: str) -> dict[str, Any] | None:
    """The latest unfinished run of this request (JSON as stored), to go on with."""
    rows = arrow_table(
        con.execute(
            f"SELECT * FROM rescore_runs WHERE status IN {UNFINISHED} AND request = ?::JSON "
            "ORDER BY started_at DESC LIMIT 1",
            [request],
        )
    )
    return rows.to_pylist()[0] if rows.num_rows else None


def read_runs(con: duckdb.DuckDBPyConnection, run_id: str | None, limit: int) -> list[dict[str, Any]]:
    """The latest runs (or the one named), newest first, without their cursors."""
    where, params = ("WHERE run_id = ?", [run_id]) if run_id is not None else ("", [])
    rows = arrow_table(
        con.execute(
            f"SELECT {', '.join(_RUN_COLUMNS)}, CAST(request AS VARCHAR) AS request FROM rescore_runs "
            f"{where} ORDER BY started_at DESC LIMIT ?",
            [*params, limit],
        )
    )
    return rows.to_pylist()


def open_run(con: duckdb.DuckDBPyConnection, run: pa.Table) -> None:
    """A new run's row (RESCORE_RUNS' schema)."""
    with registered(con, "_run", run):
        con.execute("INSERT INTO rescore_runs BY NAME SELECT * FROM _run")


def set_status(con: duckdb.DuckDBPyConnection, run_id: str, status: str, error: str | None) -> None:
    """The run `running` again (taken up), or ended: `done`, `stopped`, `failed` with `error`."""
    finished = "now()::TIMESTAMP" if status != "running" else "NULL"
    con.execute(
        f"UPDATE rescore_runs SET status = ?, error = ?, finished_at = {finished}, "
        "updated_at = now()::TIMESTAMP WHERE run_id = ?",
        [status, error, run_id],
    )


def claim(con: duckdb.DuckDBPyConnection, run_id: str, stale_before: datetime) -> bool:
    """Take up a run: `running` again unless another process runs it (`running`, with progress since
    `stale_before`). One of two processes claiming it at once changes the row; the other finds it
    running (on a lake, its conflicting update fails and is retried, and then finds it so)."""
    found = con.execute(
        "UPDATE rescore_runs SET status = 'running', error = NULL, finished_at = NULL, "
        "updated_at = now()::TIMESTAMP WHERE run_id = ? AND (status <> 'running' OR updated_at < ?)",
        [run_id, stale_before],
    ).fetchone()
    return bool(found and found[0])


def stop_orphans(con: duckdb.DuckDBPyConnection) -> int:
    """Runs left `running` by a process that ended without saying so (killed): `stopped`."""
    found = con.execute(
        "UPDATE rescore_runs SET status = 'stopped', finished_at = now()::TIMESTAMP, "
        "error = 'the process that ran it ended without stopping it (killed?); the same request goes on' "
        "WHERE status = 'running'"
    ).fetchone()
    return int(found[0]) if found else 0


# ---------------------------------------------------------------- a batch


def current_traces(
    con: duckdb.DuckDBPyConnection, revisions: pa.Table, dimensions: Sequence[str]
) -> pa.Table:
    """The traces of `revisions` (trace_id, revision, start_time) still at that assembly and not
    waiting for the judge (a trace assembled again meanwhile was scored afresh by its assembly), with
    what their score rows and sessions need: probe, the dimensions, session_id, service_name. The
    batch's start times bound the scan (one scan for all three, pruned by the row groups' min/max)."""
    first, last = pc.min(revisions["start_time"]).as_py(), pc.max(revisions["start_time"]).as_py()
    with registered(con, "_revisions", revisions.select(["trace_id", "revision"])):
        return arrow_table(
            con.execute(
                f"SELECT t.trace_id, {quoted(('probe', *dimensions), 't.')}, t.session_id, t.service_name "
                "FROM traces t JOIN _revisions r "
                "ON t.trace_id = r.trace_id AND t.assembly_count = r.revision "
                "WHERE t.start_time BETWEEN ? AND ? AND t.judge_status IS DISTINCT FROM 'pending'",
                [first, last],
            )
        )


def move_replaced(
    con: duckdb.DuckDBPyConnection, scores: pa.Table, run_id: str, aggregate_key: Sequence[str]
) -> tuple[int, pa.Table]:
    """Move the rows of `scores` that the new `scores` replace (same trace and name; ragpulse's own,
    trace-level) to `score_history`. Returns how many, and the aggregate keys they counted in."""
    if not scores.num_rows:
        return 0, pa.table({})
    pairs = pa.table({"trace_id": scores["trace_id"], "name": scores["name"]})
    # A replaced row has its trace's start minute as `bucket`, as its replacement has: the minutes of
    # the batch bound the scan (row groups outside them are skipped by their min/max), so a batch
    # costs the same on a store of ten thousand traces and of ten million.
    first, last = pc.min(scores["bucket"]).as_py(), pc.max(scores["bucket"]).as_py()
    # Read out (into Arrow, outside DuckDB's memory limit), then moved by row id.
    with registered(con, "_pairs", pairs):
        replaced = arrow_table(
            con.execute(
                "SELECT s.rowid AS replaced_rowid, s.* "
                "FROM scores s SEMI JOIN (SELECT DISTINCT trace_id, name FROM _pairs) p "
                "ON s.trace_id = p.trace_id AND s.name = p.name "
                f"WHERE s.bucket BETWEEN ? AND ? AND s.evaluator IN {OUR_EVALUATORS} AND s.level IS NULL",
                [first, last],
            )
        )
    with registered(con, "_replaced", replaced):
        affected = arrow_table(con.execute(f"SELECT DISTINCT {quoted(aggregate_key)} FROM _replaced"))
        columns = ", ".join(SCORES.column_names)
        moved = con.execute(
            f"INSERT INTO score_history BY NAME SELECT {columns}, now()::TIMESTAMP AS replaced_at, "
            "? AS replaced_by FROM _replaced",
            [run_id],
        ).fetchone()
        con.execute("DELETE FROM scores WHERE rowid IN (SELECT replaced_rowid FROM _replaced)")
    return int(moved[0]) if moved else 0, affected


def mark_judged(con: duckdb.DuckDBPyConnection, scores: pa.Table) -> None:
    """The traces the judge scored in this batch count as judged (`judge_status = 'done'`), so a
    later rescore's default (the traces the judge scored before) takes them too."""
    judged = pc.unique(scores.filter(pc.equal(scores["evaluator"], "judge"))["trace_id"])
    if not len(judged):
        return
    with registered(con, "_judged", pa.table({"trace_id": judged})):
        con.execute(
            "UPDATE traces SET judge_status = 'done', scored_at = now()::TIMESTAMP "
            "WHERE trace_id IN (SELECT trace_id FROM _judged) AND judge_status IS DISTINCT FROM 'done'"
        )


def advance(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    cursor: tuple[datetime, str],
    progress: dict[str, int],
) -> None:
    """The run's cursor at `cursor`, its counts increased by `progress` (column -> amount)."""
    added = ", ".join(f"{column} = {column} + ?" for column in progress)
    con.execute(
        f"UPDATE rescore_runs SET cursor_start = ?, cursor_trace = ?, {added}, "
        "updated_at = now()::TIMESTAMP WHERE run_id = ?",
        [cursor[0], cursor[1], *progress.values(), run_id],
    )


def sessions_to_score_again(con: duckdb.DuckDBPyConnection, current: pa.Table) -> set[sessions.SessionKey]:
    """The sessions of these rescored turns (`current_traces` rows): their rollups are computed again,
    and their session-level scores given again (from the new scores) once they have ended."""
    touched = sessions.keys_of_rows(current)
    sessions.forget_scored(con, touched)
    return touched
