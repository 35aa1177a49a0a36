"""The limits of the SQL surface (docs/security.md#the-sql-surface), through a real service on
loopback: `sql.max_bytes` (refused before the answer is built), `sql.memory_limit` (the watchdog),
`sql.max_concurrent`, JSON for every DuckDB type (never a 500), spans acknowledged while a heavy
query runs, and `ragpulse sql --db` / `--server` answering alike.
"""

from __future__ import annotations

import decimal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.service import BackgroundService, Service
from collector.store import sql as sql_module
from collector.store.sql import QueryError, SqlConfig, parse_bytes, run_query, to_jsonable, user_sql
from tests.support.helpers import make_config, post_otlp, run_ragpulse, sql, trace_request_json, wait_for
from tests.support.postgres import PostgresServer

MAX_BYTES = 100_000
TOO_LARGE = f"the result is larger than sql.max_bytes ({MAX_BYTES} bytes); select fewer rows or columns"
MEMORY_ERROR = (
    "the query used more than sql.memory_limit ({}): the service's memory grew by more than that "
    "while it ran; select less, or aggregate in the query"
)
U128 = "340282366920938463463374607431768211455"  # the largest UHUGEINT
# Seconds of CPU on any machine: DuckDB cannot shortcut it (a sum over a cross join).
HEAVY = "SELECT sum(a.range * b.range) FROM range(10000000000) a CROSS JOIN range(10) b"


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    config = make_config(tmp_path_factory.mktemp("limits"), sql={"max_bytes": MAX_BYTES})
    with BackgroundService(config) as service:
        yield service


def post_sql(target: Service, query: str, timeout: float = 30) -> httpx.Response:
    return httpx.post(f"{target.http_url}/api/sql", json={"query": query}, timeout=timeout)


# ---------------------------------------------------------------- sql.max_bytes


@pytest.mark.parametrize(
    "query",
    [
        "SELECT repeat('x', 200000)",  # one value
        "SELECT repeat('x', 1000) || range FROM range(200)",  # rows that add up
        "SELECT range AS i, range * 2 AS j FROM range(10000)",  # small values, many of them
        "SELECT [repeat('x', 60000), repeat('y', 60000)]",  # inside a list
        "SELECT {'a': repeat('x', 200000)}",  # a struct field
        "SELECT MAP {repeat('k', 200000): 1}",  # a map key
        "SELECT repeat('x', 200000)::BLOB",  # bytes
        "SELECT repeat(chr(1), 20000)",  # 20 KB of text, 120 KB of JSON (\u0001 each)
    ],
)
def test_a_result_over_max_bytes_is_refused(svc, query):
    response = post_sql(svc, query)
    assert response.status_code == 400, response.text[:200]
    assert response.json() == {"error": TOO_LARGE}


def test_the_reported_query_is_refused_without_growing_the_service_by_gigabytes(svc):
    # 20 rows of 100 MB: 2 GB of answer, 8.4 GB of memory before. DuckDB folds the constant while
    # planning (copies of 100 MB beyond its own accounting), so the watchdog is the first to stop it
    # on most machines; the size check would refuse the first row.
    response = post_sql(svc, "SELECT repeat('x', 100000000) FROM range(20)")
    assert response.status_code == 400
    assert response.json()["error"] in (TOO_LARGE, MEMORY_ERROR.format("512MB"))


def test_max_bytes_is_the_size_of_the_json_answer(svc):
    # [{"s":"x...x"}] is 10 bytes plus the value: exactly max_bytes passes, one more byte does not.
    fits = post_sql(svc, f"SELECT repeat('x', {MAX_BYTES - 10}) AS s")
    assert fits.status_code == 200
    assert len(fits.content) == MAX_BYTES
    assert fits.json() == [{"s": "x" * (MAX_BYTES - 10)}]
    over = post_sql(svc, f"SELECT repeat('x', {MAX_BYTES - 9}) AS s")
    assert over.status_code == 400
    assert over.json() == {"error": TOO_LARGE}


def test_rows_under_max_bytes_are_answered_whole_and_the_row_cap_still_applies(svc):
    response = post_sql(svc, "SELECT repeat('x', 1000) || range AS s FROM range(90)")
    assert response.status_code == 200
    assert [r["s"] for r in response.json()] == ["x" * 1000 + str(i) for i in range(90)]
    # max_rows cuts first: the rows past it are neither computed nor counted.
    capped = httpx.post(
        f"{svc.http_url}/api/sql",
        json={"query": "SELECT repeat('x', 1000) AS s FROM range(1000000)", "max_rows": 5},
        timeout=30,
    )
    assert capped.status_code == 200
    assert len(capped.json()) == 5
    assert capped.headers["X-Ragpulse-Truncated"] == "true"


def test_ragpulse_own_queries_are_not_held_to_max_bytes():
    # The dashboard and the monitors run their own queries outside `user_sql`.
    con = duckdb.connect()
    try:
        result = run_query(con.cursor(), "SELECT repeat('x', 1000) FROM range(200)", 1000, 10)
        assert len(result.rows) == 200
        with user_sql(SqlConfig(max_bytes=MAX_BYTES)), pytest.raises(QueryError, match=r"sql\.max_bytes"):
            run_query(con.cursor(), "SELECT repeat('x', 1000) FROM range(200)", 1000, 10)
    finally:
        con.close()


# ---------------------------------------------------------------- sql.memory_limit


class _Cursor:
    """Stands for a DuckDB cursor: records that the watchdog interrupted it."""

    def __init__(self) -> None:
        self.interrupted = threading.Event()

    def interrupt(self) -> None:
        self.interrupted.set()


def test_the_watchdog_interrupts_when_memory_grows_past_the_limit(monkeypatch):
    sizes = iter(range(0, 10**9, 10_000))  # resident memory growing 10 kB a look
    monkeypatch.setattr(sql_module, "_rss_bytes", lambda: next(sizes))
    cursor = _Cursor()
    with sql_module._Watchdog(cursor, timeout=30, memory_limit=50_000) as watchdog:  # type: ignore[arg-type]
        assert cursor.interrupted.wait(5)
    assert watchdog.tripped == "memory"


def test_the_watchdog_interrupts_at_the_time_limit_and_not_after_the_query():
    cursor = _Cursor()
    with sql_module._Watchdog(cursor, timeout=0.05, memory_limit=None) as watchdog:  # type: ignore[arg-type]
        assert cursor.interrupted.wait(5)
    assert watchdog.tripped == "time"
    done = _Cursor()
    with sql_module._Watchdog(done, timeout=0.2, memory_limit=10**12) as watchdog:  # type: ignore[arg-type]
        pass
    time.sleep(0.3)
    assert not done.interrupted.is_set()
    assert watchdog.tripped is None


def test_a_query_using_more_than_memory_limit_is_stopped(tmp_path):
    # DuckDB folds this constant while it plans, outside its own memory accounting: only the
    # watchdog sees the service grow (a few copies of 200 MB), and interrupts it.
    config = make_config(tmp_path, sql={"memory_limit": "64MB", "max_bytes": 2**30})
    with BackgroundService(config) as service:
        response = post_sql(service, "SELECT repeat('x', 200000000) AS s")
        assert response.status_code == 400
        assert response.json() == {"error": MEMORY_ERROR.format("64MB")}
        assert sql(service, "SELECT 42 AS x") == [{"x": 42}]


def test_memory_limit_and_sizes_in_config():
    assert parse_bytes("512MB") == 512_000_000
    assert parse_bytes("1GiB") == 2**30
    assert parse_bytes("1.5 kb") == 1500
    assert parse_bytes(4096) == 4096
    assert SqlConfig().memory_limit_bytes == 512_000_000
    assert SqlConfig(memory_limit=None).memory_limit_bytes is None
    for bad in ("lots", "12 parsecs", "-1MB", "0"):
        with pytest.raises(ValueError, match="memory_limit"):
            SqlConfig(memory_limit=bad)
    with pytest.raises(ValueError, match="max_bytes"):
        SqlConfig(max_bytes=0)


# ---------------------------------------------------------------- JSON of every type


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("170141183460469231731687303715884105727::HUGEINT", "170141183460469231731687303715884105727"),
        ("(-170141183460469231731687303715884105728)::HUGEINT", "-170141183460469231731687303715884105728"),
        (f"{U128}::UHUGEINT", U128),
        ("42::HUGEINT", 42),
        ("18446744073709551615::UBIGINT", 18446744073709551615),
        ("'123456789012345678901234567890'::VARINT", "123456789012345678901234567890"),
        ("12345678901234567890123456789.123456789::DECIMAL(38,9)", "12345678901234567890123456789.123456789"),
        ("1.5::DECIMAL(4,2)", 1.5),
        ("123456789012.345::DECIMAL(18,3)", 123456789012.345),
        ("INTERVAL '1 year 2 months 3 days 04:05:06.789'", (14 * 30 + 3) * 86400 + 4 * 3600 + 5 * 60 + 6.789),
        ("'6ba7b810-9dad-11d1-80b4-00c04fd430c8'::UUID", "6ba7b810-9dad-11d1-80b4-00c04fd430c8"),
        ("'0101'::BIT", "0101"),
        ("'b'::ENUM('a', 'b')", "b"),
        ("MAP {'k': 1, 'j': 2}", {"k": 1, "j": 2}),
        ("MAP {1: 'a', 2: 'b'}", {"1": "a", "2": "b"}),
        (f"MAP {{[1, 2]: {U128}::UHUGEINT}}", {"[1,2]": U128}),
        ("union_value(num := 2)::UNION(num INTEGER, str VARCHAR)", 2),
        ("union_value(h := 2::HUGEINT)::UNION(h HUGEINT, str VARCHAR)", "2"),
        ("'12:34:56+02'::TIMETZ", "12:34:56+02:00"),
        ("'12:34:56.123456789'::TIME_NS", "12:34:56.123456"),
        ("'\\xAA\\xBB'::BLOB", "qrs="),
        ("'infinity'::TIMESTAMP", "infinity"),
        ("'-infinity'::DATE", "-infinity"),
        ("'294000-01-01'::TIMESTAMP", "294000-01-01 00:00:00"),
        ("'2024-01-02 03:04:05.123456789'::TIMESTAMP_NS", "2024-01-02T03:04:05.123456"),
        ("'2024-01-02 03:04:05.5'::TIMESTAMP", "2024-01-02T03:04:05.500000"),
        ("'2024-01-02 03:04:05+00'::TIMESTAMPTZ", "2024-01-02T03:04:05+00:00"),
        (f"[1::UHUGEINT, NULL, {U128}::UHUGEINT]", [1, None, U128]),
        (
            "{'a b': 2::HUGEINT, 'c': INTERVAL 1 DAY, 'd': TIMESTAMP '2024-01-01'}",
            {"a b": 2, "c": 86400.0, "d": "2024-01-01T00:00:00"},
        ),
        ("[TIMESTAMP '2024-01-01', 'infinity']", ["2024-01-01T00:00:00", "infinity"]),
        ("[1, 2, 3]::INTEGER[3]", [1, 2, 3]),
        ("ROW(1, 2::HUGEINT, DATE '2024-01-02')", [1, 2, "2024-01-02"]),
        ("'{\"a\": [1, null]}'::JSON", {"a": [1, None]}),
        ("'nan'::DOUBLE", None),
        ("'inf'::FLOAT", None),
        ("'POINT (1 2)'::GEOMETRY", "POINT (1 2)"),
    ],
)  # fmt: skip
def test_each_type_as_json(svc, expression, expected):
    response = post_sql(svc, f"SELECT {expression} AS v")
    assert response.status_code == 200, response.text
    assert response.json() == [{"v": expected}]


def test_the_reported_hugeint_sum_is_text(svc):
    # sum() over BIGINT is a HUGEINT: beyond 64 bits it is text, within them a number as before.
    response = post_sql(svc, "SELECT sum(range) AS s FROM range(20000000000, 20000000003)")
    assert response.status_code == 200, response.text
    assert response.json() == [{"s": 60000000003}]
    big = post_sql(svc, "SELECT 9223372036854775807::HUGEINT * 4 AS s")
    assert big.json() == [{"s": str(9223372036854775807 * 4)}]


def test_every_duckdb_type_at_its_limits_is_answered(svc):
    # DuckDB's own sampler: the smallest, the largest and a null value of every type it has.
    response = post_sql(svc, "SELECT * FROM test_all_types()")
    assert response.status_code == 200, response.text
    rows = response.json()
    assert len(rows) == 3
    assert rows[1]["uhugeint"] == U128
    assert rows[1]["timestamp"] == "294247-01-10 04:00:54.775806"
    assert rows[1]["time"] == "24:00:00"
    assert all(value is None for value in rows[2].values())


INTEGERS = {
    "HUGEINT": st.integers(-(2**127), 2**127 - 1),
    "UHUGEINT": st.integers(0, 2**128 - 1),
    "BIGINT": st.integers(-(2**63), 2**63 - 1),
    "UBIGINT": st.integers(0, 2**64 - 1),
}


def expected_integer(value: int) -> int | str:
    return value if -(2**63) <= value <= 2**64 - 1 else str(value)


def expected_decimal(value: decimal.Decimal) -> float | str:
    return float(value) if len(value.as_tuple().digits) <= 15 else format(value, "f")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    integers=st.fixed_dictionaries({k: st.lists(v, min_size=1, max_size=3) for k, v in INTEGERS.items()}),
    scale=st.integers(0, 38),
    unscaled=st.integers(-(10**38) + 1, 10**38 - 1),
    months=st.integers(-(10**5), 10**5),
    days=st.integers(-(10**5), 10**5),
    micros=st.integers(-(10**15), 10**15),
)
def test_numbers_and_intervals_as_json(svc, integers, scale, unscaled, months, days, micros):
    value = decimal.Decimal(unscaled).scaleb(-scale, decimal.Context(prec=40))
    columns = [
        f"[{', '.join(f'({n})::{kind}' for n in values)}] AS {kind.lower()}"
        for kind, values in integers.items()
    ]
    columns.append(f"'{value:f}'::DECIMAL(38, {scale}) AS dec")
    columns.append(f"to_months({months}) + to_days({days}) + to_microseconds({micros}) AS iv")
    response = post_sql(svc, "SELECT " + ", ".join(columns))
    assert response.status_code == 200, response.text
    row = response.json()[0]
    for kind, values in integers.items():
        assert row[kind.lower()] == [expected_integer(n) for n in values]
    assert row["dec"] == expected_decimal(value)
    assert row["iv"] == pytest.approx((months * 30 + days) * 86400 + micros / 1e6)


ALL_TYPES = duckdb.sql("SELECT * FROM test_all_types()").columns
NESTINGS = [
    "{}",
    "[{}]",
    "[[{}], NULL]",
    "{{'k': {}, 'n': 1}}",
    "MAP {{1: {}}}",
    "ROW({}, 1)",
    "[{{'a': [{}]}}]",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column=st.sampled_from(ALL_TYPES), nesting=st.sampled_from(NESTINGS))
def test_every_type_nested_anywhere_is_answered(svc, column, nesting):
    # The smallest, largest and null value of each DuckDB type, inside lists, structs and maps.
    quoted = f'"{column}"'  # union, map, struct: keywords
    response = post_sql(svc, f"SELECT {nesting.format(quoted)} AS v FROM test_all_types()")
    assert response.status_code == 200, response.text
    assert len(response.json()) == 3


def test_to_jsonable_rules():
    assert to_jsonable(2**64 - 1) == 2**64 - 1
    assert to_jsonable(2**64) == str(2**64)
    assert to_jsonable(-(2**63) - 1) == str(-(2**63) - 1)
    assert to_jsonable(True) is True
    assert to_jsonable(decimal.Decimal("1E+30")) == 1e30  # one significant digit: a double holds it
    assert to_jsonable(decimal.Decimal("1234567890.12345")) == 1234567890.12345
    assert to_jsonable(decimal.Decimal("1234567890.123456")) == "1234567890.123456"
    assert to_jsonable({(1, 2): 3, 4: [2**70]}) == {"[1,2]": 3, "4": [str(2**70)]}
    orjson.dumps(to_jsonable({"k": [2**100, decimal.Decimal("0.1234567890123456789")]}))


# ---------------------------------------------------------------- ingest beside a heavy query


def test_spans_are_acknowledged_and_stored_while_a_heavy_query_runs(tmp_path):
    config = make_config(tmp_path, sql={"timeout": 3})
    with BackgroundService(config) as service:
        heavy: dict[str, Any] = {}

        def run_heavy() -> None:
            heavy["started"] = time.monotonic()
            heavy["response"] = post_sql(service, HEAVY)
            heavy["ended"] = time.monotonic()

        thread = threading.Thread(target=run_heavy)
        thread.start()
        time.sleep(0.5)  # the query is planned and running on every DuckDB thread
        acks = []
        for i in range(5):
            span = {
                "traceId": f"{i + 1:032x}",
                "spanId": f"{i + 1:016x}",
                "name": f"during-heavy-{i}",
                "startTimeUnixNano": "1700000000000000000",
                "endTimeUnixNano": "1700000000100000000",
            }
            sent = time.monotonic()
            response = post_otlp(
                service, orjson.dumps(trace_request_json([span], "busy", "tests")), "application/json"
            )
            acks.append((response.status_code, time.monotonic() - sent, time.monotonic()))
        thread.join(30)
        assert [status for status, _, _ in acks] == [200] * 5
        assert max(took for _, took, _ in acks) < 1.0, acks
        # Every acknowledgement came while the heavy query was still running.
        assert all(at < heavy["ended"] for _, _, at in acks), (acks, heavy)
        assert heavy["response"].status_code == 400
        assert heavy["response"].json() == {"error": "query exceeded the 3 s time limit"}
        wait_for(lambda: len(sql(service, "SELECT span_id FROM spans WHERE service_name = 'busy'")) == 5)


def test_user_queries_take_turns_beyond_max_concurrent(tmp_path):
    config = make_config(tmp_path, sql={"timeout": 1, "max_concurrent": 1})
    with BackgroundService(config) as service:
        ended: dict[str, float] = {}
        answers: dict[str, httpx.Response] = {}

        def run(name: str, query: str) -> None:
            answers[name] = post_sql(service, query)
            ended[name] = time.monotonic()

        first = threading.Thread(target=run, args=("heavy", HEAVY))
        first.start()
        time.sleep(0.3)
        light_started = time.monotonic()
        run("light", "SELECT 42 AS x")
        first.join(30)
        assert answers["heavy"].json() == {"error": "query exceeded the 1 s time limit"}
        assert answers["light"].json() == [{"x": 42}]
        # The light query waited for the heavy one's turn (its 1 s limit, 0.7 s of it left): alone it
        # takes milliseconds. (Comparing the two threads' end times failed by 0.9 ms on a busy machine:
        # the heavy thread noted its answer after the light one.)
        assert ended["light"] - light_started >= 0.5


# ---------------------------------------------------------------- ragpulse sql: the same limits and JSON


def test_cli_on_the_file_and_through_the_server_gives_the_same_json_and_limits(tmp_path: Path):
    db = tmp_path / "cli.duckdb"
    config_file = tmp_path / "ragpulse.yaml"
    config_file.write_text(f"store: {{path: {db}}}\nsql: {{max_bytes: 1000}}\n")
    typed = "SELECT 340282366920938463463374607431768211455::UHUGEINT AS u, 7::HUGEINT AS h, '0101'::BIT AS b"
    large = "SELECT repeat('x', 5000) AS s"
    with BackgroundService(make_config(tmp_path, store={"path": str(db)}, sql={"max_bytes": 1000})) as server:
        via_server = run_ragpulse("sql", typed, "--server", server.http_url, "--format", "json", cwd=tmp_path)
        refused_server = run_ragpulse("sql", large, "--server", server.http_url, cwd=tmp_path)
    on_file = run_ragpulse(
        "sql", typed, "--db", str(db), "--config", str(config_file), "--format", "json", cwd=tmp_path
    )
    refused_file = run_ragpulse("sql", large, "--db", str(db), "--config", str(config_file), cwd=tmp_path)
    expected = [{"u": "340282366920938463463374607431768211455", "h": 7, "b": "0101"}]
    assert via_server.returncode == 0, via_server.stderr
    assert orjson.loads(via_server.stdout) == expected
    assert on_file.returncode == 0, on_file.stderr
    assert orjson.loads(on_file.stdout) == expected
    for refused in (refused_server, refused_file):
        assert refused.returncode == 1
        assert refused.stderr.strip() == (
            "Error: the result is larger than sql.max_bytes (1000 bytes); select fewer rows or columns"
        )


# ---------------------------------------------------------------- the same on a lake


def test_sql_limits_and_json_on_a_lake(postgres: PostgresServer, tmp_path: Path):
    # A lake's user queries run on its reader (a DuckDB of their own, read-only on the catalog).
    catalog = postgres.create_database(f"lake_{uuid.uuid4().hex[:10]}")
    store = {"backend": "ducklake", "catalog": catalog, "data_path": f"{tmp_path}/lake/", "replica": "r1"}
    config = make_config(tmp_path, store=store, sql={"max_bytes": MAX_BYTES, "timeout": 1})
    with BackgroundService(config) as service:
        typed = post_sql(service, f"SELECT {U128}::UHUGEINT AS u, count(*) AS n FROM spans")
        assert typed.status_code == 200, typed.text
        assert typed.json() == [{"u": U128, "n": 0}]
        large = post_sql(service, "SELECT repeat('x', 1000) || range FROM range(200)")
        assert large.json() == {"error": TOO_LARGE}
        slow = post_sql(service, HEAVY)
        assert slow.json() == {"error": "query exceeded the 1 s time limit"}
