"""The DuckDB-file backend of the store (`store.backend: duckdb`, the default): every interface of
`Store` over the connection `DuckDBBase` keeps (`collector/store/duckdb_base.py`).

One writer connection takes the span writer's group commits; every other operation runs on a
cursor of its own (a DuckDB cursor is a connection to the same database), so assembly, golden
cases and SQL readers never wait on a group commit and the writer never waits on them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from collector.schema.span_records import EVENT_COLUMNS, SPAN_COLUMNS
from collector.schema.tables import EVENT_KEY, SPAN_KEY
from collector.schema.trace_rows import TraceTables
from collector.store import duckdb_alerts as alerts
from collector.store import duckdb_assembly as assembly
from collector.store import duckdb_judging as judging
from collector.store import duckdb_outbox as outbox
from collector.store import duckdb_rescore as rescore
from collector.store import duckdb_sessions as sessions
from collector.store.base import DeletedRows, RescoreScope, RescoreTotals, StorageSize
from collector.store.duckdb_base import DuckDBBase
from collector.store.duckdb_connection import transaction
from collector.store.duckdb_feedback import (
    replace_feedback,
    resolve_responses,
    scores_of_assembled,
    store_annotation,
)
from collector.store.duckdb_retention import delete_trace_rows, oldest_trace_ids
from collector.store.duckdb_rows import (
    arrow_table,
    ids_table,
    insert_rows,
    insert_sql,
    quoted,
    registered,
    rows_of,
)
from collector.store.schema_sql import first_stored
from collector.store.sql import QueryResult, run_query

_IDS = "_trace_ids"
# Feedback writes between two checkpoints (see `write_feedback`).
_FEEDBACK_WRITES_PER_CHECKPOINT = 100


class DuckDBStore(DuckDBBase):
    """A ragpulse database file: every interface of `Store`, each a call of the SQL module named for
    its caller (`duckdb_assembly`, `duckdb_judging`, `duckdb_sessions`, `duckdb_rescore`, ...) on a
    cursor or in a write transaction of `DuckDBBase`."""

    # ---------------------------------------------------------------- ingest

    def append_spans(self, spans: pa.Table, events: pa.Table) -> None:
        self._writable()

        def attempt() -> None:
            with self._write_lock, transaction(self._con) as con:
                if spans.num_rows:
                    with registered(con, "_ingest_spans", spans):
                        con.execute(insert_sql("received_spans", "_ingest_spans"))
                if events.num_rows:
                    with registered(con, "_ingest_events", events):
                        con.execute(insert_sql("received_span_events", "_ingest_events"))

        self._retrying(attempt)

    # ---------------------------------------------------------------- assembly

    def read_spans(self, trace_ids: Iterable[str]) -> tuple[pa.Table, pa.Table]:
        # Each span and event once, as the views show them, but picked among these traces' rows only.
        span_columns = ", ".join(f"s.{c}" for c in (*SPAN_COLUMNS, "received_at", "resource_attributes"))
        event_columns = ", ".join(f"e.{c}" for c in (*EVENT_COLUMNS, "received_at"))
        with self._cursor() as con, registered(con, _IDS, ids_table(trace_ids)):
            spans = arrow_table(
                con.execute(
                    f"SELECT {span_columns} FROM received_spans s "
                    f"SEMI JOIN {_IDS} i ON s.trace_id = i.trace_id " + first_stored(SPAN_KEY, "s")
                )
            )
            events = arrow_table(
                con.execute(
                    f"SELECT {event_columns} FROM received_span_events e "
                    f"SEMI JOIN {_IDS} i ON e.trace_id = i.trace_id " + first_stored(EVENT_KEY, "e")
                )
            )
        return spans, events

    def pending_trace_ids(self, received_before: datetime | None = None) -> list[str]:
        with self._cursor() as con:
            return assembly.pending_trace_ids(con, received_before)

    def has_traces(self) -> bool:
        with self._cursor() as con:
            row = con.execute("SELECT EXISTS (SELECT 1 FROM traces)").fetchone()
        return bool(row and row[0])

    def assembly_counts(self, trace_ids: Iterable[str]) -> dict[str, int]:
        with self._cursor() as con:
            return assembly.assembly_counts(con, trace_ids)

    def traces_assembled_twice(self, since: float) -> list[str]:
        with self._cursor() as con:
            return assembly.traces_assembled_twice(con, since)

    def write_traces(self, tables: TraceTables, replace: Sequence[str]) -> None:
        self._touched.add(self._write(lambda con: self._write_traces(con, tables, replace)))

    def _write_traces(
        self, con: duckdb.DuckDBPyConnection, tables: TraceTables, replace: Sequence[str]
    ) -> set[sessions.SessionKey]:
        """Store the rows in the caller's transaction; returns the sessions of the turns they changed."""
        affected = None
        touched = sessions.keys_of_rows(tables.traces)
        if replace:
            with registered(con, _IDS, ids_table(replace)):
                replaced = sessions.keys_of_traces(con, _IDS)  # a late span may change the session
                sessions.forget_scored(con, replaced)  # their session scores are given again
                touched |= replaced
                affected = arrow_table(
                    con.execute(
                        f"SELECT DISTINCT {quoted(self.aggregate_key)} FROM scores "
                        f"WHERE trace_id IN (SELECT trace_id FROM {_IDS})"
                    )
                )
                for table in ("traces", "steps", "documents", "scores", "evaluation_outbox"):
                    con.execute(f"DELETE FROM {table} WHERE trace_id IN (SELECT trace_id FROM {_IDS})")
        for table, rows in (
            ("traces", self._stamp(tables.traces)),
            ("steps", tables.steps),
            ("documents", tables.documents),
        ):
            insert_rows(con, table, rows)
        slices = tables.traces.select(
            [c for c in ("trace_id", "probe", *self.dimensions) if c in tables.traces.column_names]
        )
        insert_rows(con, "evaluation_outbox", self._stamp(tables.outbox))
        scores = tables.scores
        if self._feedback_stored or self.shared:  # another replica may have stored some
            feedback = scores_of_assembled(con, tables.traces)
            if feedback is not None:
                scores = feedback if scores is None else pa.concat_tables([scores, feedback])
        self._insert_scores(con, scores, affected, slices)
        return touched

    def write_feedback(self, feedback: pa.Table) -> int:
        def body(con: duckdb.DuckDBPyConnection) -> int:
            rows = resolve_responses(con, feedback)
            scores, affected, slices = replace_feedback(con, rows, self.aggregate_key)
            self._insert_scores(con, scores, affected, slices)
            return scores.num_rows

        attached = self._write(body)
        self._feedback_stored = True
        # Feedback updates aggregate rows all over the history; DuckDB merges each update not yet
        # checkpointed into every later scan, so single items slowed from 32 to 142 ms a write over
        # 800 (bench/README.md, "People in the loop"). A checkpoint (tens of ms) undoes it.
        self._feedback_writes += 1
        if self._feedback_writes >= _FEEDBACK_WRITES_PER_CHECKPOINT and not self.shared:
            self._feedback_writes = 0
            self.checkpoint()
        return attached

    def write_annotation(self, annotation: pa.Table) -> dict[str, object] | None:
        return self._write(lambda con: store_annotation(con, annotation), self._monitoring_lock)

    # ---------------------------------------------------------------- judge work

    def pending_judge_work(self, limit: int, exclude: Iterable[str] = ()) -> pa.Table:
        with self._cursor() as con:
            return judging.pending_judge_work(con, self.replica, limit, exclude)

    def earlier_turns(
        self, trace_ids: Sequence[str], turns: int
    ) -> dict[str, list[tuple[str | None, str | None]]]:
        with self._cursor() as con:
            return judging.earlier_turns(con, trace_ids, turns)

    def write_judge_scores(self, revisions: pa.Table, scores: pa.Table, outbox: pa.Table) -> int:
        def body(con: duckdb.DuckDBPyConnection) -> tuple[int, set[sessions.SessionKey]]:
            keep = judging.current_revisions(con, revisions)
            if not len(keep):
                return 0, set()
            slices = judging.slices_of(con, keep, self.dimensions)
            insert_rows(con, "evaluation_outbox", self._stamp(rows_of(outbox, keep)))
            self._insert_scores(con, rows_of(scores, keep), None, slices)
            judging.mark_judged(con, keep)
            with registered(con, _IDS, ids_table(keep.to_pylist())):
                return len(keep), sessions.keys_of_traces(con, _IDS)

        stored, touched = self._write(body)
        self._touched.add(touched)
        return stored

    def skip_judge_work(self, trace_ids: Sequence[str], reason: str) -> None:
        self._write(lambda con: judging.skip_judge_work(con, trace_ids, reason))

    # ---------------------------------------------------------------- evaluation outbox

    def read_outbox(self, limit: int) -> pa.Table:
        with self._cursor() as con:
            return outbox.read_outbox(con, self.replica, limit)

    def delete_outbox(self, event_ids: Sequence[str]) -> None:
        self._write(lambda con: outbox.delete_outbox(con, event_ids))

    def trim_outbox(self, max_events: int) -> int:
        return self._write(lambda con: outbox.trim_outbox(con, self.replica, max_events))

    def outbox_depth(self) -> int:
        with self._cursor() as con:
            return outbox.outbox_depth(con, self.replica)

    # ---------------------------------------------------------------- alerts

    def read_alerts(self) -> pa.Table:
        with self._cursor() as con:
            return arrow_table(con.execute("SELECT * FROM alerts ORDER BY alert, service_name, slice"))

    def write_alerts(self, states: pa.Table, events: pa.Table, notifications: pa.Table) -> None:
        self._write(
            lambda con: alerts.write_alerts(con, states, events, notifications), self._monitoring_lock
        )

    def pending_notifications(self) -> pa.Table:
        with self._cursor() as con:
            return alerts.pending_notifications(con)

    def update_notification(
        self,
        event_id: str,
        webhook: str,
        attempts: int,
        delivered_at: datetime | None,
        next_attempt_at: datetime | None,
        error: str | None,
    ) -> None:
        delivery = (event_id, webhook, attempts, delivered_at, next_attempt_at, error)
        self._write(lambda con: alerts.update_notification(con, *delivery), self._monitoring_lock)

    def read_canary_runs(self) -> pa.Table:
        with self._cursor() as con:
            return arrow_table(con.execute("SELECT * FROM canary_runs ORDER BY started_at, run_id"))

    def write_canary_run(self, run: pa.Table) -> None:
        self._write(lambda con: insert_rows(con, "canary_runs", run), self._monitoring_lock)

    # ---------------------------------------------------------------- golden cases

    def read_cases(self) -> pa.Table:
        with self._cursor() as con:
            return arrow_table(
                con.execute(
                    "SELECT case_id, normalized_question, expected_documents, expected_answer FROM cases"
                )
            )

    def write_cases(self, cases: pa.Table) -> None:
        def body(con: duckdb.DuckDBPyConnection) -> None:
            with registered(con, "_cases", cases):
                con.execute("DELETE FROM cases WHERE case_id IN (SELECT case_id FROM _cases)")
                con.execute(insert_sql("cases", "_cases"))

        self._write(body, self._monitoring_lock)

    # ---------------------------------------------------------------- read-only SQL

    def query(self, sql: str, max_rows: int, timeout: float) -> QueryResult:
        with self._cursor() as con:
            return run_query(con, sql, max_rows, timeout)

    # ---------------------------------------------------------------- retention

    def storage_size(self) -> StorageSize:
        wal = self.path.with_name(self.path.name + ".wal")
        try:
            wal_bytes = wal.stat().st_size
        except FileNotFoundError:  # no write since the last checkpoint
            wal_bytes = 0
        with self._cursor() as con:
            row = con.execute(
                "SELECT block_size, free_blocks FROM pragma_database_size() "
                "WHERE database_name = current_database()"
            ).fetchone()
        free = int(row[0]) * int(row[1]) if row else 0
        return StorageSize(file_bytes=os.path.getsize(self.path), wal_bytes=wal_bytes, free_bytes=free)

    def count_traces(self) -> int:
        with self._cursor() as con:
            row = con.execute("SELECT count(DISTINCT trace_id) FROM received_spans").fetchone()
        return int(row[0]) if row else 0

    def oldest_traces(self, limit: int, before: datetime | None = None) -> list[str]:
        with self._cursor() as con:
            return oldest_trace_ids(con, limit, before)

    def delete_traces(self, trace_ids: Sequence[str]) -> DeletedRows:
        ids = ids_table(dict.fromkeys(trace_ids))

        # Under the derived-rows lock: assembly, judge results and outbox deletions update these rows
        # too, and two transactions deleting one row would fail one of them. Span appends only add
        # rows, so the span writer goes on meanwhile.
        def body(con: duckdb.DuckDBPyConnection) -> tuple[DeletedRows, set[sessions.SessionKey]]:
            with registered(con, _IDS, ids):
                touched = sessions.keys_of_traces(con, _IDS)
                return delete_trace_rows(con, _IDS), touched

        deleted, touched = self._write(body)
        self._touched.add(touched)
        return deleted

    # ---------------------------------------------------------------- sessions

    def refresh_sessions(self, catch_up: float | None = None) -> int:
        keys = self._touched.take()
        if not keys and catch_up is None:
            return 0  # nothing written since: no transaction (on a lake, a round of the catalog)
        try:
            return self._write(lambda con: sessions.refresh_round(con, keys, catch_up), self._sessions_lock)
        except BaseException:
            self._touched.add(keys)  # computed by the next refresh
            raise

    def sessions_to_score(self, idle_timeout: float, limit: int) -> list[sessions.SessionKey]:
        with self._cursor() as con:
            return sessions.sessions_to_score(con, idle_timeout, limit)

    def session_turns(self, keys: Sequence[sessions.SessionKey]) -> list[dict[str, Any]]:
        with self._cursor() as con:
            return sessions.session_turns(con, keys)

    def write_session_scores(
        self, keys: Sequence[sessions.SessionKey], checks: pa.Table, scores: pa.Table
    ) -> int:
        def body(con: duckdb.DuckDBPyConnection) -> int:
            scored, kept, affected = sessions.replace_session_scores(
                con, keys, checks, scores, self.aggregate_key
            )
            if kept is not None:
                slices = judging.slices_of(con, pc.unique(kept["trace_id"]), self.dimensions)
                self._insert_scores(con, kept, affected, slices)
                sessions.record_scored(con, scored)
            return scored.num_rows

        return self._write(body)

    # ---------------------------------------------------------------- rescore runs

    def count_rescore_scope(self, scope: RescoreScope) -> RescoreTotals:
        with self._cursor() as con:
            return rescore.count_scope(con, scope, self.dimensions)

    def next_rescore_batch(
        self, scope: RescoreScope, after: tuple[datetime, str] | None, limit: int
    ) -> pa.Table:
        with self._cursor() as con:
            return rescore.next_batch(con, scope, self.dimensions, after, limit)

    def judge_token_means(self, scope: RescoreScope, names: Sequence[str]) -> dict[str, tuple[float, float]]:
        with self._cursor() as con:
            return rescore.judge_token_means(con, scope, self.dimensions, names)

    def find_rescore_run(self, request: str) -> dict[str, Any] | None:
        with self._cursor() as con:
            return rescore.find_run(con, request)

    def rescore_runs(self, run_id: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        with self._cursor() as con:
            return rescore.read_runs(con, run_id, limit)

    def open_rescore_run(self, run: pa.Table) -> None:
        self._write(lambda con: rescore.open_run(con, run))

    def set_rescore_status(self, run_id: str, status: str, error: str | None = None) -> None:
        self._write(lambda con: rescore.set_status(con, run_id, status, error))

    def claim_rescore_run(self, run_id: str, stale_before: datetime) -> bool:
        return self._write(lambda con: rescore.claim(con, run_id, stale_before))

    def stop_orphaned_rescore_runs(self) -> int:
        return self._write(rescore.stop_orphans)

    def write_rescore(
        self,
        run_id: str,
        revisions: pa.Table,
        scores: pa.Table,
        outbox: pa.Table,
        cursor: tuple[datetime, str],
        progress: dict[str, int],
    ) -> tuple[int, int]:
        def body(con: duckdb.DuckDBPyConnection) -> tuple[int, int, set[sessions.SessionKey]]:
            current = rescore.current_traces(con, revisions, self.dimensions)
            keep = current["trace_id"].combine_chunks()
            kept = rows_of(scores, keep)
            replaced, affected = rescore.move_replaced(con, kept, run_id, self.aggregate_key)
            insert_rows(con, "evaluation_outbox", self._stamp(rows_of(outbox, keep)))
            slices = current.select(["trace_id", "probe", *self.dimensions])
            self._insert_scores(con, kept, affected, slices)
            rescore.mark_judged(con, kept)
            rescore.advance(
                con,
                run_id,
                cursor,
                {**progress, "scores_written": kept.num_rows, "scores_replaced": replaced},
            )
            return kept.num_rows, replaced, rescore.sessions_to_score_again(con, current)

        written, replaced, touched = self._write(body)
        self._touched.add(touched)
        return written, replaced

    # ---------------------------------------------------------------- probe runs

    def write_probe_run(self, run: pa.Table) -> None:
        self._write(lambda con: alerts.write_probe_run(con, run), self._monitoring_lock)

    def read_probe_runs(self, probe: str | None = None, limit: int | None = None) -> pa.Table:
        with self._cursor() as con:
            return alerts.read_probe_runs(con, probe, limit)
