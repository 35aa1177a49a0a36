"""Sessions in the dashboard, in headless Chromium: the Sessions page (worst first, the status filter,
the sort, the user filter, paging, the empty state) and a session's view (its figures, its turns in
order with their scores, the link to each turn's trace, an unknown id, an id under two services, an
id holding a `/`).

Real parts: the service on loopback ports, the OpenTelemetry SDK sending conversations with
`session.id` and `user.id` on each root span, the deterministic evaluators, the sessions refresher,
the browser. With RAGPULSE_SCREENSHOTS=DIR, the two pages are saved there as PNGs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace

from collector.service import BackgroundService, Service
from tests.support.browser import Page, needs_chromium
from tests.support.helpers import (
    EarlierTracer,
    emit_rag_request,
    fast_assembler,
    make_config,
    sdk_tracer_provider,
    sql,
    wait_for,
)

pytestmark = needs_chromium

DOCUMENT = "We ship to Norway in 5-7 days."
GROUNDED = "Yes, we ship to Norway in 5-7 days."
# No word of it in the document: faithfulness (and answer relevance) fail.
UNSUPPORTED = "Our drones deliver bitcoin refunds overnight."
ROUGH, CALM, MILD, OLD = "rough/chat", "calm-chat", "mild-chat", "old-chat"
ROUGH_FAILED = (1, 3, 4)  # the rough session's turns with an unsupported answer
MILD_USER = "u-<b>mild</b>"  # markup in a user id: shown as text
# Each session's turns (in service `shop`, unless said), failed turns, user.
SESSIONS = {ROUGH: (5, 3, "u-rough"), CALM: (5, 0, "u-calm"), MILD: (2, 1, MILD_USER), OLD: (2, 0, "u-old")}
OLD_AGO = 2 * 3600  # the old session's turns: two hours ago, so it has ended (idle timeout 30 min)
TOTAL_TURNS = sum(turns for turns, _, _ in SESSIONS.values()) + 1  # and CALM's one turn in `shop-2`


def question(session: str, turn: int) -> str:
    return f"Do you ship to Norway? ({session} {turn})"


def send_turn(tracer: Any, session: str | None, user: str, turn: int, answer: str = GROUNDED) -> str:
    """One turn through the SDK; its root span carries the session (when given) and the user."""

    def mark_root() -> None:
        if session is not None:
            trace.get_current_span().set_attributes({"session.id": session, "user.id": user})

    return emit_rag_request(
        tracer, question(session or "none", turn), DOCUMENT, answer, before_root_ends=mark_root
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, dict[str, list[str]]]]:
    """The sessions of SESSIONS in `shop`, CALM's id again in `shop-2` (one turn), and one trace
    without a session in `plain`; every trace scored and every session's row refreshed. Yields the
    service and each `shop` session's trace ids in the order sent."""
    tmp_path = tmp_path_factory.mktemp("sessions-ui")
    config = make_config(tmp_path, assembler=fast_assembler(), sessions={"refresh_interval": 0.5})
    with BackgroundService(config) as svc:
        shop = sdk_tracer_provider(svc, "shop")
        other = sdk_tracer_provider(svc, "shop-2")
        plain = sdk_tracer_provider(svc, "plain")
        tracer = shop.get_tracer("tests")
        sent: dict[str, list[str]] = {name: [] for name in SESSIONS}
        for turn in range(1, 3):
            sent[OLD].append(send_turn(EarlierTracer(tracer, OLD_AGO), OLD, "u-old", turn))
        for turn in range(1, 6):
            sent[CALM].append(send_turn(tracer, CALM, "u-calm", turn))
            answer = UNSUPPORTED if turn in ROUGH_FAILED else GROUNDED
            sent[ROUGH].append(send_turn(tracer, ROUGH, "u-rough", turn, answer))
        for turn in range(1, 3):
            sent[MILD].append(
                send_turn(tracer, MILD, MILD_USER, turn, UNSUPPORTED if turn == 2 else GROUNDED)
            )
        send_turn(other.get_tracer("tests"), CALM, "u-other", 1)
        send_turn(plain.get_tracer("tests"), None, "", 1)
        for provider in (shop, other, plain):
            provider.shutdown()
        scored = "SELECT count(DISTINCT trace_id) AS n FROM scores"
        wait_for(lambda: sql(svc, scored)[0]["n"], lambda n: n == TOTAL_TURNS + 1, timeout=30, what="scores")
        # The sessions refresher computes them again within its interval of the last write.
        failed = sum(f for _, f, _ in SESSIONS.values())
        wait_for(
            lambda: sql(svc, "SELECT sum(turns) AS turns, sum(failed_turns) AS failed FROM sessions"),
            lambda rows: rows == [{"turns": TOTAL_TURNS, "failed": failed}],
            timeout=10,
            what="the sessions refreshed",
        )
        yield svc, sent


def listed(page: Any) -> list[tuple[str, str]]:
    """The rows of the session table: (session id, service)."""
    rows = page.locator("#session-table tbody tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.session, r.dataset.service])"
    )
    return [(r[0], r[1]) for r in rows]


def cell(page: Any, session: str, service: str, column: int) -> Any:
    return page.locator(f'#session-table tr[data-session="{session}"][data-service="{service}"] td').nth(
        column
    )


def test_sessions_are_listed_worst_first_and_filtered(
    served: tuple[Service, dict[str, list[str]]], tab: Page
) -> None:
    svc, _ = served
    page = tab.open(f"{svc.http_url}/#/sessions")
    tab.shown("#session-table")
    assert page.locator("#nav a.active").inner_text() == "Sessions"
    rows = listed(page)
    assert len(rows) == 5
    # The most failed turns first: the rough session (3), then the mild one (1).
    assert rows[:2] == [(ROUGH, "shop"), (MILD, "shop")]
    assert set(rows[2:]) == {(CALM, "shop"), (CALM, "shop-2"), (OLD, "shop")}
    assert page.inner_text("#session-count").startswith("1\u20135 of 5 sessions")
    failed_turns = cell(page, ROUGH, "shop", 4)
    assert failed_turns.inner_text() == "3" and "bad" in failed_turns.get_attribute("class").split()
    calm_failed = cell(page, CALM, "shop", 4)
    assert calm_failed.inner_text() == "0" and "bad" not in calm_failed.get_attribute("class").split()
    assert cell(page, ROUGH, "shop", 3).inner_text() == "5"  # turns
    assert "faithfulness 3" in cell(page, ROUGH, "shop", 6).inner_text()  # the failing scores
    assert cell(page, ROUGH, "shop", 7).inner_text() == "open"
    assert cell(page, OLD, "shop", 7).inner_text() == "ended"
    assert cell(page, MILD, "shop", 2).inner_text() == MILD_USER  # markup shown as text
    tab.screenshot("sessions-list")

    # The status filter: only the session whose last turn is two hours old has ended.
    page = tab.after(lambda: page.select_option("select[name=status]", "ended"))
    assert listed(page) == [(OLD, "shop")]
    assert "status=ended" in page.evaluate("location.hash")
    page = tab.after(lambda: page.select_option("select[name=status]", "open"))
    assert (OLD, "shop") not in listed(page) and len(listed(page)) == 4
    page = tab.after(lambda: page.select_option("select[name=status]", ""))

    # Sorted by turns, fewest first: shop-2's single turn, then the two of two turns.
    page = tab.after(lambda: page.select_option("select[name=sort]", "turns"))
    assert [cell(page, s, v, 3).inner_text() for s, v in listed(page)] == ["5", "5", "2", "2", "1"]
    page = tab.after(lambda: page.select_option("select[name=order]", "asc"))
    assert listed(page)[0] == (CALM, "shop-2")
    assert [cell(page, s, v, 3).inner_text() for s, v in listed(page)] == ["1", "2", "2", "5", "5"]
    # By last activity, latest first: the old session last.
    page = tab.after(lambda: page.select_option("select[name=sort]", "last_activity"))
    assert listed(page)[-1] == (OLD, "shop")
    assert page.locator("select[name=order]").input_value() == "desc"  # a new sort starts descending

    # The user filter, through the form; a user's link does the same.
    page = tab.after(
        lambda: (page.fill("input[name=user]", "u-rough"), page.press("input[name=user]", "Enter"))
    )
    assert listed(page) == [(ROUGH, "shop")]
    page = tab.after(lambda: page.click("#session-filters button[type=button]"))  # Clear
    assert len(listed(page)) == 5
    page = tab.after(lambda: page.click(f'#session-table tr[data-session="{MILD}"] td.user a'))
    assert listed(page) == [(MILD, "shop")]
    assert page.locator("input[name=user]").input_value() == MILD_USER
    assert tab.problems == []


def test_the_sessions_are_paged(served: tuple[Service, dict[str, list[str]]], tab: Page) -> None:
    svc, _ = served
    page = tab.open(f"{svc.http_url}/#/sessions?limit=2")
    tab.shown("#session-table")
    first = listed(page)
    assert len(first) == 2 and page.inner_text("#session-count").startswith("1\u20132 of 5")
    assert page.locator("#prev").is_disabled()
    page = tab.after(lambda: page.click("#next"))
    second = listed(page)
    assert page.inner_text("#session-count").startswith("3\u20134 of 5")
    page = tab.after(lambda: page.click("#next"))
    third = listed(page)
    assert len(third) == 1 and page.locator("#next").is_disabled()
    assert len(set(first + second + third)) == 5
    page = tab.after(lambda: page.click("#prev"))
    assert listed(page) == second
    # Another time range goes back to the first page.
    page = tab.after(lambda: page.select_option("#range", "1h"))
    assert "offset" not in page.evaluate("location.hash")
    assert page.inner_text("#session-count").startswith(
        "1\u20132 of 4"
    )  # the old session's turns are 2 h old
    assert tab.problems == []


def test_a_session_shows_its_turns_in_order_with_their_scores(
    served: tuple[Service, dict[str, list[str]]], tab: Page
) -> None:
    svc, sent = served
    page = tab.open(f"{svc.http_url}/#/sessions")
    tab.shown("#session-table")
    # A click on the row opens the session; its id (with a `/`) is encoded in the URL.
    page = tab.after(lambda: page.click(f'#session-table tr[data-session="{ROUGH}"] td:nth-child(4)'))
    assert page.evaluate("location.hash") == "#/session/rough%2Fchat?service=shop"
    tab.shown("#session-view")
    meta = page.inner_text("#session-meta")
    assert ROUGH in meta and "shop" in meta and "u-rough" in meta and "open" in meta
    kpis = page.locator("#session-kpis")
    assert kpis.locator("[data-kpi='turns'] .value").inner_text() == "5"
    assert kpis.locator("[data-kpi='failed turns'] .value").inner_text() == "3"
    assert "bad" in kpis.locator("[data-kpi='failed turns']").get_attribute("class").split()
    faithfulness = page.locator("#session-scores tr[data-score=faithfulness] td")
    assert faithfulness.nth(1).inner_text() == "0.4" and faithfulness.nth(2).inner_text() == "3"

    turns = page.locator("#session-turns > li")
    assert turns.count() == 5
    assert turns.evaluate_all("ts => ts.map(t => t.dataset.trace)") == sent[ROUGH]
    assert turns.evaluate_all("ts => ts.map(t => t.dataset.turn)") == ["1", "2", "3", "4", "5"]
    questions = page.locator("#session-turns .question").all_inner_texts()
    assert questions == [question(ROUGH, n) for n in range(1, 6)]
    for number in range(1, 6):
        turn = turns.nth(number - 1)
        failed = number in ROUGH_FAILED
        assert ("failed" in turn.get_attribute("class").split()) == failed
        badge = turn.locator(".turn-scores .badge[data-score=faithfulness]")
        assert badge.get_attribute("data-status") == ("fail" if failed else "pass")
        assert badge.get_attribute("class").split()[:2] == ["badge", "fail" if failed else "pass"]
        expected = UNSUPPORTED if failed else GROUNDED
        assert turn.locator(".answer").inner_text() == expected
    tab.screenshot("session-view")

    # A turn's trace is a click away.
    page = tab.after(lambda: turns.nth(2).locator("a.trace-link").click())
    assert page.evaluate("location.hash") == f"#/trace/{sent[ROUGH][2]}"
    tab.shown("#trace-view")
    assert page.inner_text("#trace-view .question") == question(ROUGH, 3)
    assert page.locator("#nav a.active").inner_text() == "Traces"
    # Back to the session: the browser's history.
    page = tab.after(lambda: page.go_back())
    tab.shown("#session-turns")
    assert tab.problems == []


def test_an_unknown_session_and_an_id_under_two_services(
    served: tuple[Service, dict[str, list[str]]], tab: Page
) -> None:
    svc, sent = served
    page = tab.open(f"{svc.http_url}/#/session/no-such%2Fsession")
    missing = tab.shown("#session-missing")
    assert "No session no-such/session" in missing.inner_text()
    assert page.locator("#nav a.active").inner_text() == "Sessions"
    # The id exists under `shop` only.
    page = tab.navigate(f"#/session/{ROUGH.replace('/', '%2F')}?service=shop-2")
    assert "No session rough/chat under service shop-2" in tab.shown("#session-missing").inner_text()
    # The browser logs the API's 404s; nothing else may go wrong.
    assert tab.problems and all("404" in p for p in tab.problems), tab.problems
    tab.problems.clear()

    # Without a service, CALM's id names two: the page offers each.
    page = tab.navigate(f"#/session/{CALM}")
    ambiguous = tab.shown("#session-ambiguous")
    assert "exists under several services" in ambiguous.inner_text()
    links = page.locator("#session-services a")
    assert links.evaluate_all("ls => ls.map(l => l.dataset.service)") == ["shop", "shop-2"]
    assert all("400" in p for p in tab.problems), tab.problems
    tab.problems.clear()
    page = tab.after(lambda: links.nth(1).click())
    tab.shown("#session-view")
    assert page.locator("#session-turns > li").count() == 1
    assert "u-other" in page.inner_text("#session-meta")
    page = tab.navigate(f"#/session/{CALM}?service=shop")
    assert (
        page.locator("#session-turns > li").evaluate_all("ts => ts.map(t => t.dataset.trace)") == sent[CALM]
    )
    assert tab.problems == []


def test_a_service_without_sessions_explains_how_to_send_them(
    served: tuple[Service, dict[str, list[str]]], tab: Page
) -> None:
    svc, _ = served
    page = tab.open(f"{svc.http_url}/#/sessions")
    tab.shown("#session-table")
    page = tab.after(lambda: page.select_option("#service", "plain"))
    empty = tab.shown("#sessions-empty")
    assert "No session in the last 24h for plain" in empty.inner_text()
    assert "session.id" in empty.inner_text()
    assert page.locator("#session-table").count() == 0
    assert tab.problems == []
