"""The read-only SQL surface: `check_read_only`, the live `POST /api/sql`, and a file opened read-only.

Spans are sent to a real service over OTLP/JSON on loopback; every refused query is checked for a
400 with a clear message, and the stored spans are compared before and after.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from typing import Any

import duckdb
import httpx
import orjson
import pyarrow as pa
import pytest

from collector.service import BackgroundService, Service
from collector.store import ReadOnlyStore, StoreError
from collector.store.duckdb_connection import connect
from collector.store.duckdb_store import DuckDBStore
from collector.store.sql import QueryError, check_read_only, run_query
from tests.support.helpers import make_config, post_otlp, sql, trace_request_json
from tests.support.sql_escapes import REFUSED_WRITES, counting_http_server, file_queries

TRACE = "0af7651916cd43dd8448eb211c80319c"
ROOT, CHILD, GRANDCHILD = "b7ad6b7169203331", "00f067aa0ba902b7", "1111111111111111"
START = 1_700_000_000_123_456_000  # 2023-11-14T22:13:20.123456


def otlp_document() -> dict[str, Any]:
    def span(span_id: str, parent: str | None, name: str, offset_ms: int, **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "traceId": TRACE,
            "spanId": span_id,
            "name": name,
            "kind": 2,
            "startTimeUnixNano": str(START + offset_ms * 1_000_000),
            "endTimeUnixNano": str(START + (offset_ms + 250) * 1_000_000),
            **extra,
        }
        if parent:
            body["parentSpanId"] = parent
        return body

    return trace_request_json(
        [
            span(
                ROOT,
                None,
                "root",
                0,
                attributes=[
                    {"key": "rag.question", "value": {"stringValue": "why?"}},
                    {"key": "n", "value": {"intValue": "3"}},
                ],
            ),
            span(CHILD, ROOT, "retrieve", 10),
            span(GRANDCHILD, CHILD, "embed", 20, events=[{"timeUnixNano": str(START), "name": "ev"}]),
        ],
        "sqlsvc",
        "tests",
    )


def send_spans(svc: Service) -> None:
    response = post_otlp(svc, orjson.dumps(otlp_document()), "application/json")
    assert response.status_code == 200, response.text


def post_sql(svc: Service, query: str, **extra: Any) -> httpx.Response:
    return httpx.post(f"{svc.http_url}/api/sql", json={"query": query, **extra}, timeout=30)


def fingerprint(svc: Service) -> list[dict[str, Any]]:
    rows = sql(svc, "SELECT span_id, parent_span_id, name, attributes FROM spans ORDER BY span_id")
    assert [r["span_id"] for r in rows] == sorted([ROOT, CHILD, GRANDCHILD])
    return rows


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with BackgroundService(make_config(tmp_path_factory.mktemp("sqlsvc"))) as service:
        send_spans(service)
        yield service


@pytest.fixture
def http_target() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on loopback serving a CSV; the list records every request it gets."""
    with counting_http_server() as target:
        yield target


# ---------------------------------------------------------------- check_read_only


@pytest.mark.parametrize(
    "query",
    [
        "SELECT 1",
        "select * from spans where name = 'x';",
        "WITH a AS (SELECT 1 AS x) SELECT * FROM a",
        "FROM spans",
        "VALUES (1), (2)",
        "EXPLAIN SELECT * FROM spans",
        "EXPLAIN ANALYZE SELECT count(*) FROM spans",
        # DuckDB rewrites these into SELECTs over table functions, so they are read-only queries.
        "DESCRIBE spans",
        "SHOW spans",
        "SHOW TABLES",
        "SUMMARIZE spans",
        "PRAGMA version",
        "PRAGMA table_info('spans')",
    ],
)
def test_check_read_only_accepts_queries(query):
    assert check_read_only(query) == query
    assert duckdb.extract_statements(query)[0].type in (
        duckdb.StatementType.SELECT,
        duckdb.StatementType.EXPLAIN,
    )


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("INSERT INTO spans (trace_id, span_id) VALUES ('a', 'b')", "not INSERT"),
        ("UPDATE spans SET name = 'x'", "not UPDATE"),
        ("DELETE FROM spans", "not DELETE"),
        ("CREATE TABLE t (a INTEGER)", "not CREATE"),
        ("CREATE MACRO m() AS 1", "not CREATE"),
        ("DROP TABLE spans", "not DROP"),
        ("ALTER TABLE spans ADD COLUMN x INTEGER", "not ALTER"),
        ("ATTACH 'other.duckdb' AS other", "not ATTACH"),
        ("DETACH other", "not DETACH"),
        ("COPY spans TO 'out.csv'", "not COPY"),
        ("EXPORT DATABASE 'dump'", "not EXPORT"),
        ("INSTALL httpfs", "not LOAD"),
        ("LOAD httpfs", "not LOAD"),
        ("SET threads = 1", "not SET"),
        ("RESET threads", "not SET"),
        ("PRAGMA threads = 1", "not SET"),
        ("PRAGMA enable_profiling", "not PRAGMA"),
        ("PRAGMA force_checkpoint", "not PRAGMA"),
        ("CHECKPOINT", "not CALL"),
        ("CALL pragma_version()", "not CALL"),
        ("VACUUM", "not VACUUM"),
        ("BEGIN TRANSACTION", "not TRANSACTION"),
        ("SELECT 1; SELECT 2", "only one statement per query"),
        ("SELECT 1; DELETE FROM spans", "only one statement per query"),
        ("PIVOT spans ON kind", "only one statement per query"),
        ("", "empty query"),
        ("   \n\t", "empty query"),
        ("-- only a comment", "empty query"),
        ("SELEC 1", "invalid SQL: Parser Error: syntax error"),
        ("SELECT (", "invalid SQL"),
    ],
)
def test_check_read_only_refuses(query, message):
    with pytest.raises(QueryError) as caught:
        check_read_only(query)
    assert message in str(caught.value)
    if message.startswith("not "):
        assert str(caught.value).startswith("only read-only queries (SELECT, EXPLAIN) are allowed")


@pytest.mark.parametrize(
    "query",
    [
        "EXPLAIN ANALYZE DELETE FROM spans",
        "EXPLAIN ANALYZE INSERT INTO spans (trace_id, span_id) VALUES ('a', 'b')",
        "EXPLAIN ANALYZE UPDATE spans SET name = 'x'",
        "EXPLAIN ANALYZE DROP TABLE spans",
        "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1",
        "EXPLAIN (ANALYZE) DELETE FROM spans",
        "EXPLAIN (ANALYZE, FORMAT json) DELETE FROM spans",
        "/* c */ explain analyse delete from spans",
    ],
)
def test_check_read_only_refuses_explain_analyze_of_a_write(query):
    # EXPLAIN ANALYZE executes the statement it profiles: of a write, it writes.
    with pytest.raises(QueryError, match="read-only"):
        check_read_only(query)


# ---------------------------------------------------------------- live /api/sql


def test_live_describe_show_summarize_pragma(svc):
    described = sql(svc, "DESCRIBE spans")
    assert [r["column_name"] for r in described][:6] == [
        "trace_id",
        "span_id",
        "parent_span_id",
        "name",
        "kind",
        "service_name",
    ]
    assert {r["column_name"]: r["column_type"] for r in described}["attributes"] == "JSON"
    assert {r["name"] for r in sql(svc, "SHOW TABLES")} >= {"spans", "span_events"}
    summary = {r["column_name"]: r for r in sql(svc, "SUMMARIZE spans")}
    assert summary["name"]["count"] == 3
    assert summary["name"]["min"] == "embed"
    assert sql(svc, "PRAGMA version")[0]["library_version"] == f"v{duckdb.__version__}"
    plan = sql(svc, "EXPLAIN SELECT count(*) FROM spans")
    assert plan[0]["explain_key"] == "physical_plan"


@pytest.mark.parametrize("query", REFUSED_WRITES)
def test_live_writes_are_refused_and_spans_unchanged(svc, query):
    before = fingerprint(svc)
    response = post_sql(svc, query)
    after = fingerprint(svc)
    assert after == before
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert "only" in error


@pytest.mark.parametrize(
    "query", ["EXPLAIN ANALYZE DELETE FROM spans", "EXPLAIN ANALYZE UPDATE spans SET name = 'x'"]
)
def test_live_explain_analyze_of_a_write_is_refused_and_spans_unchanged(tmp_path, query):
    # Its own service: when the write goes through, it must not spoil the other tests' data.
    with BackgroundService(make_config(tmp_path)) as service:
        send_spans(service)
        before = fingerprint(service)
        response = post_sql(service, query)
        assert fingerprint(service) == before
        assert response.status_code == 400, response.text
        assert "read-only" in response.json()["error"]


def test_live_file_and_network_access_refused(svc, tmp_path, http_target):
    url, hits = http_target
    before = fingerprint(svc)
    for query, expected in file_queries(tmp_path, url):
        response = post_sql(svc, query)
        assert response.status_code == 400, (query, response.text)
        error = response.json()["error"]
        assert expected in error, (query, error)
        assert "root:" not in error
    assert hits == []
    assert fingerprint(svc) == before


def test_read_only_file_refuses_file_network_and_writes(tmp_path, http_target):
    url, hits = http_target
    path = tmp_path / "ro.duckdb"
    with BackgroundService(make_config(tmp_path, store={"path": str(path)})) as service:
        send_spans(service)
    con = connect(path, read_only=True)
    try:
        for query, expected in file_queries(tmp_path, url):
            with pytest.raises(QueryError) as caught:
                run_query(con, query, 100, 10)
            assert expected in str(caught.value), query
        # Beneath check_read_only, the connection itself refuses writes and re-enabling access.
        # (A write that needs no table: `spans` is a view since schema 10, refused for that first.)
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("CREATE TABLE stolen (a INTEGER)")
        with pytest.raises(duckdb.Error, match="Cannot enable external access"):
            con.execute("SET enable_external_access = true")
        with pytest.raises(QueryError, match="read-only"):
            run_query(con, "EXPLAIN ANALYZE DELETE FROM spans", 100, 10)
        result = run_query(con, "SELECT span_id FROM spans ORDER BY span_id", 100, 10)
        assert [r[0] for r in result.rows] == sorted([ROOT, CHILD, GRANDCHILD])
    finally:
        con.close()
    assert hits == []


def test_read_only_connect_missing_file(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        connect(tmp_path / "nope.duckdb", read_only=True)
    assert not (tmp_path / "nope.duckdb").exists()


# ---------------------------------------------------------------- limits


def test_row_limit_and_cap(tmp_path):
    with BackgroundService(make_config(tmp_path, sql={"max_rows": 8})) as service:
        response = post_sql(service, "SELECT range AS i FROM range(20)", max_rows=5)
        assert response.status_code == 200, response.text
        assert response.json() == [{"i": i} for i in range(5)]
        assert response.headers["X-Ragpulse-Truncated"] == "true"

        capped = post_sql(service, "SELECT range AS i FROM range(20)", max_rows=1000)
        assert capped.status_code == 200
        assert capped.json() == [{"i": i} for i in range(8)]
        assert capped.headers["X-Ragpulse-Truncated"] == "true"

        default = post_sql(service, "SELECT range AS i FROM range(20)")
        assert len(default.json()) == 8

        exact = post_sql(service, "SELECT range AS i FROM range(5)", max_rows=5)
        assert len(exact.json()) == 5
        assert "X-Ragpulse-Truncated" not in exact.headers

        for bad in (0, -1, "5", 1.5, None):
            refused = httpx.post(
                f"{service.http_url}/api/sql", json={"query": "SELECT 1", "max_rows": bad}, timeout=10
            )
            assert refused.status_code == 400, bad
            assert refused.json() == {"error": "max_rows must be a positive integer"}


def test_bad_request_bodies(svc):
    for body in (b"not json", b"[]", b'{"query": 5}', b'{"query": "  "}', b"{}"):
        response = httpx.post(f"{svc.http_url}/api/sql", content=body, timeout=10)
        assert response.status_code == 400, body
        assert response.json() == {"error": 'body must be JSON: {"query": "SELECT ..."}'}


def test_statement_timeout(tmp_path):
    with BackgroundService(make_config(tmp_path, sql={"timeout": 0.5})) as service:
        started = time.monotonic()
        response = post_sql(
            service, "SELECT sum(a.range * b.range) FROM range(10000000000) a CROSS JOIN range(10) b"
        )
        elapsed = time.monotonic() - started
        assert response.status_code == 400, response.text
        assert response.json() == {"error": "query exceeded the 0.5 s time limit"}
        assert elapsed < 5
        # The server still answers queries afterwards, on a fresh cursor.
        assert sql(service, "SELECT 42 AS x") == [{"x": 42}]


# ---------------------------------------------------------------- JSON output


def test_json_output_of_stored_spans(svc):
    rows = sql(
        svc,
        "SELECT span_id, parent_span_id, start_time, end_time, duration_ms, attributes, "
        "resource_attributes, status_message, links FROM spans ORDER BY start_time",
    )
    assert rows[0] == {
        "span_id": ROOT,
        "parent_span_id": None,
        "start_time": "2023-11-14T22:13:20.123456",
        "end_time": "2023-11-14T22:13:20.373456",
        "duration_ms": 250.0,
        "attributes": {"rag.question": "why?", "n": 3},
        "resource_attributes": {"service.name": "sqlsvc"},
        "status_message": None,
        "links": None,
    }
    assert [r["parent_span_id"] for r in rows] == [None, ROOT, CHILD]
    assert rows[2]["attributes"] == {}
    events = sql(svc, "SELECT span_id, time, name, attributes, source FROM span_events")
    assert events == [
        {
            "span_id": GRANDCHILD,
            "time": "2023-11-14T22:13:20.123456",
            "name": "ev",
            "attributes": {},
            "source": "otlp",
        }
    ]
    # JSON-typed expressions are parsed too; ->> gives text.
    assert sql(
        svc, "SELECT attributes->'n' AS n, attributes->>'rag.question' AS q FROM spans WHERE name = 'root'"
    ) == [{"n": 3, "q": "why?"}]


def test_json_output_of_value_types(svc):
    rows = sql(
        svc,
        "SELECT TIMESTAMP '2024-01-02 03:04:05.123456' AS t, DATE '2024-01-02' AS d, NULL AS n, "
        "NULL::JSON AS nj, '{\"a\": [1, null]}'::JSON AS j, '3'::JSON AS j3, [1, 2] AS l, {'x': 1} AS s, "
        "1.5::DECIMAL(4, 2) AS dec, INTERVAL 90 SECOND AS i, 'abc'::BLOB AS b, 'nan'::DOUBLE AS nan, "
        "'6ba7b810-9dad-11d1-80b4-00c04fd430c8'::UUID AS u",
    )
    assert rows == [
        {
            "t": "2024-01-02T03:04:05.123456",
            "d": "2024-01-02",
            "n": None,
            "nj": None,
            "j": {"a": [1, None]},
            "j3": 3,
            "l": [1, 2],
            "s": {"x": 1},
            "dec": 1.5,
            "i": 90.0,
            "b": "YWJj",
            "nan": None,
            "u": "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
        }
    ]


def test_json_output_of_timestamptz(svc):
    # now() and AT TIME ZONE give TIMESTAMP WITH TIME ZONE; a user must be able to select them.
    response = post_sql(svc, "SELECT TIMESTAMPTZ '2024-01-02 03:04:05+00' AS tz, now() IS NOT NULL AS ok")
    assert response.status_code == 200, response.text
    row = response.json()[0]
    assert row["ok"] is True
    assert dt.datetime.fromisoformat(row["tz"]) == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def test_store_queries_are_isolated_from_sql_errors(tmp_path):
    # A failing query runs on a cursor of its own and leaves the writer's connection usable.
    store = DuckDBStore(tmp_path / "iso.duckdb")
    try:
        with pytest.raises(QueryError):
            store.query("SELECT * FROM no_such_table", 10, 5)
        store.append_spans(
            pa.table({"trace_id": ["a"], "span_id": ["b"]}), pa.table({"trace_id": [], "span_id": []})
        )
        assert store.query("SELECT trace_id, span_id FROM spans", 10, 5).rows == [("a", "b")]
    finally:
        store.close()


def test_a_read_only_store_refuses_every_write(tmp_path):
    path = tmp_path / "ro-store.duckdb"
    DuckDBStore(path).close()
    store = DuckDBStore(path, read_only=True)
    empty = pa.table({"trace_id": pa.array([], pa.string()), "span_id": pa.array([], pa.string())})
    try:
        with pytest.raises(ReadOnlyStore):
            store.append_spans(empty, empty)
        with pytest.raises(ReadOnlyStore):
            store.write_cases(empty)
        assert store.query("SELECT count(*) FROM spans", 1, 5).rows == [(0,)]
    finally:
        store.close()
