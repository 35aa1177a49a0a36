"""The dashboard and the report, looked at in a real headless Chromium (Debian's `chromium`, driven
by Playwright): every page loads the example app's data with no console error, charts draw, the trace
view shows a judged trace's claims, filters change the list, the empty state tells what to do, API
errors are shown, and the report opens from file:// with no network at all.

With RAGPULSE_SCREENSHOTS=DIR (`make screenshots`), each page is also saved there as a PNG.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collector.service import BackgroundService, Service
from semconv import emit
from tests.support.browser import Page, drawn_charts, needs_chromium
from tests.support.helpers import (
    REPO,
    fast_assembler,
    judged_example_app,
    make_config,
    run_ragpulse,
    sdk_tracer_provider,
    sql,
    wait_for,
)
from tests.support.openai_stub import lexical_verdict

TRACES_PER_MODE = 12
MODES = ("healthy", "degraded", "hallucinate")
SECOND_SERVICE = "second-bot"  # one healthy run under another service name
TOTAL = (len(MODES) + 1) * TRACES_PER_MODE
CALIBRATION_CASES = REPO / "examples" / "calibration" / "cases.yaml"

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One service: the example app's three modes, every trace judged by the lexical judge, an alert
    that fires on faithfulness, and one judge canary run."""
    with judged_example_app(
        tmp_path_factory.mktemp("dashboard-ui"),
        [*MODES, ("healthy", SECOND_SERVICE)],
        lexical_verdict,
        judge={"input_cost_per_million": 0.15, "output_cost_per_million": 0.6},
        monitoring={
            "evaluate_every": 0.5,
            "alerts": [
                {
                    "name": "faithfulness-low",
                    "score": "faithfulness",
                    "min": 0.9,
                    "window": 3600,
                    "min_samples": 10,
                    "severity": "critical",
                },
            ],
            "canaries": {"cases": str(CALIBRATION_CASES), "every": 3600, "sample": 4},
        },
    ) as service:
        firing = "SELECT count(*) AS n FROM alerts WHERE state = 'firing'"
        wait_for(lambda: sql(service, firing)[0]["n"] == 1, timeout=30)
        wait_for(lambda: sql(service, "SELECT count(*) AS n FROM canary_runs")[0]["n"] >= 1, timeout=30)
        yield service


def test_overview_draws_scores_charts_and_judge_usage(served: Service, tab: Page) -> None:
    page = tab.open(f"{served.http_url}/#/overview")
    assert page.title() == "ragpulse"
    rows = page.locator("#score-table tbody tr")
    names = [rows.nth(i).locator("td").first.inner_text() for i in range(rows.count())]
    assert "faithfulness" in names and "retrieval.recall@5" in names
    assert drawn_charts(page) >= 5  # means, pass rates, error rates, traffic, latency
    kpis = {k.split("\n")[1]: k.split("\n")[0] for k in page.locator(".kpi").all_inner_texts()}
    assert kpis["traces"] == str(TOTAL)
    assert kpis["p50 latency"].endswith("ms") and kpis["p95 latency"].endswith("ms")  # over both services
    assert kpis["judge cost"].startswith("$")
    assert page.locator("#service-table tbody tr").count() == 2
    page.wait_for_selector("#regressions[data-state=done]")  # it arrives after the rest
    assert "Not enough scores in both windows" in page.inner_text("#regressions")
    tab.screenshot("overview")
    # One service: its figures only.
    page = tab.after(lambda: tab.page.select_option("#service", SECOND_SERVICE))
    assert page.locator(".kpi").first.inner_text().startswith(str(TRACES_PER_MODE))
    assert page.locator("#service-table tbody tr").all_inner_texts()[0].startswith(SECOND_SERVICE)
    assert page.locator("#service-table tbody tr").count() == 1
    page.wait_for_selector("#regressions[data-state=done]")
    assert tab.problems == []


def test_chart_buckets_without_data_are_gaps_not_lines(served: Service, tab: Page) -> None:
    """Every bucket of the window is on the chart: one with no traffic is 0 traces, one with no
    score is a gap (null), never a line drawn across the silence."""
    page = tab.open(f"{served.http_url}/#/alerts")
    buckets = ["2026-12-04 10:00:00", "2026-12-04 10:01:00", "2026-12-04 10:02:00"]
    rows = [
        {"t": "2026-12-04T10:00:00", "name": "faithfulness", "mean": 0.9, "traces": 4},
        {"t": "2026-12-04T10:02:00", "name": "faithfulness", "mean": 0.5, "traces": 2},
        {"t": "2026-12-04T10:01:00", "name": "citation", "mean": None, "traces": 1},
    ]
    series = page.evaluate("([b, r]) => pivot(b, r, 'mean')", [buckets, rows])
    assert series == [{"label": "faithfulness", "color": series[0]["color"], "values": [0.9, None, 0.5]}]
    traffic = page.evaluate("([b, r]) => column(b, r.slice(0, 2), 'traces', 0)", [buckets, rows])
    assert traffic == [4, 0, 2]


def test_trace_list_filters_sort_and_pages(served: Service, tab: Page) -> None:
    page = tab.open(f"{served.http_url}/#/traces")
    total = TOTAL
    assert page.inner_text("#trace-count") == f"1\u2013{total} of {total} traces"
    tab.screenshot("traces")

    # The failing evaluator, chosen in its select.
    page = tab.after(lambda: tab.page.select_option("select[name=failing]", "faithfulness"))
    assert "failing=faithfulness" in page.evaluate("location.hash")
    failing = page.locator("#trace-table tbody tr").count()
    assert 0 < failing < total
    assert page.inner_text("#trace-count").endswith(f"of {failing} traces")
    # Selecting in the form changes the list: traces whose recall is below 0.5.
    page = tab.navigate("#/traces")
    page.select_option("select[name=score]", "retrieval.recall@5")
    page.fill("input[name=below]", "0.5")
    tab.after(lambda: page.click("#trace-filters button[type=submit]"))
    assert "score=retrieval.recall%405" in page.evaluate("location.hash")
    low_recall = page.locator("#trace-table tbody tr").count()
    assert 0 < low_recall < total

    page = tab.navigate("#/traces?q=zzzz-no-such-text")
    assert page.locator("text=No trace matches these filters.").count() == 1
    page = tab.after(lambda: tab.page.click("text=Clear"))
    assert page.inner_text("#trace-count") == f"1\u2013{total} of {total} traces"

    page = tab.navigate("#/traces?limit=10")
    assert page.inner_text("#trace-count") == f"1\u201310 of {total} traces"
    first_page = page.locator("#trace-table tbody tr").first.get_attribute("data-trace")
    tab.after(lambda: page.click("#next"))
    assert page.inner_text("#trace-count") == f"11\u201320 of {total} traces"
    assert page.locator("#trace-table tbody tr").first.get_attribute("data-trace") != first_page
    tab.after(lambda: page.click("#prev"))
    assert page.inner_text("#trace-count") == f"1\u201310 of {total} traces"
    # Sorting by duration from the column header: longest first, then shortest first on a second click.
    tab.after(lambda: page.click("th[data-sort=duration_ms]"))
    assert "sort=duration_ms&order=desc" in page.evaluate("location.hash")
    longest = [float(t) for t in page.locator("#trace-table tbody tr").evaluate_all(DURATIONS)]
    tab.after(lambda: page.click("th[data-sort=duration_ms]"))
    assert "order=asc" in page.evaluate("location.hash")
    assert page.inner_text("th[data-sort=duration_ms]").endswith("\u25b2")
    shortest = [float(t) for t in page.locator("#trace-table tbody tr").evaluate_all(DURATIONS)]
    assert longest == sorted(longest, reverse=True) and shortest == sorted(shortest)
    assert shortest[0] <= longest[-1]
    # Past the last page (an old link): said so, with the way back.
    page = tab.navigate("#/traces?limit=10&offset=1000")
    assert page.inner_text("#trace-count").startswith("Past the last page")
    page = tab.after(lambda: tab.page.click("#first"))
    assert page.inner_text("#trace-count").startswith("1\u2013")
    assert tab.problems == []


TITLES = "cells => cells.map(c => c.title)"
# Each row's duration in ms, from the API's value kept on the row.
DURATIONS = "rows => rows.map(r => r.dataset.duration)"


def open_trace_where_faithfulness(served: Service, tab: Page, status: str) -> Any:
    """The trace view of the first trace whose faithfulness score has this status."""
    (row,) = sql(
        served,
        f"SELECT trace_id FROM scores WHERE name = 'faithfulness' AND status = '{status}' "
        "ORDER BY trace_id LIMIT 1",
    )
    return tab.open(f"{served.http_url}/#/trace/{row['trace_id']}")


def test_trace_view_shows_steps_documents_and_judged_claims(served: Service, tab: Page) -> None:
    page = open_trace_where_faithfulness(served, tab, "fail")
    assert page.inner_text(".question").strip() and page.inner_text(".answer").strip()
    assert page.locator(".timeline .row").count() >= 2  # retrieval and generation at least
    assert page.locator(".documents tbody tr").count() >= 1
    faithfulness = page.locator("[data-score=faithfulness]")
    assert faithfulness.get_attribute("open") is not None  # a failed score opens by itself
    assert "fail" in faithfulness.locator("summary").inner_text()
    claims = faithfulness.locator(".claims li")
    assert claims.count() >= 1
    assert faithfulness.locator(".claims li.bad").count() >= 1  # the unsupported claim
    assert "judge judge-test" in faithfulness.locator(".provenance").inner_text()
    tab.screenshot("trace")
    assert tab.problems == []


def test_a_supported_claim_shows_its_evidence_quote(served: Service, tab: Page) -> None:
    page = open_trace_where_faithfulness(served, tab, "pass")
    faithfulness = page.locator("[data-score=faithfulness]")
    assert faithfulness.get_attribute("open") is None  # a passing score is one line until opened
    faithfulness.locator("summary").click()
    ok_claims = faithfulness.locator(".claims li.ok")
    assert ok_claims.count() >= 1
    assert ok_claims.first.locator(".evidence").inner_text().startswith("“")
    assert tab.problems == []


def test_alerts_page_shows_states_history_and_canaries(served: Service, tab: Page) -> None:
    page = tab.open(f"{served.http_url}/#/alerts")
    (alert,) = [
        row for row in page.locator("#alerts tbody tr").all_inner_texts() if "faithfulness-low" in row
    ]
    assert "faithfulness-low" in alert and "firing" in alert and "critical" in alert
    assert "faithfulness-low" in page.locator("#alert-events tbody tr").first.inner_text()
    assert page.locator("#canary-runs tbody tr").count() >= 1
    assert drawn_charts(page) == 1  # canary accuracy and shift
    tab.screenshot("alerts")
    # The overview says what fires, and links here.
    page = tab.navigate("#/overview")
    assert "faithfulness-low" in page.locator(".banner.alert").inner_text()
    page.wait_for_selector("#regressions[data-state=done]")
    assert tab.problems == []


def test_an_api_error_is_shown_not_swallowed(served: Service, tab: Page) -> None:
    page = tab.open(f"{served.http_url}/#/trace/not-hex")
    banner = page.locator(".banner.err")
    assert "trace_id: a hex trace id" in banner.inner_text()
    # The browser logs the failed request (400) itself; nothing else went wrong.
    assert all("400" in p for p in tab.problems), tab.problems


def test_an_empty_window_says_how_to_send_traces(served: Service, tab: Page) -> None:
    page = tab.open(f"{served.http_url}/")
    page.wait_for_selector("#regressions[data-state=done]")  # a reload would cut its request short
    page.evaluate("sessionStorage.setItem('ragpulse.service', 'no-such-service')")
    page.reload()
    page.wait_for_selector("main[data-ready]")
    empty = page.locator(".empty")
    assert "No traces in the last 24h for no-such-service" in empty.inner_text()
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=http://" in empty.inner_text()
    tab.screenshot("empty")
    assert tab.problems == []


def test_report_opens_offline_from_a_file(served: Service, browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = run_ragpulse(
        "report",
        "--server",
        served.http_url,
        "--since",
        "1h",
        "--worst",
        "5",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "the 5 worst traces in full" in result.stdout
    tab = Page(browser, offline=True)
    requested: list[str] = []
    tab.page.on("request", lambda request: requested.append(request.url))
    try:
        page = tab.open(out.as_uri())
        assert requested == [out.as_uri()]  # the file itself, nothing else
        assert page.locator("main").get_attribute("data-ready") == "report"
        assert drawn_charts(page) >= 5
        assert page.locator("#trace-table tbody tr").count() == 5
        sections = page.locator("section.trace-section")
        assert sections.count() == 5
        # The worst traces come with their failing claims, the most failed scores first among ties.
        assert page.locator("section.trace-section .claims li.bad").count() >= 1
        failing = [len(f.split(",")) for f in page.locator("#trace-table td.failing").evaluate_all(TITLES)]
        assert failing == sorted(failing, reverse=True)
        page.locator("#worst").scroll_into_view_if_needed()
        tab.screenshot("report", full_page=False)
        assert tab.problems == []
    finally:
        tab.close()


HOSTILE = '<img src=x onerror="window.__pwned=1"></script><script>window.__pwned=2</script><!--'


def test_span_text_is_shown_as_text_never_run(browser: Any, tmp_path: Path) -> None:
    """Service name, question, answer, documents and what scores say of them come from the app's
    spans: markup in them is shown, not run, in the page and in the report (where the data sits
    inside a <script>)."""
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as service:
        provider = sdk_tracer_provider(service, HOSTILE)
        tracer = provider.get_tracer("test")
        with emit.request(tracer, HOSTILE) as request:
            request.expected(documents=["doc-a"])
            with emit.retrieval(tracer, HOSTILE) as retrieval:
                retrieval.documents([{"id": HOSTILE, "content": HOSTILE, "score": 0.5}])
            with emit.chat(tracer, "model") as chat:
                chat.output(HOSTILE)
            request.answer(HOSTILE)
        provider.shutdown()
        wait_for(lambda: sql(service, "SELECT count(*) AS n FROM scores")[0]["n"] > 0, timeout=30)
        (trace,) = sql(service, "SELECT trace_id FROM traces")
        out = tmp_path / "report.html"
        result = run_ragpulse("report", "--server", service.http_url, "--out", str(out), cwd=tmp_path)
        assert result.returncode == 0, result.stderr

        for url in (f"{service.http_url}/#/trace/{trace['trace_id']}", out.as_uri()):
            tab = Page(browser, offline=url.startswith("file:"))
            try:
                page = tab.open(url)
                assert page.evaluate("window.__pwned") is None
                assert tab.shown(".question").inner_text() == HOSTILE
                assert HOSTILE in page.locator(".documents").first.inner_text()
                assert HOSTILE in page.locator(".meta").first.inner_text()  # the service name
                recall = page.locator("[data-score='retrieval.recall@5']").first
                assert HOSTILE in recall.locator(".claims").inner_text()  # the retrieved id, not expected
                assert page.locator("main img").count() == 0
                assert tab.problems == []
            finally:
                tab.close()

    # Stopped, the database file is read directly (no server): the same report, the text escaped.
    from_file = tmp_path / "from-file.html"
    result = run_ragpulse(
        "report", "--db", str(tmp_path / "ragpulse.duckdb"), "--out", str(from_file), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "</script><script>window.__pwned" not in from_file.read_text()
    assert "\\u003c/script>\\u003cscript>window.__pwned" in from_file.read_text()
