"""Monitoring's rows in a DuckDB database (both backends): alert states with their events and
notifications, the notifications' delivery, and probe runs."""

from __future__ import annotations

from datetime import datetime

import duckdb
import pyarrow as pa

from collector.store.duckdb_rows import arrow_table, insert_rows, registered


def write_alerts(
    con: duckdb.DuckDBPyConnection, states: pa.Table, events: pa.Table, notifications: pa.Table
) -> None:
    """Replace the `alerts` rows of these (alert, service, slice) states and add the events and
    their notifications (inside the caller's transaction)."""
    if states.num_rows:
        with registered(con, "_states", states):
            con.execute(
                "DELETE FROM alerts a WHERE EXISTS (SELECT 1 FROM _states s WHERE s.alert = a.alert "
                "AND s.service_name IS NOT DISTINCT FROM a.service_name "
                "AND s.slice IS NOT DISTINCT FROM a.slice)"
            )
    insert_rows(con, "alerts", states)
    insert_rows(con, "alert_events", events)
    insert_rows(con, "alert_notifications", notifications)


def pending_notifications(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Notifications not delivered yet, per webhook in the order they were made."""
    return arrow_table(
        con.execute(
            "SELECT * FROM alert_notifications WHERE delivered_at IS NULL "
            "ORDER BY webhook, created_at, event_id"
        )
    )


def update_notification(
    con: duckdb.DuckDBPyConnection,
    event_id: str,
    webhook: str,
    attempts: int,
    delivered_at: datetime | None,
    next_attempt_at: datetime | None,
    error: str | None,
) -> None:
    """One notification's delivery: its attempts, when it was delivered or is tried next, its error."""
    con.execute(
        "UPDATE alert_notifications SET attempts = ?, delivered_at = ?, next_attempt_at = ?, "
        "last_error = ? WHERE event_id = ? AND webhook = ?",
        [attempts, delivered_at, next_attempt_at, error, event_id, webhook],
    )


def write_probe_run(con: duckdb.DuckDBPyConnection, run: pa.Table) -> None:
    """Store a probe run's row, replacing the row of the same run (a run is written when it starts
    and again when it finished)."""
    with registered(con, "_probe_runs", run):
        con.execute("DELETE FROM probe_runs WHERE run_id IN (SELECT run_id FROM _probe_runs)")
    insert_rows(con, "probe_runs", run)


def read_probe_runs(con: duckdb.DuckDBPyConnection, probe: str | None, limit: int | None) -> pa.Table:
    """Probe runs, the latest first (of one probe; at most `limit`)."""
    where = "WHERE probe = ?" if probe is not None else ""
    bound = "LIMIT ?" if limit is not None else ""
    params = [v for v in (probe, limit) if v is not None]
    return arrow_table(
        con.execute(f"SELECT * FROM probe_runs {where} ORDER BY started_at DESC, run_id {bound}", params)
    )
