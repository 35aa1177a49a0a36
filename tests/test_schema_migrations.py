"""Schema migrations on a real DuckDB file: a database written by an earlier version opens, gains
what the new version needs, and keeps its rows."""

from __future__ import annotations

from pathlib import Path

import duckdb

from collector.store.duckdb_store import Store, schema_version
from collector.store.schema import LATEST_VERSION, MIGRATIONS
from collector.store.trace_store import TraceStore


def version_2_file(path: Path) -> None:
    """A file as ragpulse left it before migration 3: one assembled trace with a log event."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE ragpulse_schema (version INTEGER, description VARCHAR, applied_at TIMESTAMP)")
    for version, description, sql in MIGRATIONS[:2]:
        con.execute(sql)
        con.execute("INSERT INTO ragpulse_schema VALUES (?, ?, now()::TIMESTAMP)", [version, description])
    con.execute(
        "INSERT INTO spans (trace_id, span_id, name, received_at) "
        "VALUES ('t1', 's1', 'root', TIMESTAMP '2026-12-01 10:00:00')"
    )
    con.execute(
        "INSERT INTO span_events (trace_id, span_id, time, name, source) "
        "VALUES ('t1', 's1', TIMESTAMP '2026-12-01 10:00:05', 'gen_ai.choice', 'log')"
    )
    con.execute(
        "INSERT INTO traces (trace_id, assembly_count, last_received_at) "
        "VALUES ('t1', 1, TIMESTAMP '2026-12-01 10:00:00')"
    )
    con.close()


def test_a_version_2_file_gains_event_receive_times_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    version_2_file(path)
    store = Store(path)
    try:
        con = store.read_cursor()
        assert schema_version(con) == LATEST_VERSION >= 3
        assert con.execute("SELECT name, source, received_at FROM span_events").fetchall() == [
            ("gen_ai.choice", "log", None)
        ]
        # An event stored before its receive time was kept tells the recovery nothing: the
        # assembled trace is not assembled again on every start.
        traces = TraceStore(store)
        assert traces.pending_trace_ids() == []
        traces.close()
        con.close()
    finally:
        store.close()
