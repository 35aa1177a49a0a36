"""The assembler's questions to a DuckDB database (both backends): the traces stored but not
assembled (recovery at start), how often traces were assembled, and those assembled twice."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import duckdb

from collector.schema.tables import EVENT_KEY, SPAN_KEY
from collector.store.duckdb_rows import ids_table, registered
from collector.store.schema_sql import first_stored

_IDS = "_assembly_ids"


def pending_trace_ids(con: duckdb.DuckDBPyConnection, received_before: datetime | None = None) -> list[str]:
    """The traces with rows stored but not assembled (or stored since their assembly, first
    copies only), in the order their last rows came; with `received_before`, of the rows received
    before then only."""
    # Events of a trace with no span yet make it wait for its spans, as in the running service.
    # Rows that came after a trace's assembly may all be later copies of rows it had (a retried
    # or replayed export): such a trace is not pending. Only the few traces with later rows are
    # read again for their first copies; every row counts for the others, which is cheaper.
    rows = con.execute(
        f"""
            WITH s AS (SELECT trace_id, max(received_at) AS last FROM received_spans
                       WHERE received_at < $before GROUP BY trace_id),
                 e AS (SELECT trace_id, max(received_at) AS last FROM received_span_events
                       WHERE source = 'log' AND received_at < $before GROUP BY trace_id),
                 c AS (SELECT s.trace_id, s.last, t.trace_id IS NULL AS new, t.last_received_at AS seen
                       FROM s
                       LEFT JOIN e ON e.trace_id = s.trace_id
                       LEFT JOIN traces t ON t.trace_id = s.trace_id
                       WHERE t.trace_id IS NULL
                          OR s.last > t.last_received_at
                          OR coalesce(e.last > t.last_received_at, false)),
                 late AS (SELECT trace_id, min(seen) AS seen FROM c WHERE NOT new GROUP BY trace_id),
                 firsts AS (SELECT r.trace_id, r.received_at FROM received_spans r
                            SEMI JOIN late l ON l.trace_id = r.trace_id {first_stored(SPAN_KEY, "r")}
                            UNION ALL
                            SELECT r.trace_id, r.received_at FROM received_span_events r
                            SEMI JOIN late l ON l.trace_id = r.trace_id {first_stored(EVENT_KEY, "r")})
            SELECT trace_id FROM c
            WHERE new OR trace_id IN (SELECT trace_id FROM firsts JOIN late USING (trace_id)
                                      WHERE firsts.received_at > late.seen)
            ORDER BY last
            """,
        {"before": received_before or datetime.max},  # None: every row
    ).fetchall()
    return [r[0] for r in rows]


def assembly_counts(con: duckdb.DuckDBPyConnection, trace_ids: Iterable[str]) -> dict[str, int]:
    """How many times each of these traces was assembled (those never assembled are absent)."""
    with registered(con, _IDS, ids_table(trace_ids)):
        rows = con.execute(
            f"SELECT t.trace_id, t.assembly_count FROM traces t SEMI JOIN {_IDS} i ON t.trace_id = i.trace_id"
        ).fetchall()
    return {trace_id: count or 1 for trace_id, count in rows}


def traces_assembled_twice(con: duckdb.DuckDBPyConnection, since: float) -> list[str]:
    """The traces with two rows in `traces` among those assembled since `since` (epoch seconds)."""
    # The recent rows are found by `assembled_at` (older row groups skipped by their min/max);
    # the others are read whole, once for all of them.
    start = datetime.fromtimestamp(since, UTC).replace(tzinfo=None)
    rows = con.execute(
        "WITH recent AS (SELECT DISTINCT trace_id FROM traces WHERE assembled_at >= ?) "
        "SELECT t.trace_id FROM traces t SEMI JOIN recent r ON t.trace_id = r.trace_id "
        "GROUP BY t.trace_id HAVING count(*) > 1 ORDER BY t.trace_id",
        [start],
    ).fetchall()
    return [r[0] for r in rows]
