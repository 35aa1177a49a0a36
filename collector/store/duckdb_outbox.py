"""The evaluation outbox in a DuckDB database (both backends): the write-back events waiting for
OTLP export. Each replica exports the events of the traces it assembled (`replica`, null for the
embedded store)."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import pyarrow as pa

from collector.store.duckdb_rows import arrow_table, registered

_OWN_OUTBOX = "evaluation_outbox WHERE replica IS NOT DISTINCT FROM ?"


def read_outbox(con: duckdb.DuckDBPyConnection, replica: str | None, limit: int) -> pa.Table:
    """The replica's oldest `limit` events."""
    return arrow_table(
        con.execute(
            f"SELECT * EXCLUDE (replica) FROM {_OWN_OUTBOX} ORDER BY created_at, event_id LIMIT ?",
            [replica, limit],
        )
    )


def delete_outbox(con: duckdb.DuckDBPyConnection, event_ids: Sequence[str]) -> None:
    """Delete events the downstream acknowledged."""
    ids = pa.table({"event_id": pa.array(list(event_ids), pa.string())})
    with registered(con, "_sent", ids):
        con.execute("DELETE FROM evaluation_outbox WHERE event_id IN (SELECT event_id FROM _sent)")


def trim_outbox(con: duckdb.DuckDBPyConnection, replica: str | None, max_events: int) -> int:
    """Delete the replica's oldest events beyond `max_events`; returns how many."""
    excess = outbox_depth(con, replica) - max_events
    if excess <= 0:
        return 0
    con.execute(
        "DELETE FROM evaluation_outbox WHERE event_id IN (SELECT event_id FROM "
        f"{_OWN_OUTBOX} ORDER BY created_at, event_id LIMIT ?)",
        [replica, excess],
    )
    return excess


def outbox_depth(con: duckdb.DuckDBPyConnection, replica: str | None) -> int:
    """The replica's events waiting for export."""
    row = con.execute(f"SELECT count(*) FROM {_OWN_OUTBOX}", [replica]).fetchone()
    return int(row[0]) if row else 0
