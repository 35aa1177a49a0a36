"""People's verdicts in the dashboard, in headless Chromium: agreeing or disagreeing with a judge
score and flipping its claims from the keyboard in a trace's view, the Review page's random queue
serving trace after trace, and the contested queue bringing up a score a user's feedback disputes.

Real parts: the service on loopback ports, the example app's traces, the OpenAI-protocol stub as the
judge (reading claims the way a model would: `lexical_verdict`), the browser, and the stored rows.
With RAGPULSE_SCREENSHOTS=DIR (`make screenshots`), the pages are saved there as PNGs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from collector.service import Service
from tests.support.browser import Page, needs_chromium
from tests.support.helpers import judged_example_app, sql, wait_for
from tests.support.openai_stub import lexical_verdict

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def reviewed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The example app's healthy and hallucinating runs (24 traces), every one judged."""
    with judged_example_app(
        tmp_path_factory.mktemp("review-ui"), ["healthy", "hallucinate"], lexical_verdict
    ) as svc:
        yield svc


def judge_scores(svc: Service, name: str = "faithfulness") -> list[dict[str, Any]]:
    return sql(
        svc,
        "SELECT trace_id, status, CAST(items AS VARCHAR) AS items FROM scores "
        f"WHERE name = '{name}' AND evaluator = 'judge' AND status IN ('pass', 'fail') ORDER BY trace_id",
    )


def annotations(svc: Service, author: str) -> list[dict[str, Any]]:
    return sql(
        svc,
        "SELECT trace_id, name, human_status, CAST(claims AS VARCHAR) AS claims, comment, queue, "
        f"score_status FROM annotations WHERE author = '{author}' ORDER BY created_at",
    )


def reload(tab: Page) -> None:
    """The page loaded afresh (opening the URL it shows would change nothing)."""
    tab.page.reload()
    tab.page.wait_for_selector("main[data-ready]")


def focus_score(page: Any, name: str) -> None:
    """Press j, then k, until the focused score is `name` (the keys, not the mouse, move the focus)."""
    for key in ["j"] * 20 + ["k"] * 20:
        if page.locator("details.score.focused").get_attribute("data-score") == name:
            return
        page.keyboard.press(key)
    focused = page.evaluate(
        "() => [document.querySelector('details.score.focused')?.dataset.score,"
        " document.activeElement?.outerHTML.slice(0, 120)]"
    )
    pytest.fail(f"j and k never reached the {name} score; focused score and element: {focused}")


def test_a_reviewer_disagrees_claim_by_claim_from_the_keyboard(reviewed: Service, tab: Page) -> None:
    failed = next(
        s for s in judge_scores(reviewed) if s["status"] == "fail" and len(orjson.loads(s["items"])) >= 2
    )
    judged = [bool(item["ok"]) for item in orjson.loads(failed["items"])]
    page = tab.open(f"{reviewed.http_url}/#/trace/{failed['trace_id']}")
    tab.shown(".verdict[data-verdict=faithfulness]")
    page.wait_for_selector("details.score.focused")
    focus_score(page, "faithfulness")
    panel = page.locator("details.score[data-score=faithfulness]")
    page.keyboard.press("2")  # flip the judge's verdict on the second claim
    assert panel.locator(".claims li.flipped").count() == 1
    assert panel.locator(".claims li").nth(1).get_attribute("class").split() == [
        "ok" if judged[1] else "bad",
        "flipped",
    ]
    page.keyboard.press("c")
    page.keyboard.type("the second claim is in the manual")
    page.keyboard.press("Escape")
    page.keyboard.press("d")
    page.wait_for_selector(".verdict[data-verdict=faithfulness].disagreed")
    assert "your verdict: disagree" in panel.locator(".verdict-status").inner_text()
    tab.screenshot("review-trace")

    (row,) = [a for a in annotations(reviewed, "anonymous") if a["trace_id"] == failed["trace_id"]]
    assert (row["name"], row["human_status"], row["score_status"], row["queue"]) == (
        "faithfulness",
        "pass",
        "fail",
        None,
    )
    assert row["comment"] == "the second claim is in the manual"
    expected = [{"index": i, "ok": (not ok) if i == 1 else ok} for i, ok in enumerate(judged)]
    assert orjson.loads(row["claims"]) == expected
    # Loaded again, the page shows the verdict given.
    reload(tab)
    page.wait_for_selector(".verdict[data-verdict=faithfulness].disagreed")
    assert tab.problems == []


def test_the_random_queue_serves_trace_after_trace_and_agreement_counts_them(
    reviewed: Service, tab: Page
) -> None:
    page = tab.open(f"{reviewed.http_url}/#/review?name=faithfulness&queue=random")
    page = tab.after(lambda: (page.fill("#reviewer", "ana"), page.press("#reviewer", "Enter")))
    total = len(judge_scores(reviewed))
    count = tab.shown("#review-count")
    assert count.inner_text() == f"{total} traces to label for faithfulness"
    served = []
    for left in range(total - 1, total - 4, -1):
        page.wait_for_selector("#review-trace .verdict[data-verdict=faithfulness]")
        focused = page.locator("details.score.focused").get_attribute("data-score")
        assert focused == "faithfulness"  # the queue's score has the focus
        served.append(page.locator("#review-trace .meta code").inner_text())
        if left == total - 1:
            # A verdict on another score of the served trace: stored, but not as a draw of the queue,
            # and the page stays on the trace.
            reviewable = page.locator("#review-trace details.score:has(.verdict)").evaluate_all(
                "panels => panels.map(p => p.dataset.score)"
            )
            other = next(name for name in reviewable if name != "faithfulness")
            focus_score(page, other)
            page.keyboard.press("d")
            page.wait_for_selector(f"#review-trace .verdict[data-verdict='{other}'].disagreed")
            focus_score(page, "faithfulness")
        # Pressed twice, or held: one verdict, one trace further.
        page.keyboard.press("a")
        page.keyboard.press("a")
        page.wait_for_function(
            "n => document.querySelector('#review-count').textContent.startsWith(n + ' trace')", arg=str(left)
        )
    page.wait_for_selector("#review-trace .verdict[data-verdict=faithfulness]")
    assert page.locator("#review-count").inner_text().startswith(f"{total - 3} traces")
    rows = annotations(reviewed, "ana")
    drawn = [r for r in rows if r["name"] == "faithfulness"]
    assert [r["trace_id"] for r in drawn] == served and len(set(served)) == 3
    assert all(r["queue"] == "random" and r["human_status"] == r["score_status"] for r in drawn)
    (chosen,) = [r for r in rows if r["name"] != "faithfulness"]
    assert (chosen["trace_id"], chosen["queue"]) == (served[0], None)
    # The agreement panel counts them on the next visit, and the queue no longer serves them.
    reload(tab)
    agreement = tab.shown("#agreement")
    page.wait_for_selector("#review-trace .verdict[data-verdict=faithfulness]")
    assert page.locator("#review-trace > *").first.inner_text().startswith("open this trace")
    tab.screenshot("review-queue")
    row = agreement.locator("tbody tr", has_text="faithfulness").first
    cells = row.locator("td").all_inner_texts()
    assert cells[:4] == ["faithfulness", "judge-test", cells[2], "3"] and cells[4] == "100.0 %"
    assert page.locator("#review-count").inner_text().startswith(f"{total - 3} traces")
    queue = httpx.get(
        f"{reviewed.http_url}/api/review", params={"name": "faithfulness", "author": "ana", "limit": 500}
    ).json()
    assert queue["remaining"] == total - 3 and not {t["trace_id"] for t in queue["traces"]} & set(served)
    assert tab.problems == []


def test_the_contested_queue_brings_up_a_score_users_disputed(reviewed: Service, tab: Page) -> None:
    passed = next(s for s in judge_scores(reviewed) if s["status"] == "pass")
    answer = httpx.post(
        f"{reviewed.http_url}/api/feedback",
        json={"trace_id": passed["trace_id"], "name": "thumbs", "value": 0, "author": "a-user"},
        timeout=30,
    )
    assert answer.status_code == 200 and answer.json()["attached"] == 1, answer.text
    params = {"name": "faithfulness", "queue": "contested", "author": "bo", "limit": 500}
    wait_for(
        lambda: httpx.get(f"{reviewed.http_url}/api/review", params=params).json()["traces"],
        lambda traces: any(t["trace_id"] == passed["trace_id"] for t in traces),
        timeout=10,
        what="the disputed trace in the contested queue",
    )
    page = tab.open(f"{reviewed.http_url}/#/review?name=faithfulness&queue=contested")
    page = tab.after(lambda: (page.fill("#reviewer", "bo"), page.press("#reviewer", "Enter")))
    reason = tab.shown("#review-trace .banner.reason").inner_text()
    # Disputed scores come first; this one is the only one a user disputed.
    assert "feedback thumbs says fail" in reason
    assert page.locator("#review-trace .meta code").inner_text() == passed["trace_id"]
    # Users' feedback is there, one thumbs down: no AUC from one side alone.
    auc = (
        page.locator("#feedback-auc tbody tr", has_text="faithfulness").first.locator("td").all_inner_texts()
    )
    assert auc == ["faithfulness", "0", "1", "—"]
    page.keyboard.press("d")
    wait_for(
        lambda: annotations(reviewed, "bo"), lambda rows: len(rows) == 1, timeout=10, what="bo's verdict"
    )
    (row,) = annotations(reviewed, "bo")
    assert (row["trace_id"], row["queue"], row["human_status"]) == (passed["trace_id"], "contested", "fail")
    assert tab.problems == []


def test_the_review_api_refuses_an_unknown_queue_and_lists_reviewable_scores(reviewed: Service) -> None:
    """The review queue is a read; an unknown queue is a 400 naming the parameter."""
    answer = httpx.get(f"{reviewed.http_url}/api/review", params={"queue": "everything"})
    assert answer.status_code == 400 and "queue" in answer.json()["error"]
    names = httpx.get(f"{reviewed.http_url}/api/review").json()["names"]
    judged = {n["name"] for n in names if n["judged"]}
    assert "faithfulness" in judged
