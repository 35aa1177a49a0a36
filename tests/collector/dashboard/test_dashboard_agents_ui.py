"""An agent's trace in the dashboard, looked at in headless Chromium: the timeline shows each tool
call with its tool and arguments, each retrieval round with its query and documents, and the failed
tool call marked; the overview shows the tool error rate.

With RAGPULSE_SCREENSHOTS=DIR (`make screenshots`), the pages are saved there as PNGs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.service import BackgroundService, Service
from tests.support.agentic import FIRST_QUERY, SECOND_QUERY, emit_genai_agent, expected_ids
from tests.support.browser import Page, needs_chromium
from tests.support.helpers import fast_assembler, make_config, sdk_tracer_provider, sql, wait_for

pytestmark = needs_chromium  # skipped without Chromium, outside CI


@pytest.fixture(scope="module")
def agent_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str]]:
    """A service holding three agent traces, one of which has a failed tool call."""
    tmp_path: Path = tmp_path_factory.mktemp("agents-ui")
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as service:
        provider = sdk_tracer_provider(service, "shop-agent")
        tracer = provider.get_tracer("agent-app")
        failed = emit_genai_agent(tracer, failed_tool=True)
        emit_genai_agent(tracer)
        emit_genai_agent(tracer)
        provider.shutdown()
        wait_for(
            lambda: sql(service, "SELECT count(*) AS n FROM scores WHERE name = 'faithfulness'")[0]["n"],
            lambda n: n == 3,
            timeout=30,
            what="three scored agent traces",
        )
        yield service, failed


def test_the_timeline_shows_rounds_tools_and_the_failed_call(
    agent_service: tuple[Service, str], tab: Page
) -> None:
    service, trace_id = agent_service
    page = tab.open(f"{service.http_url}/#/trace/{trace_id}")
    rows = page.locator(".timeline .row")
    tab.shown(".timeline .row[data-kind=retrieval]")
    labels = [rows.nth(i).locator(".clip").inner_text() for i in range(rows.count())]
    assert [label.split()[0] for label in labels] == [
        "chain",
        "llm",
        "retrieval",
        "llm",
        "tool",
        "llm",
        "retrieval",
        "llm",
    ]
    rounds = page.locator(".timeline .row[data-kind=retrieval]")
    assert rounds.nth(0).locator(".clip").inner_text().startswith("retrieval 1 search_docs")
    for index, query in enumerate((FIRST_QUERY, SECOND_QUERY)):
        detail = rounds.nth(index).locator(".detail.round")
        assert query in detail.inner_text()
        chips = detail.locator(".doc").all_inner_texts()
        assert chips == [f"#{rank} {doc_id}" for rank, doc_id in enumerate(expected_ids(query), start=1)]
    failed = page.locator(".timeline .row.failed")
    assert failed.count() == 1
    assert "get_order_status" in failed.locator(".clip").inner_text()
    assert "tool failed" in failed.inner_text()
    assert '"order_id": "A-1001"' in failed.locator(".detail").inner_text()
    tab.screenshot("agent-trace")
    assert tab.problems == []


def test_the_overview_shows_the_tool_error_rate(agent_service: tuple[Service, str], tab: Page) -> None:
    service, _ = agent_service
    tab.open(f"{service.http_url}/#/overview")
    kpi = tab.shown("[data-kpi=tool-errors]")
    # Three traces: six searches, one order-status call that failed.
    assert kpi.locator(".value").inner_text() == "14.3 %"
    assert "1 of 7 tool calls" in kpi.inner_text()
    tab.screenshot("agent-overview")
    assert tab.problems == []
