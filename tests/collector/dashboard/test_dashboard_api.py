"""The dashboard's JSON API against a running service fed by the example app (healthy and degraded
modes, every trace judged by a test judge): shapes, pagination, filters, sorting, one trace in full,
bad parameters, and that nothing can be written through it."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from collector.service import Service
from tests.support.helpers import run_ragpulse, sql

TRACES_PER_MODE = 12  # the example app's question set


@pytest.fixture(scope="module")
def served(judged_shop: Service) -> Service:
    """12 healthy and 12 degraded traces of the example app, all scored, judge included."""
    return judged_shop


def get(service: Service, path: str, /, **params: Any) -> httpx.Response:
    return httpx.get(f"{service.http_url}{path}", params=params, timeout=30)


def ok(service: Service, path: str, /, **params: Any) -> dict[str, Any]:
    response = get(service, path, **params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_overview_has_scores_trends_traffic_services_and_judge_usage(served: Service) -> None:
    body = ok(served, "/api/overview", since="1h")
    scores = {s["name"]: s for s in body["scores"]}
    recall = scores["retrieval.recall@5"]
    # Half the traces (degraded) retrieve from the wrong index: recall fails on them.
    assert recall["n"] == 2 * TRACES_PER_MODE and recall["n_fail"] >= TRACES_PER_MODE
    assert 0 <= recall["mean"] <= 0.5 and recall["pass_rate"] <= 0.5
    assert "faithfulness" in scores
    assert body["score_series"] and {"t", "name", "mean", "pass_rate", "error_rate", "n"} <= set(
        body["score_series"][0]
    )
    assert sum(p["traces"] for p in body["traffic"]) == 2 * TRACES_PER_MODE
    totals = body["totals"]
    assert totals["traces"] == 2 * TRACES_PER_MODE and totals["errors"] == 0
    assert 0 < totals["p50_ms"] <= totals["p95_ms"]
    assert body["traffic"][0]["retrieval_ms"] is not None and body["traffic"][0]["generation_ms"] is not None
    assert [s["service_name"] for s in body["services"]] == ["shop-assistant"]
    assert body["judge"]["calls"] > 0 and body["judge"]["input_tokens"] > 0
    assert body["firing_alerts"] == []
    assert body["bucket_seconds"] == 60
    # Another service: empty, not an error.
    empty = ok(served, "/api/overview", since="1h", service="nobody")
    assert empty["scores"] == [] and empty["traffic"] == [] and empty["judge"]["calls"] == 0
    assert empty["totals"]["traces"] == 0 and empty["totals"]["p50_ms"] is None


def test_trace_list_pages_through_every_trace_once(served: Service) -> None:
    first = ok(served, "/api/traces", since="1h", limit=10)
    assert first["total"] == 2 * TRACES_PER_MODE and len(first["traces"]) == 10
    seen = []
    for offset in range(0, first["total"], 10):
        seen += [
            t["trace_id"] for t in ok(served, "/api/traces", since="1h", limit=10, offset=offset)["traces"]
        ]
    assert len(seen) == len(set(seen)) == 2 * TRACES_PER_MODE
    beyond = ok(served, "/api/traces", since="1h", limit=10, offset=100)
    assert beyond["total"] == 2 * TRACES_PER_MODE and beyond["traces"] == []  # the total, past the end too
    assert "total" not in first["traces"][0]
    starts = [t["start_time"] for t in first["traces"]]
    assert starts == sorted(starts, reverse=True)  # newest first by default


def test_filters_narrow_the_list(served: Service) -> None:
    failing = ok(served, "/api/traces", since="1h", failing="retrieval.recall@5", limit=100)
    assert failing["total"] >= TRACES_PER_MODE and failing["total"] == len(failing["traces"])
    paged = ok(served, "/api/traces", since="1h", failing="retrieval.recall@5", limit=5, offset=5)
    assert paged["total"] == failing["total"] and "total" not in paged["traces"][0]
    past = ok(served, "/api/traces", since="1h", failing="retrieval.recall@5", limit=5, offset=500)
    assert past["total"] == failing["total"] and past["traces"] == []
    assert all("retrieval.recall@5" in t["failing"] for t in failing["traces"])
    below = ok(served, "/api/traces", since="1h", score="retrieval.recall@5", below=0.5, limit=100)
    assert below["total"] == failing["total"]
    assert all(t["worst"] is not None and t["worst"] < 0.5 for t in below["traces"])
    refund = ok(served, "/api/traces", since="1h", q="REFUND", limit=100)
    assert 0 < refund["total"] < 2 * TRACES_PER_MODE
    assert all("refund" in (t["question"] + (t["answer"] or "")).lower() for t in refund["traces"])
    assert ok(served, "/api/traces", since="1h", service="nobody")["total"] == 0
    assert ok(served, "/api/traces", since="1h", status="error")["total"] == 0


def test_sorting_by_duration_and_by_worst_score(served: Service) -> None:
    fastest = ok(served, "/api/traces", since="1h", sort="duration_ms", order="asc", limit=100)["traces"]
    durations = [t["duration_ms"] for t in fastest]
    assert durations == sorted(durations)
    worst = ok(served, "/api/traces", since="1h", sort="worst", order="asc", limit=100)["traces"]
    values = [t["worst"] for t in worst]
    assert values == sorted(values) and values[0] == 0.0
    # Ties on the lowest value: the trace with more failed scores first (and no helper column).
    keys = [(t["worst"], -len(t["failing"])) for t in worst]
    assert keys == sorted(keys) and len(set(keys)) > 1
    assert "n_failing" not in worst[0]


def test_one_trace_in_full(served: Service) -> None:
    (listed,) = ok(served, "/api/traces", since="1h", failing="retrieval.recall@5", limit=1)["traces"]
    body = ok(served, f"/api/traces/{listed['trace_id']}")
    trace = body["trace"]
    assert trace["trace_id"] == listed["trace_id"] and trace["question"] and trace["answer"]
    assert [s["position"] for s in body["steps"]] == sorted(s["position"] for s in body["steps"])
    assert {"retrieval", "llm"} <= {s["kind"] for s in body["steps"]}
    retrieved = [d for d in body["documents"] if d["stage"] == "retrieved"]
    assert retrieved and all(d["expected"] is False for d in retrieved)  # the wrong index
    assert len(body["spans"]) >= len(body["steps"])
    by_name = {s["name"]: s for s in body["scores"]}
    assert by_name["retrieval.recall@5"]["status"] == "fail"
    judged = [s for s in body["scores"] if s["evaluator"] == "judge"]
    assert judged and all(s["judge_model"] == "judge-test" for s in judged)
    faithfulness = by_name["faithfulness"]
    assert faithfulness["evaluator"] == "judge" and faithfulness["items"]
    assert {"text", "ok", "evidence"} <= set(faithfulness["items"][0])
    healthy = ok(served, "/api/traces", since="1h", sort="worst", order="desc", limit=1)["traces"][0]
    documents = ok(served, f"/api/traces/{healthy['trace_id']}")["documents"]
    assert any(d["expected"] for d in documents)


@pytest.mark.parametrize(
    ("path", "params", "message"),
    [
        ("/api/traces", {"limit": "0"}, "limit: between 1 and 500"),
        ("/api/traces", {"limit": "many"}, "limit: an integer"),
        ("/api/traces", {"sort": "question"}, "sort: one of"),
        ("/api/traces", {"order": "sideways"}, "order: asc or desc"),
        ("/api/traces", {"score": "faithfulness"}, "score and below go together"),
        ("/api/traces", {"score": "faithfulness", "below": "low"}, "below: a number"),
        ("/api/overview", {"since": "forever"}, "since: not a duration"),
        ("/api/overview", {"until": "tomorrow"}, "until: not an ISO 8601 time"),
        ("/api/traces/not-a-trace", {}, "trace_id: a hex trace id"),
        ("/api/traces", {"score": "faithfulness", "below": "nan"}, "below: a finite number"),
        ("/api/traces", {"score": "", "below": "0.5"}, "score and below go together"),
        ("/api/overview", {"since": "99999999999d"}, "outside the calendar"),
        ("/api/overview", {"until": "0001-01-01", "since": "1d"}, "outside the calendar"),
        ("/api/overview", {"until": "0001-01-01T00:00:00+01:00"}, "until: not an ISO 8601 time"),
        ("/api/traces", {"service": "a\x00b"}, "NUL character"),
        ("/api/regressions", {"since": "1h", "baseline": "30m"}, "baseline: at least the window"),
        ("/api/regressions", {"baseline": "soon"}, "baseline: not a duration"),
    ],
)
def test_bad_parameters_are_400_with_the_reason(
    served: Service, path: str, params: dict, message: str
) -> None:
    response = get(served, path, **params)
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_a_trace_in_the_first_partial_minute_keeps_its_scores(served: Service) -> None:
    """Scores count in their trace's start minute; a window that starts inside a minute still finds
    the scores of the traces that start in it."""
    oldest = ok(
        served, "/api/traces", since="1h", failing="retrieval.recall@5", sort="start_time", order="asc"
    )
    first = oldest["traces"][0]
    start = datetime.fromisoformat(first["start_time"]) - timedelta(milliseconds=500)
    window = {"since": "1h", "until": (start + timedelta(hours=1)).isoformat()}
    listed = ok(served, "/api/traces", failing="retrieval.recall@5", sort="start_time", order="asc", **window)
    assert listed["traces"][0]["trace_id"] == first["trace_id"]
    assert "retrieval.recall@5" in listed["traces"][0]["failing"]


def test_unknown_trace_is_404(served: Service) -> None:
    response = get(served, "/api/traces/" + "ab" * 16)
    assert response.status_code == 404 and "no assembled trace" in response.json()["error"]


def test_nothing_can_be_written_through_the_api(served: Service) -> None:
    before = sql(served, "SELECT count(*) AS n FROM traces")[0]["n"]
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        paths = (
            "/api/overview",
            "/api/regressions",
            "/api/traces",
            "/api/traces/" + "ab" * 16,
            "/api/alerts",
        )
        for path in (*paths, "/", "/ui/app.js"):
            assert httpx.request(method, f"{served.http_url}{path}", timeout=10).status_code == 405
    # Text that would end a SQL string is only ever a value.
    hostile = "x'); DELETE FROM traces; SELECT ('"
    assert ok(served, "/api/traces", since="1h", q=hostile, service=hostile, failing=hostile)["total"] == 0
    assert sql(served, "SELECT count(*) AS n FROM traces")[0]["n"] == before


def test_alerts_endpoint_lists_states_events_and_canary_runs(served: Service) -> None:
    body = ok(served, "/api/alerts")
    assert body == {"alerts": [], "events": [], "canary_runs": []}


def test_regressions_compare_the_window_with_the_one_before(served: Service) -> None:
    body = ok(served, "/api/regressions", since="1h")
    assert set(body) == {"window", "baseline", "comparisons"}
    comparisons = body["comparisons"]
    # Every score of the one service, by mean and by pass rate; the hour before had no traffic.
    assert {(c["service"], c["metric"]) for c in comparisons} == {
        ("shop-assistant", "mean"),
        ("shop-assistant", "pass_rate"),
    }
    assert {c["status"] for c in comparisons} == {"insufficient"}
    recall = next(c for c in comparisons if c["score"] == "retrieval.recall@5" and c["metric"] == "mean")
    assert recall["n_recent"] == 2 * TRACES_PER_MODE and recall["n_baseline"] == 0


def test_judge_cost_is_null_without_prices(served: Service) -> None:
    judge = ok(served, "/api/overview", since="1h")["judge"]
    assert judge["calls"] > 0 and judge["cost_usd"] is None


def test_the_dashboard_page_and_its_files_are_served(served: Service) -> None:
    page = httpx.get(f"{served.http_url}/", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    scripts = re.findall(r'<script src="([^"]+)"', page.text)
    assert scripts == [
        "/ui/vendor/uplot-1.6.32/uPlot.iife.min.js",
        "/ui/review.js",
        "/ui/sessions.js",
        "/ui/rescore.js",
        "/ui/app.js",
    ]
    for path in (*scripts, "/ui/app.css", "/ui/vendor/uplot-1.6.32/LICENSE"):
        assert httpx.get(f"{served.http_url}{path}", timeout=10).status_code == 200, path
    assert "http" not in "".join(re.findall(r'(?:src|href)="([^"]+)"', page.text))  # nothing from outside


def test_report_refuses_a_bad_window_with_the_reason(served: Service, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = run_ragpulse(
        "report", "--server", served.http_url, "--since", "forever", "--out", str(out), cwd=tmp_path
    )
    assert result.returncode == 1 and "since: not a duration" in result.stderr
    assert not out.exists()
