"""Rescore runs in the dashboard, in headless Chromium: the Rescores page (#/rescores) lists the runs
of GET /api/rescore with their status, origin, evaluators, window and service, their counts and a
progress bar; it refreshes itself while a run goes on, and only then; a fresh service explains how to
start a run.

Real parts: the service on loopback ports, the OpenTelemetry SDK sending RAG traces, the deterministic
evaluators, two runs started with `POST /api/rescore` inside the service, the browser. The refresh
test alone answers GET /api/rescore from the test (Playwright's routing, on the real page): a
deterministic run of a few traces ends in a fraction of a second, too fast to watch it go on, and
one held by the judge's budget takes a minute. With RAGPULSE_SCREENSHOTS=DIR, the page of runs is
saved there as a PNG.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from collector.service import BackgroundService, Service
from tests.support.browser import Page, needs_chromium
from tests.support.helpers import (
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
UNSUPPORTED = "Our drones deliver bitcoin refunds overnight."
# Traces sent per service: the first run rescores all of them, the second `shop`'s only.
SENT = {"shop": 3, "shop-2": 2}
EVERY_RUN = {"since": "1h", "evaluators": ["faithfulness"]}
SHOP_RUN = {"since": "1h", "service": "shop", "evaluators": ["faithfulness", "answer_relevance"]}
# The service, and its two runs as GET /api/rescore/{id} answered once they ended.
Served = tuple[Service, dict[str, Any], dict[str, Any]]


def rescore(svc: Service, body: dict[str, Any]) -> dict[str, Any]:
    """Start a run with POST /api/rescore and wait until GET /api/rescore/{id} says it ended."""
    started = httpx.post(f"{svc.http_url}/api/rescore", json=body, timeout=30)
    assert started.status_code == 200, started.text
    run_id = started.json()["run_id"]
    run: dict[str, Any] = wait_for(
        lambda: httpx.get(f"{svc.http_url}/api/rescore/{run_id}", timeout=10).json(),
        lambda r: r["status"] != "running",
        timeout=60,
        what=f"rescore run {run_id} to end",
    )
    assert run["status"] == "done", run
    return run


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Five traces (three of `shop`, one of them unsupported; two of `shop-2`), scored; then two runs:
    every service's faithfulness, then `shop`'s faithfulness and answer relevance. Yields the service
    and the two runs as the API answers them."""
    config = make_config(tmp_path_factory.mktemp("rescore-ui"), assembler=fast_assembler())
    with BackgroundService(config) as svc:
        for service, count in SENT.items():
            provider = sdk_tracer_provider(svc, service)
            tracer = provider.get_tracer("tests")
            for n in range(count):
                answer = UNSUPPORTED if (service, n) == ("shop", 1) else GROUNDED
                emit_rag_request(tracer, f"Do you ship to Norway? ({service} {n})", DOCUMENT, answer)
            provider.shutdown()
        scored = "SELECT count(DISTINCT trace_id) AS n FROM scores WHERE name = 'faithfulness'"
        wait_for(
            lambda: sql(svc, scored)[0]["n"], lambda n: n == sum(SENT.values()), timeout=30, what="scores"
        )
        first = rescore(svc, EVERY_RUN)
        second = rescore(svc, SHOP_RUN)
        yield svc, first, second


def row(page: Any, run_id: str) -> Any:
    return page.locator(f'#rescore-runs tr.rescore-run[data-run="{run_id}"]')


def cell(page: Any, run_id: str, column: int) -> str:
    return str(row(page, run_id).locator("td").nth(column).inner_text())


def progress(page: Any, run_id: str) -> tuple[str, str, str]:
    """A run's progress bar: its aria-valuenow, the fill's width, and the text under it."""
    bar = row(page, run_id).locator(".progress")
    width = bar.locator(".fill").evaluate("f => f.style.width")
    return bar.get_attribute("aria-valuenow"), width, row(page, run_id).locator(".progress-text").inner_text()


def test_the_runs_are_listed_with_their_counts_and_progress(served: Served, tab: Page) -> None:
    svc, first, second = served
    page = tab.open(f"{svc.http_url}/#/rescores")
    tab.shown("#rescore-runs")
    assert page.locator("#nav a.active").inner_text() == "Rescores"
    assert page.locator("#nav a").all_inner_texts()[-1] == "Rescores"  # after the existing entries
    # Newest first.
    listed = page.locator("#rescore-runs tr.rescore-run").evaluate_all("rs => rs.map(r => r.dataset.run)")
    assert listed == [second["run_id"], first["run_id"]]

    everything = sum(SENT.values())
    run_id = first["run_id"]
    assert row(page, run_id).get_attribute("data-status") == "done"
    assert run_id in cell(page, run_id, 0) and "server" in cell(page, run_id, 0)  # id and origin
    assert cell(page, run_id, 1) == "done"
    assert row(page, run_id).locator("td .badge.done").count() == 1
    assert cell(page, run_id, 2) == "faithfulness"
    assert "last 1h" in cell(page, run_id, 3) and "every service" in cell(page, run_id, 3)
    assert progress(page, run_id) == ("100", "100%", f"{everything} / {everything} traces\n100 %")
    assert cell(page, run_id, 5) == "0"  # judged: no judge here
    assert cell(page, run_id, 6) == str(everything)  # a faithfulness score written per trace
    assert cell(page, run_id, 7) == str(everything)  # ... in place of the one the ingest gave
    assert cell(page, run_id, 8) == "0 / 0"  # judge tokens
    started, finished, took = cell(page, run_id, 9).split("\n")
    assert started != "—" and finished.startswith("finished ") and "—" not in finished
    assert re.fullmatch(r"took [\d.,]+ m?s", took), took

    shop = SENT["shop"]
    run_id = second["run_id"]
    assert cell(page, run_id, 2) == "faithfulness, answer_relevance"
    assert "service shop" in cell(page, run_id, 3)
    assert progress(page, run_id) == ("100", "100%", f"{shop} / {shop} traces\n100 %")
    assert cell(page, run_id, 6) == str(2 * shop) and cell(page, run_id, 7) == str(2 * shop)
    assert page.locator("#rescore-live").count() == 0 and page.locator(".rescore-error").count() == 0
    tab.screenshot("rescore-runs")

    # Every run has ended: the page does not ask again.
    ready = page.get_attribute("main", "data-ready")
    time.sleep(2.5)
    assert page.get_attribute("main", "data-ready") == ready
    assert tab.problems == []


def answered_by(page: Any, answers: list[list[dict[str, Any]]]) -> list[float]:
    """Answer the page's GET /api/rescore with `answers` in turn (the last one from then on); returns
    the times of the requests, as they come."""
    asked: list[float] = []

    def answer(route: Any) -> None:
        asked.append(time.monotonic())
        runs = answers[min(len(asked), len(answers)) - 1]
        route.fulfill(status=200, content_type="application/json", body=orjson.dumps({"runs": runs}))

    page.route("**/api/rescore", answer)
    return asked


def a_run(run_id: str, status: str, done: int, **fields: Any) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "status": status,
        "request": {"since": "7d", "until": None, "service": None, "slice": None, "evaluators": []},
        "window_start": "2026-12-01T10:00:00",
        "window_end": "2026-12-08T10:00:00",
        "evaluators": ["faithfulness", "answer_relevance"],
        "origin": "cli",
        "traces_total": 4,
        "traces_done": done,
        "traces_judged": done,
        "scores_written": 2 * done,
        "scores_replaced": 2 * done,
        "judge_input_tokens": 900 * done,
        "judge_output_tokens": 60 * done,
        "started_at": "2026-12-08T10:00:00",
        "updated_at": "2026-12-08T10:00:05",
        "finished_at": None if status == "running" else "2026-12-08T10:00:09",
        "error": None,
        "waiting": None,
        "resumed": False,
        **fields,
    }


def test_the_page_refreshes_while_a_run_goes_on_and_not_after_leaving(served: Served, tab: Page) -> None:
    svc, _, _ = served
    page = tab.page
    failed = a_run("rescore-old", "failed", 2, error="RuntimeError: the judge's endpoint refused")
    asked = answered_by(
        page,
        [
            [a_run("rescore-live", "running", 1, waiting="throttled"), failed],
            [a_run("rescore-live", "running", 3), failed],
            [a_run("rescore-live", "done", 4), failed],
        ],
    )
    tab.open(f"{svc.http_url}/#/rescores")
    tab.shown("#rescore-runs")
    assert progress(page, "rescore-live") == ("25", "25%", "1 / 4 traces\n25 %")
    assert (
        row(page, "rescore-live").locator(".waiting").inner_text()
        == "waiting for the judge's budget (throttled)"
    )
    assert "refreshes every 2 s" in page.inner_text("#rescore-live")
    assert cell(page, "rescore-live", 0).endswith("CLI") and cell(page, "rescore-live", 8) == "900 / 60"
    assert "last progress" in cell(page, "rescore-live", 9)
    # A failed run: its error on a row of its own, its bar where it stopped.
    error = page.locator('#rescore-runs tr.rescore-error[data-run="rescore-old"]')
    assert error.inner_text() == "The run failed: RuntimeError: the judge's endpoint refused"
    assert progress(page, "rescore-old")[0] == "50"

    # Drawn again about 2 s later, twice; the run done, the page stops asking.
    wait_for(lambda: progress(page, "rescore-live")[0], lambda p: p == "75", timeout=10, what="75 %")
    assert row(page, "rescore-live").locator(".waiting").count() == 0
    wait_for(lambda: progress(page, "rescore-live")[0], lambda p: p == "100", timeout=10, what="100 %")
    assert row(page, "rescore-live").get_attribute("data-status") == "done"
    assert page.locator("#rescore-live").count() == 0
    assert len(asked) == 3
    assert all(1.5 < later - earlier < 8 for earlier, later in itertools.pairwise(asked))
    time.sleep(2.5)
    assert len(asked) == 3

    # A run going on, then another page: no refresh follows the user there.
    page.unroute("**/api/rescore")
    asked = answered_by(page, [[a_run("rescore-live", "running", 1)]])
    tab.navigate("#/traces")  # leave, so the next visit renders afresh
    tab.navigate("#/rescores")
    tab.shown("#rescore-live")
    assert len(asked) == 1
    tab.navigate("#/overview")
    ready = page.get_attribute("main", "data-ready")
    time.sleep(2.5)
    assert len(asked) == 1, "the Rescores page kept asking after the user left it"
    assert page.get_attribute("main", "data-ready") == ready, "a refresh timer outlived the page"
    assert page.locator("#rescore-runs").count() == 0
    assert tab.problems == []


def test_a_fresh_service_explains_how_to_start_a_run(
    tmp_path_factory: pytest.TempPathFactory, tab: Page
) -> None:
    config = make_config(tmp_path_factory.mktemp("rescore-ui-empty"), assembler=fast_assembler())
    with BackgroundService(config) as svc:
        page = tab.open(f"{svc.http_url}/#/rescores")
        empty = tab.shown("#rescores-empty").inner_text()
        assert "No rescore run yet" in empty
        assert "ragpulse rescore --since 7d" in empty
        assert "POST" in empty and f"http://{svc.http_url.split('://')[1]}/api/rescore" in empty
        assert "docs/rescore.md" in empty
        assert page.locator("#rescore-runs").count() == 0
        assert page.locator("#nav a.active").inner_text() == "Rescores"
        assert tab.problems == []
