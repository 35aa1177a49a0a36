"""What retention reads and deletes in a DuckDB database (both backends): the oldest traces, by the
newest time of their rows, and every row of some traces, in every per-trace table."""

from __future__ import annotations

from datetime import datetime

import duckdb
import pyarrow.compute as pc

from collector.store.base import DeletedRows
from collector.store.duckdb_rows import arrow_table

# Every table with rows of one trace, keyed by trace_id: what retention deletes. Judge work is the
# traces' `judge_status`; aggregates, alerts, canary runs and cases are not per trace and stay.
# Spans first: the traces whose spans are deleted are the traces counted as deleted.
# (`spans` and `span_events` are views: the received rows' tables, copies included, go whole.)
PER_TRACE_TABLES = (
    "received_spans",
    "received_span_events",
    "traces",
    "steps",
    "documents",
    "scores",
    "score_history",  # the scores rescore runs replaced (docs/rescore.md)
    "evaluation_outbox",
    "feedback",
)

# The time a trace's age is read from, per row: a span's end (OTLP sends 0 for "unknown", which would
# make the span look 56 years old: such a span ages from when it arrived); for trace ids with no span,
# their log events (sent apart from their spans, which may never come), their assembled rows, and
# feedback given before (or without) them.
SPAN_TIME = "CASE WHEN end_time > TIMESTAMP 'epoch' THEN end_time ELSE received_at END"
# (Read from every received row, copies included: cheaper than the views, and a copy ages a trace
# by its arrival only when its end is unknown.)
OTHER_TIMES = (
    "SELECT trace_id, coalesce(time, received_at) AS t, 1 AS other FROM received_span_events "
    "WHERE source = 'log' "
    "UNION ALL SELECT trace_id, coalesce(end_time, last_received_at, assembled_at), 1 FROM traces "
    "UNION ALL SELECT trace_id, received_at, 1 FROM feedback WHERE trace_id IS NOT NULL"
)


def oldest_trace_ids(con: duckdb.DuckDBPyConnection, limit: int, before: datetime | None) -> list[str]:
    """Up to `limit` trace ids, oldest first (`Housekeeping.oldest_traces`), optionally only those
    older than `before`."""
    if before is not None:
        # The common case, nothing old enough, answered by three column scans instead of a
        # grouping of every trace.
        row = con.execute(
            f"SELECT least((SELECT min({SPAN_TIME}) FROM received_spans), "
            f"(SELECT min(t) FROM ({OTHER_TIMES}))) < ?",
            [before],
        ).fetchone()
        if not row or not row[0]:
            return []
    having = "HAVING newest < ?" if before is not None else ""
    rows = con.execute(
        # A trace's spans decide its age; its other rows only when it has no span.
        "SELECT trace_id, coalesce(max(t) FILTER (other = 0), max(t)) AS newest FROM ("
        f"SELECT trace_id, {SPAN_TIME} AS t, 0 AS other FROM received_spans UNION ALL {OTHER_TIMES}"
        f") GROUP BY trace_id {having} ORDER BY newest NULLS FIRST, trace_id LIMIT ?",
        [before, limit] if before is not None else [limit],
    ).fetchall()
    return [r[0] for r in rows]


def delete_trace_rows(con: duckdb.DuckDBPyConnection, ids: str) -> DeletedRows:
    """Delete every row of the traces in the registered table `ids` from every per-trace table."""
    rows: dict[str, int] = {}
    where = f"WHERE trace_id IN (SELECT trace_id FROM {ids})"
    # Read, then delete (not DELETE ... RETURNING, which a DuckLake table refuses): the same
    # transaction, so the same rows.
    spans = arrow_table(con.execute(f"SELECT trace_id FROM received_spans {where}"))
    con.execute(f"DELETE FROM received_spans {where}")
    rows["spans"] = spans.num_rows
    for table in PER_TRACE_TABLES[1:]:
        row = con.execute(f"DELETE FROM {table} {where}").fetchone()
        rows[table] = int(row[0]) if row else 0
    return DeletedRows(traces=pc.count_distinct(spans["trace_id"]).as_py(), rows=rows)
