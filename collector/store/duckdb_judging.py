"""The judge stage's rows in a DuckDB database (both backends): the traces waiting for the judge,
which of a batch of verdicts are still current, and the traces' judge status."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import duckdb
import pyarrow as pa

from collector.store.duckdb_rows import arrow_table, ids_table, quoted, registered
from collector.store.reads.conversation import earlier_turns_sql, turns_by_trace

_IDS = "_judged_ids"


def pending_judge_work(
    con: duckdb.DuckDBPyConnection, replica: str | None, limit: int, exclude: Iterable[str]
) -> pa.Table:
    """The replica's oldest `limit` traces waiting for the judge, but those in `exclude`."""
    with registered(con, _IDS, ids_table(exclude)):
        return arrow_table(
            con.execute(
                "SELECT trace_id, assembly_count, sample_reason, expected_answer, "
                "CAST(expected_documents AS VARCHAR) AS expected_documents "
                "FROM traces t WHERE judge_status = 'pending' AND replica IS NOT DISTINCT FROM ? "
                f"AND NOT EXISTS (SELECT 1 FROM {_IDS} i WHERE i.trace_id = t.trace_id) "
                "ORDER BY assembled_at LIMIT ?",
                [replica, limit],
            )
        )


def current_revisions(con: duckdb.DuckDBPyConnection, revisions: pa.Table) -> pa.Array:
    """The trace ids of `revisions` (trace_id, revision) still pending at that revision: a trace
    assembled again meanwhile gets its verdicts from the judging of its new revision."""
    with registered(con, "_revisions", revisions):
        current = arrow_table(
            con.execute(
                "SELECT r.trace_id FROM _revisions r JOIN traces t ON t.trace_id = r.trace_id "
                "AND t.assembly_count = r.revision AND t.judge_status = 'pending'"
            )
        )
    return pa.array(current["trace_id"].to_pylist(), pa.string())


def slices_of(con: duckdb.DuckDBPyConnection, trace_ids: pa.Array, dimensions: Sequence[str]) -> pa.Table:
    """The traces' probe and dimension values (trace_id first), for their scores' rows."""
    with registered(con, _IDS, pa.table({"trace_id": trace_ids})):
        return arrow_table(
            con.execute(
                f"SELECT trace_id, {quoted(('probe', *dimensions))} FROM traces "
                f"WHERE trace_id IN (SELECT trace_id FROM {_IDS})"
            )
        )


def mark_judged(con: duckdb.DuckDBPyConnection, trace_ids: pa.Array) -> None:
    """The traces' judge work done, now."""
    with registered(con, _IDS, pa.table({"trace_id": trace_ids})):
        con.execute(
            "UPDATE traces SET judge_status = 'done', scored_at = now()::TIMESTAMP "
            f"WHERE trace_id IN (SELECT trace_id FROM {_IDS})"
        )


def skip_judge_work(con: duckdb.DuckDBPyConnection, trace_ids: Sequence[str], reason: str) -> None:
    """Pending traces left to the deterministic scores, with why (`throttled`, `over_budget`)."""
    with registered(con, _IDS, ids_table(trace_ids)):
        con.execute(
            "UPDATE traces SET judge_status = ?, sample_decision = 'deterministic', sample_reason = ? "
            f"WHERE judge_status = 'pending' AND trace_id IN (SELECT trace_id FROM {_IDS})",
            [reason, reason],
        )


def earlier_turns(
    con: duckdb.DuckDBPyConnection, trace_ids: Sequence[str], turns: int
) -> dict[str, list[tuple[str | None, str | None]]]:
    """The conversation before each of these traces: its session's last `turns` turns before it."""
    if not trace_ids or turns < 1:
        return {}
    return turns_by_trace(con.execute(earlier_turns_sql(trace_ids, turns)).fetchall())
