"""The sessions' rollups (`session_rollups`, read through the `sessions` view): the sessions a
committed write touched, remembered until the sessions refresher computes their rows again.

A write notes the sessions of the turns it stored, re-assembled, scored or deleted (`keys_of_rows`
for rows it holds, `keys_of_traces` for trace ids, read inside its transaction); `TouchedSessions`
keeps them once the transaction committed; `refresh` replaces their rows in one transaction. A
process that stops without its last refresh leaves some rows behind: at start, the refresher also
computes again the sessions whose turns were assembled or scored since the last refresh it finds
(`keys_touched_since`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from collector.store.duckdb_rows import arrow_table, quoted, registered
from collector.store.reads.predicates import OUR_EVALUATORS
from collector.store.schema_sql import refresh_session_rollups_sql

SessionKey = tuple[str, str]  # (session_id, service_name)

_KEYS = "_session_keys"
_KEYS_SCHEMA = pa.schema([("session_id", pa.string()), ("service_name", pa.string())])


class TouchedSessions:
    """The sessions whose rollups are out of date: noted by committed writes, taken by a refresh."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: set[SessionKey] = set()

    def add(self, keys: Iterable[SessionKey]) -> None:
        with self._lock:
            self._keys.update(keys)

    def take(self) -> set[SessionKey]:
        """Every session noted so far; they are forgotten here (`add` them again if the refresh fails)."""
        with self._lock:
            keys, self._keys = self._keys, set()
        return keys


def keys_of_rows(traces: pa.Table | None) -> set[SessionKey]:
    """The sessions of these `traces` rows: the app's own turns (no probe) with a session id."""
    if traces is None or not traces.num_rows or "session_id" not in traces.column_names:
        return set()
    mask = pc.is_valid(traces["session_id"])
    if "probe" in traces.column_names:
        mask = pc.and_(mask, pc.is_null(traces["probe"]))
    rows = traces.filter(mask)
    return set(zip(rows["session_id"].to_pylist(), rows["service_name"].to_pylist(), strict=True))


def keys_of_traces(con: duckdb.DuckDBPyConnection, ids: str) -> set[SessionKey]:
    """The sessions of the stored turns whose trace ids the registered table `ids` holds."""
    rows = con.execute(
        "SELECT DISTINCT session_id, service_name FROM traces "
        f"WHERE trace_id IN (SELECT trace_id FROM {ids}) AND session_id IS NOT NULL AND probe IS NULL"
    ).fetchall()
    return {(session_id, service) for session_id, service in rows}


def keys_touched_since(con: duckdb.DuckDBPyConnection, since: datetime) -> set[SessionKey]:
    """The sessions with a turn assembled or scored at or after `since`."""
    rows = con.execute(
        "SELECT DISTINCT session_id, service_name FROM traces "
        "WHERE session_id IS NOT NULL AND probe IS NULL AND (assembled_at >= ? OR scored_at >= ?)",
        [since, since],
    ).fetchall()
    return {(session_id, service) for session_id, service in rows}


def last_refresh(con: duckdb.DuckDBPyConnection) -> datetime | None:
    """When the rollups were last computed (by any process), or None when there are none."""
    row = con.execute("SELECT max(refreshed_at) FROM session_rollups").fetchone()
    return row[0] if row else None


def refresh_round(con: duckdb.DuckDBPyConnection, keys: Iterable[SessionKey], catch_up: float | None) -> int:
    """One round of the sessions refresher (inside the caller's transaction): these sessions, and
    with `catch_up` (seconds) those with a turn assembled or scored since that long before the last
    recorded round, computed again. Returns how many."""
    todo = set(keys)
    if catch_up is not None:
        last = last_refresh(con)
        if last is not None:
            todo |= keys_touched_since(con, last - timedelta(seconds=catch_up))
    if todo:
        refresh(con, todo)
    return len(todo)


def take_turn(con: duckdb.DuckDBPyConnection) -> None:
    """Replace the marker row of `session_rollups` (all keys null; the view leaves it out), inside
    the caller's transaction. Every transaction that writes session rows or session scores does, so
    that two of them at once (replicas of a lake) conflict and the later is retried on a snapshot
    with the other's writes: DuckLake sees no conflict between two DELETEs that removed nothing and
    their INSERTs, which left a new session with two rows, each missing the other's turn."""
    con.execute("DELETE FROM session_rollups WHERE session_id IS NULL")
    con.execute("INSERT INTO session_rollups (refreshed_at) VALUES (now()::TIMESTAMP)")


def refresh(con: duckdb.DuckDBPyConnection, keys: Iterable[SessionKey]) -> None:
    """Compute these sessions' rows again (inside the caller's transaction)."""
    take_turn(con)
    with registered(con, _KEYS, _keys_table(keys)):
        con.execute(refresh_session_rollups_sql(f"SELECT session_id, service_name FROM {_KEYS}"))


# ------------------------------------------------------------------ session-level scores


def sessions_to_score(con: duckdb.DuckDBPyConnection, idle_timeout: float, limit: int) -> list[SessionKey]:
    """Sessions that ended (no turn for `idle_timeout` seconds), none of whose turns waits for the
    judge, and that were not scored since their last activity with as many turns (a later or
    delayed turn, or a late span that changed a turn, makes them due again; retention deleting
    turns does not: the aggregates keep what was counted), the longest ended first."""
    idle = f"to_microseconds({round(idle_timeout * 1_000_000)})"
    rows = con.execute(
        "SELECT r.session_id, r.service_name FROM session_rollups r "
        f"WHERE r.session_id IS NOT NULL AND r.last_activity < now()::TIMESTAMP - {idle} "
        "AND NOT EXISTS (SELECT 1 FROM scored_sessions s "
        "WHERE s.session_id = r.session_id AND s.service_name = r.service_name "
        "AND s.last_activity >= r.last_activity AND s.turns >= r.turns) "
        "AND NOT EXISTS (SELECT 1 FROM traces t WHERE t.judge_status = 'pending' AND t.probe IS NULL "
        "AND t.session_id = r.session_id AND t.service_name = r.service_name) "
        "ORDER BY r.last_activity, r.session_id, r.service_name LIMIT ?",
        [limit],
    ).fetchall()
    return [(session_id, service) for session_id, service in rows]


def session_turns(con: duckdb.DuckDBPyConnection, keys: Iterable[SessionKey]) -> list[dict[str, Any]]:
    """The turns of these sessions in order, each with the names of its failing scores of
    ragpulse's evaluators (not the session-level ones)."""
    with registered(con, _KEYS, _keys_table(keys)):
        return arrow_table(
            con.execute(
                "SELECT t.session_id, t.service_name, t.trace_id, t.root_span_id, t.start_time, t.end_time, "
                "t.question, t.answer, coalesce(t.assembly_count, 1) AS revision, "
                "coalesce((SELECT list(DISTINCT s.name ORDER BY s.name) FROM scores s "
                "WHERE s.trace_id = t.trace_id AND s.status = 'fail' "
                f"AND s.evaluator IN {OUR_EVALUATORS} AND s.level IS NULL), []) AS failing "
                "FROM traces t WHERE (t.session_id, t.service_name) IN "
                f"(SELECT session_id, service_name FROM {_KEYS}) AND t.probe IS NULL "
                "ORDER BY t.session_id, t.service_name, t.start_time, t.trace_id"
            )
        ).to_pylist()


def replaced_session_scores(
    con: duckdb.DuckDBPyConnection, keys: Iterable[SessionKey], aggregate_key: Sequence[str]
) -> pa.Table:
    """Delete the session-level scores these sessions had (on any of their turns), and the record
    of their scoring; returns the aggregate keys those scores counted in, to be recomputed."""
    with registered(con, _KEYS, _keys_table(keys)):
        of_sessions = (
            "level = 'session' AND trace_id IN (SELECT trace_id FROM traces WHERE (session_id, service_name) "
            f"IN (SELECT session_id, service_name FROM {_KEYS}))"
        )
        affected = arrow_table(
            con.execute(f"SELECT DISTINCT {quoted(aggregate_key)} FROM scores WHERE {of_sessions}")
        )
        con.execute(f"DELETE FROM scores WHERE {of_sessions}")
        con.execute(
            "DELETE FROM scored_sessions WHERE (session_id, service_name) IN "
            f"(SELECT session_id, service_name FROM {_KEYS})"
        )
    return affected


def unchanged(con: duckdb.DuckDBPyConnection, checks: pa.Table) -> pa.Table:
    """Of the sessions as they were read to be scored (`checks`: `session_id, service_name, turns,
    last_activity, revisions` (their turns' assembly counts summed), `last_trace_id`), those whose
    turns are still the same (`session_id, service_name, last_trace_id, last_activity, turns`): a
    turn that came, went or was assembled again since makes the scores read from them stale."""
    with registered(con, "_checks", checks):
        return arrow_table(
            con.execute(
                "WITH now_stored AS (SELECT session_id, service_name, count(*) AS turns, "
                "max(coalesce(end_time, start_time)) AS last_activity, "
                "sum(coalesce(assembly_count, 1)) AS revisions, "
                "last(trace_id ORDER BY start_time, trace_id) AS last_trace_id "
                "FROM traces WHERE probe IS NULL AND (session_id, service_name) IN "
                "(SELECT session_id, service_name FROM _checks) GROUP BY ALL) "
                "SELECT c.session_id, c.service_name, c.last_trace_id, c.last_activity, c.turns "
                "FROM _checks c JOIN now_stored n USING (session_id, service_name) "
                "WHERE n.turns = c.turns AND n.last_activity = c.last_activity "
                "AND n.revisions = c.revisions AND n.last_trace_id = c.last_trace_id"
            )
        )


def replace_session_scores(
    con: duckdb.DuckDBPyConnection,
    keys: Iterable[SessionKey],
    checks: pa.Table,
    scores: pa.Table,
    aggregate_key: Sequence[str],
) -> tuple[pa.Table, pa.Table | None, pa.Table]:
    """The first part of writing session-level scores (`Store.write_session_scores`), inside its
    transaction: the sessions still as read (`unchanged`), their scores of `scores` to insert (None:
    none is), and the aggregate keys their earlier session scores, deleted here, counted in. The
    sessions asked for that had no turn left lose their `sessions` row."""
    take_turn(con)
    scored = unchanged(con, checks)
    found = set(zip(checks["session_id"].to_pylist(), checks["service_name"].to_pylist(), strict=True))
    gone = set(keys) - found
    if gone:  # retention took every turn: the row goes, nothing is scored
        refresh(con, gone)
    if not scored.num_rows:
        return scored, None, pa.table({})
    current = zip(scored["session_id"].to_pylist(), scored["service_name"].to_pylist(), strict=True)
    affected = replaced_session_scores(con, list(current), aggregate_key)
    kept = scores.filter(pc.is_in(scores["trace_id"], value_set=scored["last_trace_id"].combine_chunks()))
    return scored, kept, affected


def record_scored(con: duckdb.DuckDBPyConnection, scored: pa.Table) -> None:
    """The sessions just scored (`unchanged`'s rows)."""
    with registered(con, "_scored", scored):
        con.execute(
            "INSERT INTO scored_sessions BY NAME SELECT session_id, service_name, last_activity, turns, "
            "now()::TIMESTAMP AS scored_at FROM _scored"
        )


def forget_scored(con: duckdb.DuckDBPyConnection, keys: Iterable[SessionKey]) -> None:
    """These sessions are to be scored again when they end (a turn of theirs was replaced)."""
    with registered(con, _KEYS, _keys_table(keys)):
        con.execute(
            "DELETE FROM scored_sessions WHERE (session_id, service_name) IN "
            f"(SELECT session_id, service_name FROM {_KEYS})"
        )


def _keys_table(keys: Iterable[SessionKey]) -> pa.Table:
    pairs = list(keys)
    return pa.table(
        [pa.array([k[0] for k in pairs], pa.string()), pa.array([k[1] for k in pairs], pa.string())],
        schema=_KEYS_SCHEMA,
    )
