"""Conversations over MCP, with the official SDK's own client on a running service's `/mcp`: the
real OpenTelemetry SDK sends two sessions of four turns (one with two unsupported answers) and one
turn under the same id from another service; an agent finds the worst session with
`list_sessions`, reads its turns with `get_session`, and gets tool errors naming the argument for
an unknown session, an id under two services, and a bad filter. The notebook client reads the
same answers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace

from collector.client import ApiError, Client
from collector.service import BackgroundService, Service
from tests.support.helpers import (
    emit_rag_request,
    fast_assembler,
    make_config,
    sdk_tracer_provider,
    sql,
    wait_for,
)
from tests.support.mcp_client import content, over_http, text

DOCUMENT = "We ship to Norway in 5-7 days."
GROUNDED = "Yes, we ship to Norway in 5-7 days."
UNSUPPORTED = "Our drones deliver bitcoin refunds overnight."  # no word of the document: fails
TURNS = 4
FAILED = (2, 4)  # the rough session's turns with an unsupported answer


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    config = make_config(
        tmp_path_factory.mktemp("mcp-sessions"),
        assembler=fast_assembler(),
        sessions={"refresh_interval": 0.5},
    )
    with BackgroundService(config) as svc:
        shop, other = sdk_tracer_provider(svc, "shop"), sdk_tracer_provider(svc, "shop-2")

        def turn(provider: Any, session: str, number: int, answer: str) -> None:
            def mark_root() -> None:
                trace.get_current_span().set_attributes({"session.id": session, "user.id": f"u-{session}"})

            question = f"Do you ship to Norway? ({session} {number})"
            emit_rag_request(provider.get_tracer("t"), question, DOCUMENT, answer, before_root_ends=mark_root)

        for number in range(1, TURNS + 1):
            turn(shop, "calm", number, GROUNDED)
            turn(shop, "rough", number, UNSUPPORTED if number in FAILED else GROUNDED)
        turn(other, "calm", 1, GROUNDED)
        shop.shutdown()
        other.shutdown()
        wait_for(
            lambda: sql(svc, "SELECT sum(turns) AS turns, sum(failed_turns) AS failed FROM sessions"),
            lambda rows: rows == [{"turns": 2 * TURNS + 1, "failed": len(FAILED)}],
            timeout=30,
            what="every turn scored and its session computed",
        )
        yield svc


def call(svc: Service, tool: str, **arguments: Any) -> Any:
    return over_http(svc.http_url, lambda s: s.call_tool(tool, arguments))


def test_an_agent_finds_the_worst_session_and_reads_its_turns(served: Service) -> None:
    listed = call(served, "list_sessions", since="1h")
    page = content(listed)
    assert page["total"] == 3
    worst = page["sessions"][0]
    assert (worst["session_id"], worst["service_name"], worst["failed_turns"]) == (
        "rough",
        "shop",
        len(FAILED),
    )
    assert worst["score_fails"]["faithfulness"] == len(FAILED) and worst["user_id"] == "u-rough"
    assert text(listed).startswith("3 of 3 session(s) active from") and "with failed turns: rough" in text(
        listed
    )
    # Filters and sorts are those of GET /api/sessions.
    by_turns = content(call(served, "list_sessions", since="1h", sort="turns", order="asc"))["sessions"]
    assert [s["turns"] for s in by_turns] == [1, TURNS, TURNS]
    only_other = content(call(served, "list_sessions", since="1h", service="shop-2"))["sessions"]
    assert [(s["session_id"], s["turns"]) for s in only_other] == [("calm", 1)]

    found = call(served, "get_session", session_id="rough")
    detail = content(found)
    assert detail["session"]["session_id"] == "rough" and detail["session"]["turns"] == TURNS
    assert [t["turn"] for t in detail["turns"]] == list(range(1, TURNS + 1))
    assert [t["question"] for t in detail["turns"]] == [
        f"Do you ship to Norway? (rough {n})" for n in range(1, TURNS + 1)
    ]
    failed = [
        t["turn"] for t in detail["turns"] if any(s["ours"] and s["status"] == "fail" for s in t["scores"])
    ]
    assert failed == list(FAILED)
    assert text(found) == f"session rough (shop, open): {TURNS} turn(s), failed: 2, 4"
    # A turn's trace is one get_trace away.
    first = content(call(served, "get_trace", trace_id=detail["turns"][1]["trace_id"]))
    assert first["answer"] == UNSUPPORTED


@pytest.mark.parametrize(
    ("tool", "arguments", "named"),
    [
        ("get_session", {"session_id": "nobody"}, "session_id: no session nobody"),
        ("get_session", {"session_id": "calm"}, "service: session calm exists under several services"),
        ("get_session", {"session_id": "calm", "service": "shop-3"}, "no session calm under service shop-3"),
        ("list_sessions", {"status": "closed"}, "status"),
        ("list_sessions", {"since": "soon"}, "since"),
    ],
)
def test_a_bad_argument_is_a_tool_error_naming_it(
    served: Service, tool: str, arguments: dict[str, Any], named: str
) -> None:
    result = call(served, tool, **arguments)
    assert result.is_error, result
    assert named in text(result), text(result)


def test_an_id_under_two_services_is_read_with_its_service(served: Service) -> None:
    detail = content(call(served, "get_session", session_id="calm", service="shop-2"))
    assert (detail["session"]["service_name"], len(detail["turns"])) == ("shop-2", 1)


def test_the_notebook_client_reads_the_same_sessions(served: Service) -> None:
    with Client(served.http_url) as rp:
        page = rp.sessions(since="1h")
        assert page == content(call(served, "list_sessions", since="1h"))
        assert rp.session("rough") == content(call(served, "get_session", session_id="rough"))
        assert len(rp.session("calm", service="shop-2")["turns"]) == 1
        with pytest.raises(ApiError, match="no session rough/x"):
            rp.session("rough/x")  # a slash in an id travels encoded
