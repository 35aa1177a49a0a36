"""ragpulse over MCP, driven by the official SDK's own client: streamable HTTP at `/mcp` on a
running service fed by the example app (healthy and degraded traces, every one judged), and stdio
through `ragpulse mcp` as an MCP client starts it. Every tool is called; an agent's flow (failing
traces -> a trace -> its first failing item's evidence) is walked; bad arguments, SQL escapes and
the row cap are tool errors or said in the answer; keys guard `/mcp` as they guard `/api/*`."""

from __future__ import annotations

import secrets
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import pytest
from mcp import ClientSession, MCPError
from mcp.types import CallToolResult

from collector.service import BackgroundService, Service
from tests.support.helpers import make_config, run_ragpulse
from tests.support.mcp_client import content, over_http, over_stdio, text
from tests.support.sql_escapes import REFUSED_WRITES, counting_http_server, file_queries

TOOLS = {
    "query_sql",
    "describe_tables",
    "list_traces",
    "get_trace",
    "list_sessions",
    "get_session",
    "check_quality",
    "find_regressions",
    "list_alerts",
    "get_probe_run",
}
T = TypeVar("T")


@pytest.fixture(scope="module")
def served(judged_shop: Service) -> Service:
    """12 healthy and 12 degraded traces of the example app, all scored, judge included."""
    return judged_shop


def call(url: str, tool: str, **arguments: Any) -> CallToolResult:
    return over_http(url, lambda s: s.call_tool(tool, arguments))


# --------------------------------------------------------------------------- the tools


def test_every_tool_is_declared_with_input_and_output_schemas(served: Service) -> None:
    tools = over_http(served.http_url, lambda s: s.list_tools())
    assert {t.name for t in tools.tools} == TOOLS
    for tool in tools.tools:
        assert tool.description, tool.name
        assert tool.input_schema["type"] == "object", tool.name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", tool.name
    schema = {t.name: t.input_schema for t in tools.tools}
    assert schema["query_sql"]["required"] == ["query"]
    assert set(schema["list_traces"]["properties"]) >= {"since", "failing", "score", "below", "q", "limit"}
    assert set(schema["check_quality"]["properties"]) >= {"min", "min_pass_rate", "max_error_rate", "by"}


def test_every_tool_answers_with_structured_content_and_a_line_of_text(served: Service) -> None:
    async def every_tool(session: ClientSession) -> dict[str, CallToolResult]:
        calls = {
            "query_sql": {"query": "SELECT count(*) AS n FROM traces"},
            "describe_tables": {},
            "list_traces": {"limit": 5},
            "check_quality": {"min": {"faithfulness": 0.5}},
            "find_regressions": {"since": "1h"},
            "list_alerts": {},
        }
        return {name: await session.call_tool(name, arguments) for name, arguments in calls.items()}

    results = over_http(served.http_url, every_tool)
    assert content(results["query_sql"])["rows"] == [{"n": 24}]
    assert text(results["query_sql"]) == "1 row(s)"

    tables = {t["name"]: t for t in content(results["describe_tables"])["tables"]}
    assert {"traces", "spans", "steps", "documents", "scores", "score_aggregates"} <= set(tables)
    assert tables["scores"]["meaning"].startswith("a score of a trace")
    assert {"name": "items", "type": "JSON"} in tables["scores"]["columns"]

    page = content(results["list_traces"])
    assert page["total"] == 24 and len(page["traces"]) == 5
    assert text(results["list_traces"]).startswith("5 of 24 trace(s)")

    check = content(results["check_quality"])
    assert check["status"] in ("pass", "fail") and check["exit_code"] in (0, 1)
    (gate,) = check["gates"]
    judged = "SELECT count(*) AS n FROM scores WHERE name = 'faithfulness' AND status IN ('pass', 'fail')"
    assert (
        gate["score"] == "faithfulness"
        and gate["n"] == content(call(served.http_url, "query_sql", query=judged))["rows"][0]["n"]
    )
    assert text(results["check_quality"]).startswith(f"{check['status']}: faithfulness mean >= 0.5")

    regressions = content(results["find_regressions"])
    assert regressions["regression"]["comparisons"] is not None
    # The baseline hour before held nothing: no comparison has data on both sides.
    assert regressions["status"] == "insufficient"

    alerts = content(results["list_alerts"])
    assert set(alerts) == {"alerts", "events", "canary_runs"}


def test_an_agent_finds_a_failing_trace_and_reads_the_evidence_of_its_first_failing_item(
    served: Service,
) -> None:
    url = served.http_url
    worst = content(call(url, "list_traces", sort="worst", order="asc", limit=1))["traces"][0]
    failing_score = worst["failing"][0]
    failing = content(call(url, "list_traces", failing=failing_score, limit=50))
    assert failing["total"] >= 1
    assert worst["trace_id"] in {t["trace_id"] for t in failing["traces"]}

    trace = content(call(url, "get_trace", trace_id=worst["trace_id"]))
    assert trace["question"] and trace["answer"] is not None
    assert trace["steps"] and trace["documents"]
    assert next(s for s in trace["scores"] if s["name"] == failing_score)["status"] == "fail"
    # The first failing score with evidence (a failing score may have none: no answer to check).
    score = next(s for s in trace["scores"] if s["status"] == "fail" and s["items"])
    first = score["items"][0]
    assert first["ok"] is False and first["text"]  # failing items first
    oks = [item["ok"] for item in score["items"]]
    assert oks == sorted(oks)
    # A score the judge answered carries its provenance; one decided without a call (no answer to
    # check) and the deterministic ones carry none.
    judged = [s for s in trace["scores"] if s["judge"] is not None]
    assert judged and all(s["evaluator"] == "judge" for s in judged)
    assert all(s["judge"]["model"] == "judge-test" and s["judge"]["prompt_version"] for s in judged)
    assert all(s["judge"] is None for s in trace["scores"] if s["evaluator"] != "judge")


def test_resources_list_the_tables_and_read_a_trace(served: Service) -> None:
    trace_id = content(call(served.http_url, "list_traces", limit=1))["traces"][0]["trace_id"]

    async def read(session: ClientSession) -> tuple[Any, Any, Any, Any]:
        listed = await session.list_resources()
        templates = await session.list_resource_templates()
        tables = await session.read_resource("ragpulse://tables")
        trace = await session.read_resource(f"ragpulse://traces/{trace_id}")
        return listed, templates, tables, trace

    listed, templates, tables, trace = over_http(served.http_url, read)
    assert [str(r.uri) for r in listed.resources] == ["ragpulse://tables"]
    assert [t.uri_template for t in templates.resource_templates] == ["ragpulse://traces/{trace_id}"]
    markdown = tables.contents[0].text
    assert (
        markdown.startswith("# ragpulse tables") and "## scores" in markdown and "- `items` JSON" in markdown
    )
    assert f'"trace_id":"{trace_id}"' in trace.contents[0].text


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("tool", "arguments", "named"),
    [
        ("list_traces", {"limt": 5}, "unknown argument(s) limt for list_traces"),
        ("list_traces", {"since": "yesterday"}, "since:"),
        ("list_traces", {"limit": "many"}, "limit"),
        ("list_traces", {"sort": "colour"}, "sort:"),
        ("list_traces", {"score": "faithfulness"}, "score and below go together"),
        ("get_trace", {"trace_id": "not-hex"}, "trace_id: a hex trace id"),
        ("get_trace", {"trace_id": "ab" * 16}, f"trace_id: no assembled trace {'ab' * 16}"),
        ("get_trace", {}, "trace_id"),
        ("check_quality", {}, "give at least one gate"),
        ("check_quality", {"min": {"faithfulness": 2}}, "min: a threshold is between 0 and 1"),
        ("check_quality", {"min": {"faithfulness": 0.5}, "by": "tenant"}, "by: not a declared dimension"),
        ("find_regressions", {"since": "1h", "baseline": "10m"}, "baseline: at least the window's length"),
        ("get_probe_run", {"probe": "nightly"}, "run_id:"),
        ("query_sql", {"query": "SELEC 1"}, "invalid SQL"),
        (
            "describe_tables",
            {"table": "spans"},
            "unknown argument(s) table for describe_tables; it takes: none",
        ),
    ],
)
def test_a_bad_argument_is_a_tool_error_naming_it(
    served: Service, tool: str, arguments: dict[str, Any], named: str
) -> None:
    result = call(served.http_url, tool, **arguments)
    assert result.is_error, result
    assert named in text(result), text(result)


def test_query_sql_refuses_what_api_sql_refuses_and_reaches_no_file_or_host(
    served: Service, tmp_path: Path
) -> None:
    before = content(call(served.http_url, "query_sql", query="SELECT count(*) AS n FROM spans"))["rows"]
    with counting_http_server() as (url, hits):
        escapes = [(q, "only") for q in REFUSED_WRITES] + file_queries(tmp_path, url)

        async def each(session: ClientSession) -> list[CallToolResult]:
            return [await session.call_tool("query_sql", {"query": q}) for q, _ in escapes]

        results = over_http(served.http_url, each)
    for (query, expected), result in zip(escapes, results, strict=True):
        assert result.is_error, query
        assert expected in text(result), (query, text(result))
        assert "root:" not in text(result)
    assert hits == []
    assert (
        content(call(served.http_url, "query_sql", query="SELECT count(*) AS n FROM spans"))["rows"] == before
    )


def test_query_sql_cuts_at_the_row_cap_and_says_so(served: Service) -> None:
    result = call(served.http_url, "query_sql", query="SELECT range AS i FROM range(50)", max_rows=7)
    answer = content(result)
    assert answer["truncated"] is True and answer["columns"] == ["i"]
    assert [r["i"] for r in answer["rows"]] == list(range(7))
    assert text(result).startswith("7 row(s), cut at the row cap (7)")
    whole = content(call(served.http_url, "query_sql", query="SELECT range AS i FROM range(50)"))
    assert len(whole["rows"]) == 50 and whole["truncated"] is False


# --------------------------------------------------------------------------- stdio


def test_ragpulse_mcp_over_stdio_answers_every_tool_as_the_server_does(
    served: Service, tmp_path: Path
) -> None:
    """`ragpulse mcp --db FILE` on a copy of the served file (the service holds its own), started as
    an MCP client starts it: every tool answers on the file what it answers over `/mcp`."""
    served.the_store.checkpoint()
    copy = tmp_path / "copy.duckdb"
    shutil.copy(served.config.store.path, copy)
    trace_id = content(call(served.http_url, "list_traces", limit=1))["traces"][0]["trace_id"]
    window = {"since": "1h", "until": datetime.now(UTC).replace(microsecond=0).isoformat()}
    calls = {
        "query_sql": {"query": "SELECT count(*) AS n FROM traces"},
        "describe_tables": {},
        "list_traces": {**window, "sort": "worst", "order": "asc", "limit": 5},
        "get_trace": {"trace_id": trace_id},
        "list_sessions": window,  # the example app sends no session id: an empty page on both
        "get_session": {"session_id": "none"},  # a tool error, the same on both
        "check_quality": {**window, "min": {"faithfulness": 0.5}, "max_error_rate": 0.1},
        "find_regressions": window,
        "list_alerts": {},
        "get_probe_run": {},  # no probe has run: a tool error, the same on both
    }
    assert set(calls) == TOOLS

    async def every_tool(session: ClientSession) -> dict[str, tuple[bool, Any]]:
        answers = {}
        for name, arguments in calls.items():
            result = await session.call_tool(name, arguments)
            answers[name] = (bool(result.is_error), result.structured_content or text(result))
        return answers

    on_file = over_stdio(["--db", str(copy)], tmp_path, every_tool)
    over_server = over_http(served.http_url, every_tool)
    assert on_file == over_server
    assert [name for name, (error, _) in on_file.items() if error] == ["get_session", "get_probe_run"]
    assert on_file["list_sessions"][1]["total"] == 0
    assert on_file["query_sql"][1]["rows"] == [{"n": 24}]


def test_ragpulse_mcp_through_a_server(served: Service, tmp_path: Path) -> None:
    result = over_stdio(
        ["--server", served.http_url],
        tmp_path,
        lambda s: s.call_tool("query_sql", {"query": "SELECT count(*) AS n FROM traces"}),
    )
    assert content(result)["rows"] == [{"n": 24}]


def test_a_missing_database_file_is_one_line_and_exit_1(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.duckdb"
    done = run_ragpulse("mcp", "--db", str(missing), cwd=tmp_path, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [f"Error: database file {missing} does not exist"]
    assert done.stdout == ""


# --------------------------------------------------------------------------- keys


def test_keys_guard_mcp_as_they_guard_the_api(tmp_path: Path) -> None:
    read, ingest = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    (tmp_path / "read").write_text(read)
    (tmp_path / "ingest").write_text(ingest)
    keys = [
        {"name": "analysts", "key_file": str(tmp_path / "read"), "scopes": ["read"]},
        {"name": "app", "key_file": str(tmp_path / "ingest"), "scopes": ["ingest"]},
    ]
    with BackgroundService(make_config(tmp_path, auth={"keys": keys})) as service:
        url = service.http_url
        answer = over_http(url, lambda s: s.call_tool("query_sql", {"query": "SELECT 42 AS x"}), key=read)
        assert content(answer)["rows"] == [{"x": 42}]
        for key, message in (
            (None, "a valid API key is required"),
            ("wrong", "a valid API key is required"),
            (ingest, "this key lacks the read scope"),
        ):
            with pytest.raises(BaseException) as caught:
                over_http(url, lambda s: s.list_tools(), key=key)
            assert message in _mcp_error(caught.value), caught.value
        # Plain HTTP sees the status itself.
        refused = httpx2.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert refused.status_code == 401


def _mcp_error(error: BaseException) -> str:
    """The message of the MCPError inside the SDK's exception groups."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    assert isinstance(error, MCPError), repr(error)
    return error.error.message
