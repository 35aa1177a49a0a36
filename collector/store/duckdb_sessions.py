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
from collections.abc import Iterable
from datetime import datetime, timedelta

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from collector.store.duckdb_rows import registered
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

    def __len__(self) -> int:
        with self._lock:
            return len(self._keys)


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


def refresh(con: duckdb.DuckDBPyConnection, keys: Iterable[SessionKey]) -> None:
    """Compute these sessions' rows again (inside the caller's transaction)."""
    pairs = list(keys)
    sessions, services = [k[0] for k in pairs], [k[1] for k in pairs]
    table = pa.table([pa.array(sessions, pa.string()), pa.array(services, pa.string())], schema=_KEYS_SCHEMA)
    with registered(con, _KEYS, table):
        con.execute(refresh_session_rollups_sql(f"SELECT session_id, service_name FROM {_KEYS}"))
