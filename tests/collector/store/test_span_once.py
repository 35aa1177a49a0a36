"""A span is stored once, as users see it: an export delivered again (an OTLP client's retry of an
export the store had committed, a capture replayed twice) adds no second row to `spans` or
`span_events`, on the file and on a lake; the trace is assembled and scored once, and a delivery
that brings only copies of what its trace was assembled with is not assembled (nor scored) again.
The later copies stay in `received_spans` / `received_span_events`, which retention deletes.

The sender is the real OpenTelemetry SDK (its export captured and posted as bytes), the service a
real one on loopback, the lake a real PostgreSQL catalog (tests/support/postgres.py)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collector.replay import replay_to_server, replay_to_store
from collector.schema.span_records import first_copies, repeats_only
from collector.schema.tables import SPAN_KEY, SPANS
from collector.service import BackgroundService, Service
from collector.store import open_store
from collector.store.config import StoreConfig
from collector.store.duckdb_store import DuckDBStore
from collector.store.migrations import LATEST_VERSION
from collector.store.schema_sql import EVERY_RECEIVED_EVENT, span_events_view
from tests.support.helpers import (
    DEFAULT_SCORE_NAMES,
    drop_schema_15,
    emit_rag_request,
    key_values,
    make_config,
    metric,
    post_otlp,
    sql,
    wait_for,
)
from tests.support.postgres import PostgresServer

QUESTION = "How long do I have to return an item?"
POLICY = "Items can be returned within 30 days of delivery for a full refund."
ANSWER = "Items can be returned within 30 days of delivery for a full refund."
PROTOBUF = "application/x-protobuf"


def capture(path: Path) -> tuple[str, str]:
    """One RAG request of 3 spans, the root with an event, as the SDK exports it, written to `path`
    as a protobuf capture (what `ragpulse replay` reads). Returns the trace id and the root's id."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop-bot"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace_id = emit_rag_request(
        provider.get_tracer("test-app"),
        QUESTION,
        POLICY,
        ANSWER,
        lambda: trace.get_current_span().add_event("cache.miss", {"key": "refunds"}),
    )
    spans = exporter.get_finished_spans()
    path.write_bytes(encode_spans(spans).SerializeToString())
    (root,) = [span for span in spans if span.parent is None]
    return trace_id, format(root.context.span_id, "016x")


def log_event(trace_id: str, span_id: str) -> bytes:
    """A GenAI event sent as a log record of the span, with its own time (the same every time)."""
    request = ExportLogsServiceRequest()
    record = request.resource_logs.add().scope_logs.add().log_records.add()
    record.time_unix_nano = 1_760_000_000_000_000_000
    record.trace_id, record.span_id = bytes.fromhex(trace_id), bytes.fromhex(span_id)
    record.event_name = "gen_ai.choice"
    record.attributes.extend(key_values({"index": 0}))
    return request.SerializeToString()


def post(service: Service, body: bytes, signal: str = "traces") -> None:
    response = post_otlp(service, body, PROTOBUF, signal=signal)
    assert response.status_code == 200, response.text


def one(service: Service, query: str) -> Any:
    (row,) = sql(service, query)
    return next(iter(row.values()))


def assembled(service: Service, trace_id: str) -> list[dict[str, Any]]:
    """The `traces` row of this trace, once it is written."""
    query = (
        "SELECT trace_id, span_count, assembly_count, assembly_reason FROM traces "
        f"WHERE trace_id = '{trace_id}'"
    )
    return wait_for(lambda: sql(service, query), what=f"the assembly of {trace_id}")


@pytest.mark.parametrize("backend", ["file", "lake"])
def test_a_trace_delivered_four_times_is_stored_assembled_and_scored_once(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Posted twice at once (a client's retry before its trace was assembled), then the capture
    replayed twice after the assembly, its log event posted again with it: `spans` and
    `span_events` show each row once; one assembly, of 3 spans, and its scores untouched."""
    store: dict[str, Any] = {}
    if backend == "lake":
        store = {**request.getfixturevalue("postgres").new_lake(tmp_path), "replica": "r1"}
    config = make_config(
        tmp_path,
        store=store,
        assembler={"decision_wait": 1.0, "poll_interval": 0.05, "batch_wait": 0.1},
    )
    path = tmp_path / "capture.pb"
    trace_id, root_id = capture(path)
    body = path.read_bytes()
    this = f"WHERE trace_id = '{trace_id}'"
    with BackgroundService(config) as service:
        post(service, log_event(trace_id, root_id), "logs")
        post(service, body)
        post(service, body)
        first = assembled(service, trace_id)
        scores = sql(service, f"SELECT name, created_at, revision FROM scores {this} ORDER BY name")
        assert first == [
            {"trace_id": trace_id, "span_count": 3, "assembly_count": 1, "assembly_reason": "complete"}
        ]
        assert {s["name"] for s in scores} == DEFAULT_SCORE_NAMES

        for _ in range(2):
            report = replay_to_server([path], service.http_url)
            assert (report.accepted, report.rejected) == (3, 0)
        post(service, log_event(trace_id, root_id), "logs")
        # A trace sent after the copies is assembled after their trace was taken up again (or not).
        sentinel, _ = capture(tmp_path / "sentinel.pb")
        post(service, (tmp_path / "sentinel.pb").read_bytes())
        assembled(service, sentinel)

        assert one(service, f"SELECT count(*) AS n FROM received_spans {this}") == 12
        spans = sql(service, f"SELECT count(*) AS n, count(DISTINCT span_id) AS ids FROM spans {this}")
        assert spans == [{"n": 3, "ids": 3}]
        events = sql(
            service,
            f"SELECT span_id, name, source FROM span_events {this} AND source <> 'ragpulse' ORDER BY name",
        )
        assert events == [
            {"span_id": root_id, "name": "cache.miss", "source": "otlp"},
            {"span_id": root_id, "name": "gen_ai.choice", "source": "log"},
        ]
        assert one(service, f"SELECT count(*) AS n FROM received_span_events {this}") == 6
        # The copies came after the assembly: not assembled, not scored again.
        assert assembled(service, trace_id) == first
        assert sql(service, f"SELECT name, created_at, revision FROM scores {this} ORDER BY name") == scores
        assert metric(service, "ragpulse_traces_assembled_total", reason="late_span") == 0
        assert metric(service, "ragpulse_traces_assembled_total", reason="complete") == 2
        # One write-back event per score, as before.
        writeback = f"SELECT count(*) AS n FROM span_events {this} AND source = 'ragpulse'"
        assert one(service, writeback) == len(scores)


def test_a_capture_replayed_twice_into_a_file_is_assembled_once(tmp_path: Path) -> None:
    """`ragpulse replay --db` twice: the second run stores the copies, and its assembly of what the
    file holds finds nothing new (the later rows are copies), so nothing is assembled or scored."""
    path = tmp_path / "capture.pb"
    trace_id, _ = capture(path)
    config = make_config(tmp_path)
    first = replay_to_store([path], config)
    second = replay_to_store([path], config)
    assert (first.accepted, first.traces, second.accepted, second.traces) == (3, 1, 3, 0)
    with DuckDBStore(config.store.path) as store:
        rows = store.query("SELECT trace_id, span_count, assembly_count FROM traces", 10, 10).rows
        spans = store.query("SELECT count(*), count(DISTINCT span_id) FROM spans", 1, 10).rows
        received = store.query("SELECT count(*) FROM received_spans", 1, 10).rows
        events = store.query("SELECT name FROM span_events WHERE source <> 'ragpulse'", 10, 10).rows
        assert store.pending_trace_ids() == []
    assert rows == [(trace_id, 3, 1)]
    assert (spans, received, events) == ([(3, 3)], [(6,)], [("cache.miss",)])


def test_retention_deletes_every_copy_of_a_trace(tmp_path: Path) -> None:
    """Retention works on the stored rows: deleting a trace deletes its copies too, and its count of
    deleted spans is of rows deleted."""
    path = tmp_path / "capture.pb"
    trace_id, _ = capture(path)
    config = make_config(tmp_path, assembler={"enabled": False})
    for _ in range(2):
        replay_to_store([path], config)
    with DuckDBStore(config.store.path) as store:
        assert store.count_traces() == 1
        assert store.oldest_traces(10) == [trace_id]
        deleted = store.delete_traces([trace_id])
        left = store.query(
            "SELECT (SELECT count(*) FROM received_spans) + (SELECT count(*) FROM received_span_events)",
            1,
            10,
        ).rows
    assert (deleted.traces, deleted.spans, deleted.rows["received_span_events"]) == (1, 6, 2)
    assert left == [(0,)]


def test_a_lake_of_schema_9_keeps_its_rows_and_shows_each_span_once(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """Migration 10 on a lake: `spans` (a table until then) keeps its rows under its new name, and
    the views show the first stored copy of each span and event."""
    lake = {**postgres.new_lake(tmp_path), "replica": "r1"}
    with open_store(StoreConfig.model_validate(lake)) as store, store._cursor() as con:
        # The lake as schema 9 left it.
        con.execute("DROP VIEW spans")
        con.execute("ALTER TABLE received_spans RENAME TO spans")
        con.execute(span_events_view(EVERY_RECEIVED_EVENT))
        # (and without what schemas 11 to 15 added)
        drop_schema_15(con)
        con.execute("DROP TABLE feedback")
        con.execute("DROP TABLE annotations")
        con.execute("DROP VIEW sessions")
        con.execute("DROP TABLE session_rollups")
        con.execute("DROP TABLE scored_sessions")
        dropped = (
            ("traces", "response_ids"),
            ("scores", "source"),
            ("scores", "feedback_id"),
            ("traces", "user_id"),
            ("scores", "level"),
        )
        for table, column in dropped:
            con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        con.execute("DELETE FROM ragpulse_schema WHERE version >= 10")
        for name in ("first", "again"):
            con.execute(
                "INSERT INTO spans (trace_id, span_id, name, received_at) VALUES "
                f"('t1', 's1', '{name}', now()::TIMESTAMP), ('t1', 's2', '{name}-2', now()::TIMESTAMP)"
            )
            con.execute(
                "INSERT INTO received_span_events (trace_id, span_id, time, name, attributes, source) VALUES "
                "('t1', 's1', TIMESTAMP '2026-12-01 10:00:01', 'retry', '{\"n\": 1}', 'otlp')"
            )
    with open_store(StoreConfig.model_validate(lake)) as store:
        version = store.query("SELECT max(version) FROM ragpulse_schema", 1, 10).rows
        spans = store.query("SELECT span_id, name FROM spans ORDER BY span_id", 10, 10).rows
        events = store.query("SELECT name, source FROM span_events", 10, 10).rows
        stored = store.query("SELECT count(*) FROM received_spans", 1, 10).rows
        read, read_events = store.read_spans(["t1"])
    assert version == [(LATEST_VERSION,)]
    assert spans == [("s1", "first"), ("s2", "first-2")]
    assert events == [("retry", "otlp")] and stored == [(4,)]
    assert sorted(read["name"].to_pylist()) == ["first", "first-2"] and read_events.num_rows == 1


# ------------------------------------------------------------------------------ the rows' copies

T0 = datetime(2026, 12, 1, 10, 0, 0)


def spans_table(rows: list[tuple[str, str, str, datetime]]) -> pa.Table:
    """(trace id, span id, name, received at) rows."""
    trace_ids, span_ids, names, received = (list(column) for column in zip(*rows, strict=True))
    return SPANS.arrow_table(
        {"trace_id": trace_ids, "span_id": span_ids, "name": names, "received_at": received}, len(rows)
    )


def test_first_copies_keep_the_first_row_of_each_key_in_order() -> None:
    spans = spans_table(
        [("t1", "a", "first", T0), ("t1", "b", "b", T0), ("t1", "a", "again", T0), ("t2", "a", "other", T0)]
    )
    assert first_copies(spans, SPAN_KEY)["name"].to_pylist() == ["first", "b", "other"]
    unique = spans.slice(0, 2)
    assert first_copies(unique, SPAN_KEY) is unique  # nothing repeated: the same table back


def test_late_rows_that_only_repeat_stored_rows_are_told_apart_from_new_ones() -> None:
    """A late row repeats when the store's first copy of its key is another row (received at
    another time); a row that is itself the first copy, or has none, is new."""
    later = T0 + timedelta(seconds=5)
    stored = spans_table(
        [("t1", "a", "a", T0), ("t1", "b", "b", T0), ("t2", "a", "a", T0), ("t3", "c", "c", later)]
    )
    late = spans_table(
        [
            ("t1", "a", "a", later),
            ("t1", "b", "b", later),
            ("t2", "a", "a", later),
            ("t2", "z", "z", later),
            ("t3", "c", "c", later),
        ]
    )
    assert repeats_only((late, None), (stored, None)) == {"t1"}
    events = pa.table(
        {
            "trace_id": ["t1"],
            "span_id": ["a"],
            "time": pa.array([T0], pa.timestamp("ns")),
            "name": ["retry"],
            "attributes": ['{"n":1}'],
            "received_at": pa.array([later], pa.timestamp("ns")),
        }
    )
    # An event never stored before makes its trace's late rows new; its stored copy does not.
    assert repeats_only((late, events), (stored, None)) == set()
    first_event = events.set_column(5, "received_at", pa.array([T0], pa.timestamp("us")))
    assert repeats_only((late, events), (stored, first_event.cast(first_event.schema))) == {"t1"}


def test_the_start_up_recovery_takes_only_what_was_received_before_the_start(tmp_path: Path) -> None:
    """Spans received after the assembler started are assembled as they come, not taken up early by
    its start-up recovery as `recovery` (a lake's slow first query let them in: a flaky test)."""
    from collector.schema.windows import utc_now
    from tests.support.helpers import named_spans_batch

    with DuckDBStore(tmp_path / "r.duckdb") as store:
        started = utc_now()
        batch = named_spans_batch(["after the start"])
        store.append_spans(batch.spans, batch.events)
        trace_id = batch.spans["trace_id"][0].as_py()
        assert store.pending_trace_ids(received_before=started) == []
        assert store.pending_trace_ids() == [trace_id]  # after an outage: everything stored counts
