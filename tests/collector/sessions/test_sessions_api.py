"""Sessions end to end (docs/sessions.md): a service on loopback ports, the real OpenTelemetry SDK
sending conversations of five turns (`session.id` and `user.id` on each root span), then the
`sessions` view through SQL (the API's and the CLI's), `GET /api/sessions` (worst first, filters,
paging, bad parameters) and `GET /api/sessions/{id}` (the turns in order with their scores), and the
idle timeout that ends a session."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest
from opentelemetry import trace

from collector.config import load_config
from collector.config_base import ConfigError
from collector.schema.windows import utc_now
from collector.service import BackgroundService, Service
from tests.support.helpers import (
    emit_rag_request,
    fast_assembler,
    make_config,
    run_ragpulse,
    sdk_tracer_provider,
    sql,
    wait_for,
)

DOCUMENT = "We ship to Norway in 5-7 days."
GROUNDED = "Yes, we ship to Norway in 5-7 days."
# No word of it in the document: faithfulness (and answer relevance) fail.
UNSUPPORTED = "Our drones deliver bitcoin refunds overnight."
TURNS = 5
CALM, ROUGH = "calm-chat", "rough/chat"  # a slash: ids are the app's, any text
FAILED_TURNS = (1, 3, 4)  # the rough session's turns with an unsupported answer


def question(session: str, turn: int) -> str:
    # Each turn's own text, and words the grounded answer and the document share: every score passes.
    return f"Do you ship to Norway? ({session} {turn})"


def send_turn(tracer: Any, session: str, user: str, turn: int, answer: str = GROUNDED) -> str:
    """One turn through the SDK: its root span carries the session and the user."""

    def mark_root() -> None:
        trace.get_current_span().set_attributes({"session.id": session, "user.id": user})

    return emit_rag_request(tracer, question(session, turn), DOCUMENT, answer, before_root_ends=mark_root)


class Served(NamedTuple):
    """The module's service, each session's trace ids in the order sent, and a time after the last
    turn ended: the listings' `until`, so that their window never hangs on the wall clock between
    the fixture and a test."""

    svc: Service
    sent: dict[str, list[str]]
    until: str


def scored_traces(svc: Service) -> int:
    return int(sql(svc, "SELECT count(DISTINCT trace_id) AS n FROM scores")[0]["n"])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Two sessions of five turns in `shop` (the rough one with three unsupported answers) and one
    turn in `shop-2` under the calm session's id; every trace scored. Yields the service and each
    session's trace ids in the order sent, and a time after the last turn."""
    tmp_path = tmp_path_factory.mktemp("sessions")
    config = make_config(tmp_path, assembler=fast_assembler(), sessions={"refresh_interval": 0.5})
    with BackgroundService(config) as svc:
        shop = sdk_tracer_provider(svc, "shop")
        other = sdk_tracer_provider(svc, "shop-2")
        sent: dict[str, list[str]] = {CALM: [], ROUGH: []}
        for turn in range(1, TURNS + 1):
            sent[CALM].append(send_turn(shop.get_tracer("tests"), CALM, "u-calm", turn))
            answer = UNSUPPORTED if turn in FAILED_TURNS else GROUNDED
            sent[ROUGH].append(send_turn(shop.get_tracer("tests"), ROUGH, "u-rough", turn, answer))
        send_turn(other.get_tracer("tests"), CALM, "u-other", 1)
        shop.shutdown()
        other.shutdown()
        until = utc_now().isoformat()
        wait_for(lambda: scored_traces(svc), lambda n: n == 2 * TURNS + 1, timeout=30, what="scores")
        # The sessions refresher computes them again within its interval of the last write.
        wait_for(
            lambda: sql(svc, "SELECT sum(turns) AS turns, sum(failed_turns) AS failed FROM sessions"),
            lambda rows: rows == [{"turns": 2 * TURNS + 1, "failed": len(FAILED_TURNS)}],
            timeout=10,
            what="the sessions refreshed",
        )
        yield Served(svc, sent, until)


def get(svc: Service, path: str, /, **params: Any) -> httpx.Response:
    return httpx.get(f"{svc.http_url}{path}", params=params, timeout=30)


def ok(svc: Service, path: str, /, **params: Any) -> dict[str, Any]:
    response = get(svc, path, **params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def listing(served: Served, **params: Any) -> dict[str, Any]:
    """`GET /api/sessions` over the hour up to the fixture's last turn (`until`): all three sessions."""
    return ok(served.svc, "/api/sessions", **{"since": "1h", "until": served.until, **params})


def test_the_sessions_view_through_sql(served: Served, tmp_path: Path) -> None:
    svc = served.svc
    rows = sql(
        svc,
        "SELECT session_id, service_name, user_id, turns, status, failed_turns, score_fails, score_means "
        "FROM sessions ORDER BY service_name, session_id",
    )
    assert [(r["session_id"], r["service_name"], r["user_id"], r["turns"], r["status"]) for r in rows] == [
        (CALM, "shop", "u-calm", TURNS, "open"),
        (ROUGH, "shop", "u-rough", TURNS, "open"),
        (CALM, "shop-2", "u-other", 1, "open"),
    ]
    calm, rough, _ = rows
    assert (calm["failed_turns"], rough["failed_turns"]) == (0, len(FAILED_TURNS))
    assert calm["score_fails"]["faithfulness"] == 0 and calm["score_means"]["faithfulness"] == 1.0
    assert rough["score_fails"]["faithfulness"] == len(FAILED_TURNS)
    assert rough["score_means"]["faithfulness"] == pytest.approx(1 - len(FAILED_TURNS) / TURNS)
    # Only scores that applied are in the maps (none of the skipped retrieval metrics).
    assert "retrieval.recall@5" not in rough["score_means"]
    # The CLI's read-only SQL sees the same view.
    cli = run_ragpulse(
        "sql",
        "SELECT session_id, turns FROM sessions WHERE service_name = 'shop' ORDER BY session_id",
        "--server",
        svc.http_url,
        "--format",
        "json",
        cwd=tmp_path,
    )
    assert cli.returncode == 0, cli.stderr
    expected = [{"session_id": CALM, "turns": TURNS}, {"session_id": ROUGH, "turns": TURNS}]
    assert json.loads(cli.stdout) == expected


def test_sessions_are_listed_worst_first(served: Served) -> None:
    svc = served.svc
    body = listing(served)
    stored = sql(svc, "SELECT session_id, service_name, last_activity FROM sessions")
    assert (body["total"], body["limit"], body["offset"]) == (3, 50, 0), (body["window"], stored)
    assert body["window"]
    listed = [(s["session_id"], s["service_name"]) for s in body["sessions"]]
    # The rough session first (most failed turns); the two calm ones tie on failed turns (none) and
    # on their mean, so the newest activity comes first: shop-2's single turn was sent last.
    assert listed == [(ROUGH, "shop"), (CALM, "shop-2"), (CALM, "shop")]
    best_first = listing(served, order="asc")["sessions"]
    assert best_first[-1]["session_id"] == ROUGH
    by_turns = listing(served, sort="turns", order="asc")["sessions"]
    assert [s["turns"] for s in by_turns] == [1, TURNS, TURNS]
    recent = listing(served, sort="last_activity")["sessions"]
    times = [s["last_activity"] for s in recent]
    assert times == sorted(times, reverse=True)


def test_filters_and_paging(served: Served) -> None:
    def ids(**params: Any) -> list[tuple[str, str]]:
        found = listing(served, **params)
        return [(s["session_id"], s["service_name"]) for s in found["sessions"]]

    assert ids(user="u-rough") == [(ROUGH, "shop")]
    assert ids(service="shop-2") == [(CALM, "shop-2")]
    assert ids(status="ended") == []
    assert len(ids(status="open")) == 3
    assert ids(user="nobody") == []
    # A window that ended before the turns were sent holds none of them.
    assert listing(served, until="2020-01-01T00:00:00Z")["total"] == 0
    pages = [ids(limit=1, offset=offset) for offset in range(4)]
    assert pages[3] == [] and listing(served, limit=1, offset=3)["total"] == 3
    seen = [page[0] for page in pages[:3]]
    assert seen == ids() and len(set(seen)) == 3


def test_one_session_has_its_turns_in_order_with_their_scores(
    served: Served,
) -> None:
    svc, sent = served.svc, served.sent
    body = ok(svc, f"/api/sessions/{ROUGH}")
    session = body["session"]
    assert (session["session_id"], session["service_name"], session["turns"]) == (ROUGH, "shop", TURNS)
    turns = body["turns"]
    assert [t["trace_id"] for t in turns] == sent[ROUGH]
    assert [t["turn"] for t in turns] == list(range(1, TURNS + 1))
    assert [t["question"] for t in turns] == [question(ROUGH, n) for n in range(1, TURNS + 1)]
    assert [t["answer"] for t in turns] == [
        UNSUPPORTED if n in FAILED_TURNS else GROUNDED for n in range(1, TURNS + 1)
    ]
    assert all(t["status"] == "ok" for t in turns)
    for number, turn in enumerate(turns, 1):
        faithfulness = [s for s in turn["scores"] if s["name"] == "faithfulness"]
        assert len(faithfulness) == 1, turn["scores"]
        assert faithfulness[0]["status"] == ("fail" if number in FAILED_TURNS else "pass")
        assert faithfulness[0]["evaluator"] == "deterministic"
        assert {"name", "value", "status", "evaluator"} <= set(faithfulness[0])
    # The calm id exists under two services: the service picks one.
    picked = ok(svc, f"/api/sessions/{CALM}", service="shop-2")
    assert picked["session"]["user_id"] == "u-other" and len(picked["turns"]) == 1
    assert [t["trace_id"] for t in ok(svc, f"/api/sessions/{CALM}", service="shop")["turns"]] == sent[CALM]


def test_unknown_sessions_and_bad_parameters(served: Served) -> None:
    svc = served.svc
    missing = get(svc, "/api/sessions/no-such-session")
    assert missing.status_code == 404 and "no-such-session" in missing.json()["error"]
    assert get(svc, f"/api/sessions/{ROUGH}", service="shop-2").status_code == 404
    ambiguous = get(svc, f"/api/sessions/{CALM}")
    assert ambiguous.status_code == 400 and ambiguous.json()["error"].startswith("service:")
    for params, named in (
        ({"sort": "loudest"}, "sort:"),
        ({"order": "sideways"}, "order:"),
        ({"status": "closed"}, "status:"),
        ({"limit": "0"}, "limit:"),
        ({"offset": "-1"}, "offset:"),
        ({"since": "forever"}, "since:"),
        ({"user": "u" * 1001}, "user:"),
    ):
        response = get(svc, "/api/sessions", **params)
        assert response.status_code == 400, params
        assert response.json()["error"].startswith(named), response.json()


def test_a_bad_idle_timeout_is_refused_naming_the_key(tmp_path: Path) -> None:
    config_file = tmp_path / "ragpulse.yaml"
    for bad in ("0", "-5", "soon"):
        config_file.write_text(f"sessions:\n  idle_timeout: {bad}\n")
        with pytest.raises(ConfigError, match=r"sessions\.idle_timeout"):
            load_config(config_file, environ={})
    config_file.write_text("sessions:\n  idle_timeout: 90\n")
    assert load_config(config_file, environ={}).sessions.idle_timeout == 90


def test_a_session_ends_after_the_idle_timeout_and_opens_again_with_a_new_turn(tmp_path: Path) -> None:
    idle = 3.0
    config = make_config(
        tmp_path, assembler=fast_assembler(), sessions={"idle_timeout": idle, "refresh_interval": 0.2}
    )
    with BackgroundService(config) as svc:
        provider = sdk_tracer_provider(svc, "shop")
        tracer = provider.get_tracer("tests")

        def state() -> list[tuple[str, int]]:
            rows = ok(svc, "/api/sessions", since="1h")["sessions"]
            return [(s["status"], s["turns"]) for s in rows]

        send_turn(tracer, "idle-chat", "u-1", 1)
        sent_at = time.monotonic()
        wait_for(lambda: scored_traces(svc), lambda n: n == 1, what="the first turn")
        send_turn(tracer, "idle-chat", "u-1", 2)
        sent_at = time.monotonic()
        wait_for(state, lambda s: s == [("open", 2)], timeout=idle, what="the second turn")
        assert sql(svc, "SELECT status FROM sessions") == [{"status": "open"}]
        assert time.monotonic() - sent_at < idle  # still within the timeout when seen open
        ended = wait_for(state, lambda s: s == [("ended", 2)], timeout=idle + 10, what="the session to end")
        assert time.monotonic() - sent_at >= idle - 0.5  # not before the timeout (timestamps' skew)
        assert ended == [("ended", 2)]
        # The view, through SQL, was defined with the configured timeout too.
        assert sql(svc, "SELECT status, turns FROM sessions") == [{"status": "ended", "turns": 2}]
        assert ok(svc, "/api/sessions", since="1h", status="ended")["total"] == 1
        assert ok(svc, "/api/sessions", since="1h", status="open")["total"] == 0
        # A new turn: the session is going on again.
        send_turn(tracer, "idle-chat", "u-1", 3)
        wait_for(state, lambda s: s == [("open", 3)], timeout=10, what="the third turn")
        provider.shutdown()
