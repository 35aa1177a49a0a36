"""Slices and probes in the dashboard, looked at in a real headless Chromium (as in
test_dashboard_ui.py, with the same browser, tab and helpers: conftest.py, tests/support/browser.py).

One service declares `monitoring.dimensions` (category from a span attribute, version from the
resource) and is fed through the OpenTelemetry SDK with three hours of traffic, one round of
requests per chart bucket (spans dated in the past): refunds questions whose retrieval finds the
expected document, questions with no category that do too, and shipping questions that do until
version 1.5 is deployed halfway, and miss it after. It also runs a probe against a real
instrumented HTTP app (tests/support/probe_app.py): one run with the app healthy, one with its
retrieval degraded.

The tests check that the overview's slice filter changes its figures, that a split by category
draws a line per category and tabulates each category's scores, that the trace list filters by a
slice, that the probes page lists the runs and a run shows its cases with their scores and traces,
that a service with no probe says how to set one up, and that the report still opens. Every page
loads with no console error. With RAGPULSE_SCREENSHOTS=DIR, the split overview and a probe run
are saved there (overview-split.png, probe-run.png).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.sdk.trace import TracerProvider

from collector.config import Config
from collector.service import BackgroundService, Service
from tests.support.browser import SCREENSHOTS, Page, drawn_charts, needs_chromium
from tests.support.helpers import (
    EarlierTracer,
    emit_topic_request,
    fast_assembler,
    free_port,
    run_ragpulse,
    sql,
    versioned_provider,
    wait_for,
)
from tests.support.probe_app import ProbeApp

pytestmark = needs_chromium  # skipped without Chromium, outside CI

HIT = "retrieval.hit@5"
RECALL = "retrieval.recall@5"
DIMENSIONS = [
    {"name": "category", "attribute": "rag.category"},
    {"name": "version", "resource": "service.version"},
]
# One round of requests per 24-minute bucket (the overview's buckets over 24 hours), the oldest
# first; version 1.5 from the fifth round on. A round: refunds, shipping, and every other round a
# question with no category. Shipping's retrieval finds its document under 1.4 only.
ROUNDS = 8
BUCKET = 24 * 60
DEPLOYED = 4  # the first round of version 1.5
APP_TRACES = 2 * ROUNDS + ROUNDS // 2
PROBE = "golden"
CASES = [
    {
        "id": "refund-window",
        "question": "How long do I have to return an item for a refund?",
        "expected_documents": ["returns-policy"],
    },
    {
        "id": "shipping",
        "question": "How long does shipping take to deliver my order?",
        "expected_documents": ["shipping-times"],
    },
    {
        "id": "warranty",
        "question": "Is there a warranty on electronics with a defect?",
        "expected_documents": ["warranty"],
    },
]


@dataclass
class Sliced:
    service: Service
    runs: dict[str, dict[str, Any]]  # the probe app's mode -> its run (a probe_runs row)


def _send(provider: TracerProvider, category: str | None, right: bool, ago: float) -> None:
    """A request `ago` seconds ago (of the category, when given) whose retrieval finds its expected
    document or not."""
    topic = category or "opening hours"
    tracer: Any = EarlierTracer(provider.get_tracer("shop"), ago)
    emit_topic_request(tracer, f"A question about {topic}?", topic, category, right)


def _finished_runs(service: Service) -> list[dict[str, Any]]:
    return sql(
        service,
        f"SELECT run_id, status, started_at FROM probe_runs WHERE probe = '{PROBE}' "
        "AND status <> 'running' ORDER BY started_at",
    )


@pytest.fixture(scope="module")
def sliced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sliced]:
    """The sliced service, fed, with two probe runs (healthy at start-up, then degraded, both now)."""
    tmp = tmp_path_factory.mktemp("dashboard-slices")
    cases = tmp / "cases.yaml"
    cases.write_text(yaml.safe_dump({"cases": CASES}), encoding="utf-8")
    grpc_port = free_port()  # the probe app exports there, so it is chosen before the service starts
    with ProbeApp(f"127.0.0.1:{grpc_port}") as app:
        config = Config.model_validate(
            {
                "receivers": {"host": "127.0.0.1", "grpc_port": grpc_port, "http_port": 0},
                "store": {"path": str(tmp / "ragpulse.duckdb")},
                "assembler": {"workers": 0, **fast_assembler()},
                "monitoring": {"dimensions": DIMENSIONS},
                "probes": [
                    {
                        "name": PROBE,
                        "cases": str(cases),
                        "every": 3600,
                        "wait": 10,
                        "request": {"url": app.url, "json": {"question": "{question}"}},
                    }
                ],
            }
        )
        with BackgroundService(config) as service:
            old, new = versioned_provider(service, "1.4"), versioned_provider(service, "1.5")
            for i in range(ROUNDS):
                ago = (ROUNDS - 1 - i) * BUCKET + 300  # a round in each of the last buckets
                provider = old if i < DEPLOYED else new
                _send(provider, "refunds", True, ago)
                _send(provider, "shipping", i < DEPLOYED, ago)
                if i % 2:
                    _send(provider, None, True, ago)
            old.shutdown()
            new.shutdown()
            wait_for(
                lambda: sql(service, "SELECT count(DISTINCT trace_id) AS n FROM scores WHERE probe IS NULL"),
                lambda rows: rows[0]["n"] == APP_TRACES,
                timeout=60,
                what="every app trace scored",
            )
            (healthy,) = wait_for(lambda: _finished_runs(service), timeout=30, what="the start-up probe run")
            assert service.probe_runner is not None
            app.mode = "degraded"
            service.probe_runner.run_once(PROBE)
            degraded = _finished_runs(service)[-1]
            assert degraded["run_id"] != healthy["run_id"]
            yield Sliced(service, {"healthy": healthy, "degraded": degraded})


def screenshot_down_to(tab: Page, name: str, selector: str) -> None:
    """As `Page.screenshot`, from the top of the page down to the end of `selector`."""
    if SCREENSHOTS:
        bottom = tab.page.locator(selector).evaluate("e => e.getBoundingClientRect().bottom + window.scrollY")
        clip = {"x": 0, "y": 0, "width": tab.page.viewport_size["width"], "height": bottom + 10}
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        tab.page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True, clip=clip)


def choose(tab: Page, select: str, value: str) -> Any:
    """Choose `value` in a select of the page and wait for what it leads to."""
    return tab.after(lambda: tab.page.select_option(select, value))


def slice_columns(page: Any) -> list[str]:
    """The slices of the split table's columns, in order."""
    cells = page.locator("#slice-table thead th[data-slice]")
    return [str(s) for s in cells.evaluate_all("ths => ths.map(t => t.dataset.slice)")]


def kpis(page: Any) -> dict[str, str]:
    """The overview's figures by label."""
    return {k.split("\n")[1]: k.split("\n")[0] for k in page.locator(".kpi").all_inner_texts()}


def score_mean(page: Any, name: str) -> str:
    """A score's mean in the overview's score table."""
    row = page.locator("#score-table tbody tr", has=page.locator("td", has_text=name)).first
    return str(row.locator("td").nth(2).inner_text())


def legend(page: Any, chart_id: str) -> list[str]:
    """The series labels of a uPlot chart's legend (the time axis left out)."""
    labels = page.locator(f"#{chart_id} .u-legend .u-series .u-label").all_inner_texts()
    return [label for label in labels if label not in ("", "Time", "Value")]


def test_the_slice_filter_changes_the_overview_to_that_slice(sliced: Sliced, tab: Page) -> None:
    page = tab.open(f"{sliced.service.http_url}/#/overview")
    assert kpis(page)["traces"] == str(APP_TRACES)  # probe traffic is apart
    options = page.locator("#overview-filters select[name=slice] option").evaluate_all(
        "options => options.map(o => o.value)"
    )
    assert set(options) == {
        "",
        "category=refunds",
        "category=shipping",
        "category=(none)",
        "version=1.4",
        "version=1.5",
    }
    assert page.locator("#overview-scope").count() == 0
    page.wait_for_selector("#regressions[data-state=done]")

    page = choose(tab, "#overview-filters select[name=slice]", "category=shipping")
    assert "slice=category%3Dshipping" in page.evaluate("location.hash")
    assert kpis(page)["traces"] == str(ROUNDS)
    assert score_mean(page, HIT) == "0.5"  # found before the deploy, missed after
    assert "category=shipping" in page.inner_text("#overview-scope")
    # Within the slice, every other slice is still offered.
    assert page.locator("#overview-filters select[name=slice] option[value='category=refunds']").count() == 1
    assert page.input_value("#overview-filters select[name=slice]") == "category=shipping"
    page.wait_for_selector("#regressions[data-state=done]")  # the regressions of the slice, no error

    page = choose(tab, "#overview-filters select[name=slice]", "category=(none)")
    assert kpis(page)["traces"] == str(ROUNDS // 2)
    assert score_mean(page, HIT) == "1"
    page.wait_for_selector("#regressions[data-state=done]")

    # A link reproduces the view, in a page loaded afresh.
    tab.page.goto("about:blank")
    page = tab.open(f"{sliced.service.http_url}/#/overview?slice=version%3D1.4")
    assert kpis(page)["traces"] == str(2 * DEPLOYED + DEPLOYED // 2)  # the rounds before the deploy
    assert page.input_value("#overview-filters select[name=slice]") == "version=1.4"
    page.wait_for_selector("#regressions[data-state=done]")
    page = tab.after(lambda: tab.page.click("#overview-filters button"))  # Clear
    assert kpis(page)["traces"] == str(APP_TRACES)
    page.wait_for_selector("#regressions[data-state=done]")
    assert tab.problems == []


def test_a_split_by_category_draws_a_line_and_a_column_per_category(sliced: Sliced, tab: Page) -> None:
    page = tab.open(f"{sliced.service.http_url}/#/overview")
    page = choose(tab, "#overview-filters select[name=by]", "category")
    assert "by=category" in page.evaluate("location.hash")
    columns = slice_columns(page)
    assert columns == ["refunds", "shipping", "(none)"]  # most scores first, no value last
    hit = page.locator(f"#slice-table tbody tr[data-score='{HIT}']")
    means = {s: hit.locator(f"td[data-slice='{s}'] .mean").inner_text() for s in columns}
    assert means == {"refunds": "1", "shipping": "0.5", "(none)": "1"}
    assert "50.0 % pass" in hit.locator("td[data-slice='shipping']").inner_text()
    assert f"n {ROUNDS}" in hit.locator("td[data-slice='shipping']").inner_text()
    # A score no trace had a reference for is named, not tabulated.
    assert page.locator("#slice-table tbody tr[data-score=answer_correctness]").count() == 0
    assert "answer_correctness" in page.inner_text("#slice-skipped")

    # The charts of one score, picked in its select: a line per category.
    page = choose(tab, "#split-score select[name=score]", HIT)
    assert "score=retrieval.hit%405" in page.evaluate("location.hash")
    assert page.locator(f"#slice-table tbody tr.picked[data-score='{HIT}']").count() == 1
    assert legend(page, "split-mean") == columns
    assert legend(page, "split-pass") == columns
    assert drawn_charts(page) >= 8  # three split charts and the five trends
    page.wait_for_selector("#regressions[data-state=done]")
    screenshot_down_to(tab, "overview-split", "#split-charts")

    # A split within a slice: shipping by version, where the deploy broke its retrieval.
    page = choose(tab, "#overview-filters select[name=slice]", "category=shipping")
    page = choose(tab, "#overview-filters select[name=by]", "version")
    versions = slice_columns(page)
    assert sorted(versions) == ["1.4", "1.5"]
    hit = page.locator(f"#slice-table tbody tr[data-score='{HIT}']")
    means = {v: hit.locator(f"td[data-slice='{v}'] .mean").inner_text() for v in versions}
    assert means == {"1.4": "1", "1.5": "0"}
    assert page.locator("#slice-table thead th.num").first.inner_text() == "category=shipping"
    assert legend(page, "split-mean") == versions
    page.wait_for_selector("#regressions[data-state=done]")

    # A column's header leads to that slice's traces.
    page = tab.navigate("#/overview?by=category")
    page.wait_for_selector("#regressions[data-state=done]")
    page = tab.after(lambda: tab.page.click("#slice-table th[data-slice='shipping'] a"))
    assert "slice=category%3Dshipping" in page.evaluate("location.hash")
    assert page.inner_text("#trace-count") == f"1\u2013{ROUNDS} of {ROUNDS} traces"
    assert page.input_value("#trace-filters select[name=slice]") == "category=shipping"
    assert tab.problems == []


def test_the_trace_list_filters_by_a_slice(sliced: Sliced, tab: Page) -> None:
    page = tab.open(f"{sliced.service.http_url}/#/traces")
    # The app's own traffic: the probe runs' traces are listed under their probe only.
    assert page.inner_text("#trace-count") == f"1\u2013{APP_TRACES} of {APP_TRACES} traces"
    page = choose(tab, "#trace-filters select[name=slice]", "category=(none)")
    assert "slice=category%3D%28none%29" in page.evaluate("location.hash")
    none = ROUNDS // 2  # the app's traces without a category
    assert page.inner_text("#trace-count") == f"1\u2013{none} of {none} traces"
    page = choose(tab, "#trace-filters select[name=slice]", "category=refunds")
    questions = page.locator("#trace-table tbody td.clip").all_inner_texts()
    assert len(questions) == 2 * ROUNDS and all("refunds" in q for q in questions)  # question and answer
    # Filters together: the failing evaluator within a slice (shipping since the deploy).
    page = tab.navigate("#/traces?slice=category%3Dshipping&failing=retrieval.hit%405")
    failing = ROUNDS - DEPLOYED
    assert page.inner_text("#trace-count") == f"1\u2013{failing} of {failing} traces"
    page = tab.navigate("#/traces?slice=category%3Drefunds&failing=retrieval.hit%405")
    assert page.locator("text=No trace matches these filters.").count() == 1
    page = tab.navigate(f"#/traces?probe={PROBE}")
    probe_traces = 2 * len(CASES)  # the two probe runs' traces, listed under their probe
    assert page.inner_text("#trace-count") == f"1\u2013{probe_traces} of {probe_traces} traces"
    assert tab.problems == []


def test_an_undeclared_dimension_is_the_apis_error(sliced: Sliced, tab: Page) -> None:
    page = tab.open(f"{sliced.service.http_url}/#/overview?by=colour")
    assert "by: not a declared dimension" in page.locator(".banner.err").inner_text()
    assert tab.problems and all("400" in p for p in tab.problems), tab.problems


def test_the_probes_page_lists_runs_and_a_run_shows_its_cases(sliced: Sliced, tab: Page) -> None:
    healthy, degraded = sliced.runs["healthy"]["run_id"], sliced.runs["degraded"]["run_id"]
    page = tab.open(f"{sliced.service.http_url}/#/probes")
    assert page.locator("#nav a.active").inner_text() == "Probes"
    rows = page.locator("#probe-runs tbody tr")
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.run)") == [degraded, healthy]  # newest first
    cells = rows.first.locator("td").all_inner_texts()
    # started, probe, status, duration, cases, answered, errors, traces received, missing traces, ...
    assert cells[1:3] == [PROBE, "done"] and cells[4:9] == ["3", "3", "0", "3", "0"]
    assert RECALL in rows.first.locator("td.failing").get_attribute("title")
    assert RECALL not in rows.nth(1).locator("td.failing").get_attribute("title")
    assert drawn_charts(page) == 2  # score means and pass rates, run after run
    assert page.inner_text("#probe-count").startswith("The 2 most recent runs of every probe, newest first.")
    # One run is not "the only run of every probe".
    wording = [page.evaluate(f"probeRunCount(1, {probe})") for probe in ("null", f"'{PROBE}'")]
    assert [w.strip() for w in wording] == ["One run of a probe so far.", "One run so far."]
    # One probe's runs, and its traffic's figures on the overview (the app's own leave it out).
    page = tab.navigate(f"#/probes?probe={PROBE}")
    assert page.locator("#probe-runs tbody tr").count() == 2
    page = tab.after(lambda: tab.page.click("text=its figures on the overview"))
    assert kpis(page)["traces"] == str(2 * len(CASES))
    assert f"Probe {PROBE}'s traffic" in page.inner_text("#overview-scope")
    page.wait_for_selector("#regressions[data-state=done]")
    page = tab.navigate("#/probes")

    page = tab.after(lambda: rows.first.locator("td").nth(4).click())  # a row opens its run
    assert page.evaluate("location.hash") == f"#/probe/{degraded}"
    counts = kpis(page)
    assert (counts["cases"], counts["answered"], counts["errors"]) == ("3", "3", "0")
    assert (counts["traces received"], counts["missing traces"]) == ("3", "0")
    cases = page.locator("#probe-cases tbody tr")
    ids = cases.evaluate_all("rows => rows.map(r => r.dataset.case)")
    assert sorted(ids) == sorted(str(c["id"]) for c in CASES)
    for i in range(cases.count()):
        case = cases.nth(i)
        assert case.locator("td").nth(2).inner_text().strip() == "200"
        assert case.locator("td").nth(4).inner_text().strip() == "yes"
        recall = case.locator(f".case-scores [data-score='{RECALL}']")
        assert "fail" in (recall.get_attribute("class") or "") and recall.inner_text() == f"{RECALL} 0"
    # Against the healthy run before it: recall fell from 1 to 0.
    recall_row = page.locator(f"#probe-summary tr[data-score='{RECALL}'] td").all_inner_texts()
    assert recall_row[6:] == ["0", "0.0 %", "1", "-1"]
    assert page.locator(f"#probe-summary tr[data-score='{RECALL}'] td.worse").count() == 1
    tab.screenshot("probe-run")

    # A case's trace opens in the trace view.
    shipping = page.locator("#probe-cases tbody tr[data-case='shipping']")
    page = tab.after(lambda: shipping.locator("a", has_text="trace").click())
    assert page.evaluate("location.hash").startswith("#/trace/")
    assert page.inner_text(".question") == "How long does shipping take to deliver my order?"

    # The healthy run, by its id: every recall passed, and it has no run before it to compare with.
    page = tab.navigate(f"#/probe/{healthy}")
    recalls = page.locator(f"#probe-cases .case-scores [data-score='{RECALL}']")
    assert recalls.count() == 3
    assert all("pass" in (c or "") for c in recalls.evaluate_all("els => els.map(e => e.className)"))
    assert page.locator("#probe-summary th", has_text="change").count() == 0

    # The probe's traces, from its link.
    page = tab.after(lambda: tab.page.click("text=the probe's traces"))
    assert page.inner_text("#trace-count") == f"1\u2013{2 * len(CASES)} of {2 * len(CASES)} traces"
    assert page.input_value("#trace-filters select[name=probe]") == PROBE
    assert tab.problems == []


def test_an_unknown_probe_run_is_the_apis_error(sliced: Sliced, tab: Page) -> None:
    page = tab.open(f"{sliced.service.http_url}/#/probe/nosuchrun")
    assert "no probe run 'nosuchrun'" in page.locator(".banner.err").inner_text()
    assert page.locator("#nav a.active").inner_text() == "Probes"
    assert tab.problems and all("404" in p for p in tab.problems), tab.problems


def test_without_probes_or_dimensions_the_pages_say_what_to_configure(service: Service, tab: Page) -> None:
    page = tab.open(f"{service.http_url}/#/probes")
    empty = page.locator(".empty").inner_text()
    assert "No probe run yet" in empty and "docs/probes.md" in empty
    assert "probes:\n  - name:" in empty
    page = tab.navigate("#/overview")
    assert page.locator("#overview-filters").count() == 0  # no dimension declared: no slice controls
    page = tab.navigate("#/traces")
    assert page.locator("#trace-filters select[name=slice]").count() == 0
    assert tab.problems == []


def test_the_report_of_a_sliced_service_still_opens(sliced: Sliced, browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = run_ragpulse(
        "report", "--server", sliced.service.http_url, "--worst", "3", "--out", str(out), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    tab = Page(browser, offline=True)
    try:
        page = tab.open(out.as_uri())
        assert page.locator("main").get_attribute("data-ready") == "report"
        assert kpis(page)["traces"] == str(APP_TRACES)
        assert page.locator("#score-table tbody tr").count() >= 1
        assert page.locator("#overview-filters").count() == 0  # a report has no controls
        assert drawn_charts(page) >= 5
        assert page.locator("section.trace-section").count() == 3
        assert tab.problems == []
    finally:
        tab.close()
