"""The assembler's side of the store: read spans of given traces back, write assembled traces.

It runs on its own DuckDB cursor (its own connection to the same database), so assembly never
waits on the span writer's group commits, and the writer never waits on assembly.
"""

from __future__ import annotations

from collections.abc import Iterable

import duckdb
import pyarrow as pa

from collector.processors.span_records import EVENT_COLUMNS, SPAN_COLUMNS
from collector.store.duckdb_store import Store, transaction
from collector.store.trace_rows import TraceTables

_IDS = "_assembler_ids"


def _ids_table(trace_ids: Iterable[str]) -> pa.Table:
    return pa.table({"trace_id": pa.array(list(trace_ids), pa.string())})


class TraceStore:
    """Reads and writes for trace assembly, on one cursor owned by the assembler thread."""

    def __init__(self, store: Store) -> None:
        self._con: duckdb.DuckDBPyConnection = store.read_cursor()

    def close(self) -> None:
        self._con.close()

    def read_spans(self, trace_ids: Iterable[str]) -> tuple[pa.Table, pa.Table]:
        """(spans, events) of every stored span of these traces."""
        con = self._con
        con.register(_IDS, _ids_table(trace_ids))
        try:
            span_columns = ", ".join(f"s.{c}" for c in (*SPAN_COLUMNS, "received_at"))
            spans = con.execute(
                f"SELECT {span_columns} FROM spans s SEMI JOIN {_IDS} i ON s.trace_id = i.trace_id"
            ).to_arrow_table()
            event_columns = ", ".join(f"e.{c}" for c in (*EVENT_COLUMNS, "received_at"))
            events = con.execute(
                f"SELECT {event_columns} FROM span_events e SEMI JOIN {_IDS} i ON e.trace_id = i.trace_id"
            ).to_arrow_table()
        finally:
            con.unregister(_IDS)
        return spans, events

    def pending_trace_ids(self) -> list[str]:
        """Traces with stored spans that no assembly has seen: never assembled, or spans or log
        events received after the last assembly (a crash between commit and assembly). Events of
        a trace with no span yet make it wait for its spans, as in the running service."""
        rows = self._con.execute(
            """
            WITH s AS (SELECT trace_id, max(received_at) AS last FROM spans GROUP BY trace_id),
                 e AS (SELECT trace_id, max(received_at) AS last FROM span_events
                       WHERE source = 'log' GROUP BY trace_id)
            SELECT s.trace_id
            FROM s
            LEFT JOIN e ON e.trace_id = s.trace_id
            LEFT JOIN traces t ON t.trace_id = s.trace_id
            WHERE t.trace_id IS NULL
               OR s.last > t.last_received_at
               OR coalesce(e.last > t.last_received_at, false)
            ORDER BY s.last
            """
        ).fetchall()
        return [r[0] for r in rows]

    def has_traces(self) -> bool:
        row = self._con.execute("SELECT EXISTS (SELECT 1 FROM traces)").fetchone()
        return bool(row and row[0])

    def assembly_counts(self, trace_ids: Iterable[str]) -> dict[str, int]:
        """How often each of these traces was assembled already (absent: never)."""
        con = self._con
        con.register(_IDS, _ids_table(trace_ids))
        try:
            rows = con.execute(
                "SELECT t.trace_id, t.assembly_count FROM traces t "
                f"SEMI JOIN {_IDS} i ON t.trace_id = i.trace_id"
            ).fetchall()
        finally:
            con.unregister(_IDS)
        return {trace_id: count or 1 for trace_id, count in rows}

    def cases(self) -> pa.Table:
        return self._con.execute(
            "SELECT case_id, normalized_question, expected_documents, expected_answer FROM cases"
        ).to_arrow_table()

    def write(self, tables: TraceTables, replace: Iterable[str]) -> None:
        """Insert assembled traces in one transaction, first deleting earlier assemblies of `replace`."""
        con = self._con
        replace_ids = list(replace)
        with transaction(con):
            if replace_ids:
                con.register(_IDS, _ids_table(replace_ids))
                for table in ("traces", "steps", "documents"):
                    con.execute(f"DELETE FROM {table} WHERE trace_id IN (SELECT trace_id FROM {_IDS})")
                con.unregister(_IDS)
            for table, rows in (
                ("traces", tables.traces),
                ("steps", tables.steps),
                ("documents", tables.documents),
            ):
                if rows.num_rows:
                    con.register("_assembled", rows)
                    con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _assembled")
                    con.unregister("_assembled")
