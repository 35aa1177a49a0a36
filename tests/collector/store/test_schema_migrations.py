"""Schema migrations on a real DuckDB file: a database written by an earlier version opens, gains
what the new version needs, and keeps its rows; the migrated schema is exactly the one that
`collector/schema/tables.py` defines (columns, types, order), which the Arrow schemas share."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from collector.otlp.batch import EVENTS_SCHEMA, SPANS_SCHEMA, empty_batch
from collector.schema.tables import ALL_TABLES, SPAN_EVENTS, SPANS, TRACES
from collector.store.duckdb_connection import schema_version
from collector.store.duckdb_store import DuckDBStore
from collector.store.migrations import LATEST_VERSION, MIGRATIONS, add_columns
from collector.store.schema_sql import create_table_sql


def file_at(path: Path, version: int) -> duckdb.DuckDBPyConnection:
    """A new database file migrated to `version` only, open."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE ragpulse_schema (version INTEGER, description VARCHAR, applied_at TIMESTAMP)")
    for number, description, sql in MIGRATIONS[:version]:
        con.execute(sql)
        con.execute("INSERT INTO ragpulse_schema VALUES (?, ?, now()::TIMESTAMP)", [number, description])
    return con


def version_2_file(path: Path) -> None:
    """A file as ragpulse left it before migration 3: one assembled trace with a log event."""
    con = file_at(path, 2)
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
    with DuckDBStore(path) as store:
        assert store.query("SELECT max(version) FROM ragpulse_schema", 1, 5).rows == [(LATEST_VERSION,)]
        assert LATEST_VERSION >= 3
        rows = store.query("SELECT name, source, received_at FROM span_events", 10, 5).rows
        assert rows == [("gen_ai.choice", "log", None)]
        # An event stored before its receive time was kept tells the recovery nothing: the
        # assembled trace is not assembled again on every start.
        assert store.pending_trace_ids() == []


def test_a_version_7_file_keeps_its_events_and_makes_write_back_events_from_scores(tmp_path: Path) -> None:
    """Migration 8: `span_events` becomes a view. Received events keep their rows (in
    `received_span_events`); the stored write-back event of a score goes, and the view shows it
    again, made from the score: one event per score, not two."""
    path = tmp_path / "v7.duckdb"
    con = file_at(path, 7)
    con.execute(
        "INSERT INTO span_events (trace_id, span_id, time, name, attributes, source) VALUES "
        "('t1', 's1', TIMESTAMP '2026-12-01 10:00:01', 'retry', '{\"n\": 1}', 'otlp'), "
        "('t1', 's2', TIMESTAMP '2026-12-01 10:00:09', 'gen_ai.evaluation.result', "
        "'{\"gen_ai.evaluation.name\": \"faithfulness\"}', 'ragpulse')"
    )
    con.execute(
        "INSERT INTO scores (trace_id, span_id, name, value, status, threshold, items, created_at, "
        "evaluator, revision) VALUES ('t1', 's2', 'faithfulness', 0.5, 'fail', 0.7, '[]', "
        "TIMESTAMP '2026-12-01 10:00:09', 'deterministic', 1)"
    )
    con.close()
    with DuckDBStore(path) as store:
        rows = store.query("SELECT span_id, name, source, attributes FROM span_events ORDER BY time", 10, 5)
        received = store.query("SELECT name FROM received_span_events", 10, 5).rows
    assert [r[:3] for r in rows.rows] == [
        ("s1", "retry", "otlp"),
        ("s2", "gen_ai.evaluation.result", "ragpulse"),
    ]
    assert json.loads(rows.rows[1][3]) == {
        "gen_ai.evaluation.name": "faithfulness",
        "gen_ai.evaluation.score.label": "fail",
        "ragpulse.status": "fail",
        "ragpulse.evaluator": "deterministic",
        "ragpulse.revision": 1,
        "gen_ai.evaluation.score.value": 0.5,
        "ragpulse.threshold": 0.7,
    }
    assert received == [("retry",)]


def test_a_version_9_file_keeps_every_row_and_shows_each_span_and_event_once(tmp_path: Path) -> None:
    """Migration 10: `spans` becomes a view of the first stored copy of each span (the table keeps
    every row as `received_spans`), and `span_events` shows each received event once. A file with
    a trace delivered twice (an export retried after its commit, then replayed): after the
    migration the copies are there but not shown, and the trace is not pending (its later rows are
    copies of the rows it was assembled with); a new span after it is."""
    path = tmp_path / "v9.duckdb"
    con = file_at(path, 9)
    con.execute(
        "INSERT INTO spans (trace_id, span_id, name, received_at) VALUES "
        "('t1', 's1', 'root', TIMESTAMP '2026-12-01 10:00:00'), "
        "('t1', 's2', 'llm', TIMESTAMP '2026-12-01 10:00:00'), "
        "('t1', 's1', 'root, sent again', TIMESTAMP '2026-12-01 10:00:07'), "
        "('t1', 's2', 'llm', TIMESTAMP '2026-12-01 10:00:07')"
    )
    con.execute(
        "INSERT INTO received_span_events VALUES "
        "('t1', 's2', TIMESTAMP '2026-12-01 10:00:01', 'gen_ai.choice', '{\"index\":0}', 'otlp', "
        "TIMESTAMP '2026-12-01 10:00:00'), "
        "('t1', 's1', TIMESTAMP '2026-12-01 10:00:02', 'gen_ai.user.message', '{}', 'log', "
        "TIMESTAMP '2026-12-01 10:00:03'), "
        "('t1', 's2', TIMESTAMP '2026-12-01 10:00:01', 'gen_ai.choice', '{\"index\":0}', 'replay', "
        "TIMESTAMP '2026-12-01 10:00:07'), "
        "('t1', 's1', TIMESTAMP '2026-12-01 10:00:02', 'gen_ai.user.message', '{}', 'log', "
        "TIMESTAMP '2026-12-01 10:00:07')"
    )
    con.execute(
        "INSERT INTO traces (trace_id, span_count, assembly_count, last_received_at) "
        "VALUES ('t1', 2, 1, TIMESTAMP '2026-12-01 10:00:03')"
    )
    con.close()
    with DuckDBStore(path) as store:
        version = store.query("SELECT max(version) FROM ragpulse_schema", 1, 5).rows
        spans = store.query("SELECT span_id, name FROM spans ORDER BY span_id", 10, 5).rows
        events = store.query("SELECT name, source FROM span_events ORDER BY time", 10, 5).rows
        stored = store.query(
            "SELECT (SELECT count(*) FROM received_spans), (SELECT count(*) FROM received_span_events)", 1, 5
        ).rows
        read_spans, read_events = store.read_spans(["t1"])
        pending_before = store.pending_trace_ids()
        late = SPANS.arrow_table(
            {"trace_id": ["t1"], "span_id": ["s3"], "name": ["tool"], "received_at": [datetime.now()]}, 1
        )
        store.append_spans(late, SPAN_EVENTS.arrow_table({}, 0))
        pending_after = store.pending_trace_ids()
    assert version == [(LATEST_VERSION,)]
    assert spans == [("s1", "root"), ("s2", "llm")]
    assert events == [("gen_ai.choice", "otlp"), ("gen_ai.user.message", "log")]
    assert stored == [(4, 4)]
    assert (read_spans.num_rows, read_events.num_rows) == (2, 2)
    assert (pending_before, pending_after) == ([], ["t1"])


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    return [(row[0], row[1]) for row in con.execute(f"DESCRIBE {table}").fetchall()]


def test_migrations_build_exactly_the_defined_tables(tmp_path: Path) -> None:
    path = tmp_path / "new.duckdb"
    DuckDBStore(path).close()
    con = duckdb.connect(str(path), read_only=True)
    try:
        assert schema_version(con) == LATEST_VERSION
        for table in ALL_TABLES:
            assert _columns(con, table.name) == [(c.name, c.sql_type) for c in table.columns], table.name
        # The views users query have the received rows' columns.
        assert _columns(con, "span_events") == [(c.name, c.sql_type) for c in SPAN_EVENTS.columns]
        assert _columns(con, "spans") == [(c.name, c.sql_type) for c in SPANS.columns]
    finally:
        con.close()


def test_the_definitions_create_the_same_tables_as_the_migrations(tmp_path: Path) -> None:
    # `create_table_sql` (a fresh table from the definition) and the migration path agree.
    con = duckdb.connect(str(tmp_path / "fresh.duckdb"))
    try:
        for table in ALL_TABLES:
            con.execute(create_table_sql(table))
            assert _columns(con, table.name) == [(c.name, c.sql_type) for c in table.columns]
    finally:
        con.close()


def test_arrow_schemas_are_derived_from_the_definitions() -> None:
    assert SPANS_SCHEMA.names == list(SPANS.column_names)
    assert EVENTS_SCHEMA.names == list(SPAN_EVENTS.column_names)
    # The decoder keeps OTLP's nanoseconds; assembled rows use DuckDB's microseconds.
    assert SPANS_SCHEMA.field("start_time").type == pa.timestamp("ns")
    assert TRACES.arrow_schema().field("start_time").type == pa.timestamp("us")
    assert empty_batch().spans.schema == SPANS_SCHEMA


def test_arrow_table_fills_missing_columns_and_refuses_unknown_ones() -> None:
    table = TRACES.arrow_table({"trace_id": ["a", "b"], "question": ["q", None]}, 2)
    assert table.schema == TRACES.arrow_schema()
    assert table["sample_decision"].to_pylist() == [None, None]
    assert table["question"].to_pylist() == ["q", None]
    with pytest.raises(KeyError, match="no column"):
        TRACES.arrow_table({"trace_id": ["a"], "quesiton": ["typo"]}, 1)


def test_add_columns_spells_the_defined_type() -> None:
    assert (
        add_columns(SPAN_EVENTS, "received_at") == "ALTER TABLE span_events ADD COLUMN received_at TIMESTAMP;"
    )
    with pytest.raises(KeyError):
        add_columns(SPAN_EVENTS, "no_such_column")


def test_a_newer_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.duckdb"
    DuckDBStore(path).close()
    con = duckdb.connect(str(path))
    con.execute(
        "INSERT INTO ragpulse_schema VALUES (?, 'from the future', now()::TIMESTAMP)", [LATEST_VERSION + 1]
    )
    con.close()
    from collector.store import StoreError

    with pytest.raises(StoreError, match="newer than this ragpulse"):
        DuckDBStore(path)


def test_a_version_11_file_gains_the_user_column_and_the_sessions_view(tmp_path: Path) -> None:
    """Migrations 12 to 14: `traces.user_id` (null for rows stored before), and `sessions` over the
    rows already there (computed into `session_rollups` by 13): one row per session and service,
    its failed turn counted from ragpulse's own failing score only (a person's failing score makes
    no turn fail); the sessions already there are not given session-level scores (14)."""
    path = tmp_path / "v11.duckdb"
    con = file_at(path, 11)
    con.execute(
        "INSERT INTO traces (trace_id, service_name, session_id, start_time, end_time) VALUES "
        "('t1', 'shop', 's1', TIMESTAMP '2026-12-01 10:00:00', TIMESTAMP '2026-12-01 10:00:02'), "
        "('t2', 'shop', 's1', TIMESTAMP '2026-12-01 10:01:00', NULL), "
        "('t3', 'shop', NULL, TIMESTAMP '2026-12-01 10:02:00', NULL)"
    )
    con.execute(
        "INSERT INTO scores (trace_id, span_id, name, value, status, evaluator) VALUES "
        "('t1', 'a', 'faithfulness', 0.2, 'fail', 'deterministic'), "
        "('t2', 'a', 'faithfulness', 1.0, 'pass', 'judge'), "
        "('t2', 'b', 'helpful', 0.0, 'fail', 'human')"
    )
    con.close()
    with DuckDBStore(path) as store:
        version = store.query("SELECT max(version) FROM ragpulse_schema", 1, 5).rows
        users = store.query("SELECT trace_id, user_id FROM traces ORDER BY trace_id", 10, 5).rows
        sessions = store.query(
            "SELECT session_id, service_name, user_id, turns, started_at, last_activity, status, "
            "failed_turns, mean_score, score_means, score_fails FROM sessions",
            10,
            5,
        ).rows
        # Migration 14: the sessions stored before count as scored (not scored into old minutes).
        scored = store.query("SELECT session_id, turns FROM scored_sessions", 10, 5).rows
    assert version == [(LATEST_VERSION,)]
    assert users == [("t1", None), ("t2", None), ("t3", None)]
    assert scored == [("s1", 2)]
    assert sessions == [
        (
            "s1",
            "shop",
            None,
            2,
            datetime(2026, 12, 1, 10, 0),
            datetime(2026, 12, 1, 10, 1),  # the last turn has no end: its start
            "ended",
            1,
            pytest.approx(0.6),
            {"faithfulness": pytest.approx(0.6)},
            {"faithfulness": 1},
        )
    ]


def test_a_version_14_file_gains_score_versions_history_and_rescore_runs(tmp_path: Path) -> None:
    """Migration 15: `scores.evaluator_version` and `rescore_run` (null for rows stored before),
    `score_history` and `rescore_runs` empty, and `scores_all` showing the current scores."""
    path = tmp_path / "v14.duckdb"
    con = file_at(path, 14)
    con.execute(
        "INSERT INTO scores (trace_id, span_id, name, value, status, evaluator) VALUES "
        "('t1', 'a', 'faithfulness', 0.2, 'fail', 'deterministic')"
    )
    con.close()
    with DuckDBStore(path) as store:
        rows = store.query(
            "SELECT trace_id, name, evaluator_version, rescore_run, replaced_at, replaced_by FROM scores_all",
            10,
            5,
        ).rows
        empty = store.query(
            "SELECT (SELECT count(*) FROM score_history), (SELECT count(*) FROM rescore_runs)", 1, 5
        ).rows
    assert rows == [("t1", "faithfulness", None, None, None, None)]
    assert empty == [(0, 0)]
