"""`collector.client.Client` against a running service fed by the example app (healthy and degraded
traces, every one judged): SQL as Arrow in DuckDB's own types, the row cap, refusals, traces, one
trace with its evidence, the gates; and /api/sql's Arrow stream read by pyarrow alone."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pandas as pd
import pyarrow as pa
import pytest

from collector.client import ApiError, BadArgument, Client
from collector.service import Service
from tests.support.helpers import sql


@pytest.fixture(scope="module")
def served(judged_shop: Service) -> Service:
    """12 healthy and 12 degraded traces of the example app, all scored, judge included."""
    return judged_shop


@pytest.fixture
def client(served: Service) -> Iterator[Client]:
    with Client(served.http_url) as opened:
        yield opened


def test_sql_is_an_arrow_table_in_duckdbs_types(client: Client, served: Service) -> None:
    table = client.sql("SELECT trace_id, start_time, duration_ms, input_tokens FROM traces ORDER BY trace_id")
    assert isinstance(table, pa.Table) and table.num_rows == 24
    assert table.schema.field("start_time").type == pa.timestamp("us")
    assert table.schema.field("duration_ms").type == pa.float64()
    assert client.truncated is False
    # The same rows as the JSON API.
    rows = sql(served, "SELECT trace_id FROM traces ORDER BY trace_id")
    assert table.column("trace_id").to_pylist() == [r["trace_id"] for r in rows]
    frame = table.to_pandas()
    assert isinstance(frame, pd.DataFrame) and len(frame) == 24


def test_wide_values_stay_exact(client: Client) -> None:
    table = client.sql("SELECT sum(range::HUGEINT * 1000000000000) AS big, [1, 2] AS l FROM range(10000000)")
    assert table.column("big").to_pylist()[0] == 49999995000000 * 1000000000000
    assert table.column("l").to_pylist() == [[1, 2]]


def test_sql_stops_at_the_row_cap_and_says_so(client: Client) -> None:
    table = client.sql("SELECT range AS i FROM range(100000)", max_rows=1234)
    assert table.num_rows == 1234 and client.truncated is True
    assert table.column("i").to_pylist() == list(range(1234))
    assert client.sql("SELECT 1 AS x WHERE false").num_rows == 0 and client.truncated is False


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("DELETE FROM spans", "only read-only queries"),
        ("SELECT * FROM read_csv('/etc/passwd')", "disabled by configuration"),
        ("SELEC 1", "invalid SQL"),
    ],
)
def test_a_refused_query_raises_with_the_servers_reason(client: Client, query: str, message: str) -> None:
    with pytest.raises(ApiError, match=message):
        client.sql(query)


def test_traces_trace_and_check(client: Client) -> None:
    page = client.traces(since="1h", sort="worst", order="asc", limit=3)
    assert page["total"] == 24 and len(page["traces"]) == 3
    worst = page["traces"][0]
    failing = client.traces(failing=worst["failing"][0])
    assert worst["trace_id"] in {t["trace_id"] for t in failing["traces"]}

    trace = client.trace(worst["trace_id"])
    assert next(s for s in trace["scores"] if s["name"] == worst["failing"][0])["status"] == "fail"
    score = next(s for s in trace["scores"] if s["status"] == "fail" and s["items"])
    assert score["items"][0]["ok"] is False  # failing items first

    check = client.check(min={"faithfulness": 0.5}, max_error_rate=0.5, since="1h")
    assert check["status"] in ("pass", "fail")
    assert [g["gate"] for g in check["gates"]] == ["faithfulness mean >= 0.5", "all scores error rate <= 0.5"]
    judged = client.sql(
        "SELECT count(*) AS n FROM scores WHERE name = 'faithfulness' AND status IN ('pass', 'fail')"
    )
    faithfulness, every_score = check["gates"]
    assert faithfulness["n"] == judged.column("n")[0].as_py() > 0
    assert every_score["n"] > faithfulness["n"]


def test_bad_arguments_name_themselves(client: Client) -> None:
    with pytest.raises(BadArgument, match="trace_id: no assembled trace"):
        client.trace("ab" * 16)
    with pytest.raises(BadArgument, match="min: a threshold is between 0 and 1"):
        client.check(min={"faithfulness": 1.5})
    with pytest.raises(ApiError, match="since"):
        client.traces(since="soon")


def test_api_sql_answers_an_arrow_stream_any_arrow_reader_opens(served: Service) -> None:
    response = httpx.post(
        f"{served.http_url}/api/sql",
        json={"query": "SELECT name, count(*) AS n FROM scores GROUP BY name ORDER BY name"},
        headers={"Accept": "application/vnd.apache.arrow.stream"},
        timeout=30,
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/vnd.apache.arrow.stream"
    table = pa.ipc.open_stream(response.content).read_all()
    assert table.column_names == ["name", "n"] and "faithfulness" in table.column("name").to_pylist()
    refused = httpx.post(
        f"{served.http_url}/api/sql",
        json={"query": "DROP TABLE spans"},
        headers={"Accept": "application/vnd.apache.arrow.stream"},
        timeout=30,
    )
    assert refused.status_code == 400 and "only read-only" in refused.json()["error"]
