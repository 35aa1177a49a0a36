"""Scheduled probes: golden questions sent to a real instrumented app (tests/support/probe_app.py, over HTTP
on loopback, exporting with the OpenTelemetry SDK to a real ragpulse), their traces assembled,
matched to their cases and scored; the runs as `ragpulse probes` and `/api/probes` show them. The
pure parts (templates, trace context headers, the client span, tallies and summaries) on their own,
and bad configuration refused with its path."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
import yaml
from opentelemetry import baggage
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.trace import get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from collector.config import Config, ConfigError, load_config
from collector.datasets import cases_table, read_cases
from collector.otlp.batch import decode_request
from collector.probes.requests import (
    ProbeError,
    ProbeResult,
    client_span_request,
    expand_headers,
    fill,
    request_url,
    trace_headers,
)
from collector.probes.results import assign_question_traces, due_probes, result_rows, summarize, tally
from collector.schema.tables import PROBE_RUNS
from collector.service import BackgroundService, Service
from collector.store.duckdb_store import DuckDBStore
from tests.support.helpers import fast_assembler, free_port, metric, run_ragpulse, sql, wait_for
from tests.support.mcp_client import content, over_http, text
from tests.support.probe_app import ProbeApp

CASES: list[dict[str, Any]] = [
    {
        "id": "refund-window",
        "question": "How long do I have to return an item for a refund?",
        "expected_documents": ["returns-policy"],
        "expected_answer": "Items can be returned within 30 days for a refund.",
    },
    {
        "id": "shipping",
        "question": "How long does shipping take to deliver my order?",
        "expected_documents": ["shipping-times"],
        "expected_answer": "Standard shipping takes 3 to 5 business days.",
    },
    {
        "id": "warranty",
        "question": "Is there a warranty on electronics with a defect?",
        "expected_documents": ["warranty"],
    },
    # Characters the baggage header must percent-encode (and `+`, which decoding takes for a space).
    {"id": "gift card/7 +x", "question": "Do gift cards expire?", "expected_documents": ["gift-cards"]},
]
CASE_IDS = {c["id"] for c in CASES}


def write_cases(path: Path, cases: list[dict[str, Any]] = CASES) -> Path:
    path.write_text(yaml.safe_dump({"cases": cases}), encoding="utf-8")
    return path


def service_config(
    tmp: Path, grpc_port: int, probes: list[dict[str, Any]], monitoring: dict[str, Any] | None = None
) -> Config:
    """A fast service (the assembler in its thread, short decision wait) on `grpc_port`, with probes."""
    return Config.model_validate(
        {
            "receivers": {"host": "127.0.0.1", "grpc_port": grpc_port, "http_port": 0},
            "store": {"path": str(tmp / "ragpulse.duckdb")},
            "assembler": {"workers": 0, **fast_assembler()},
            "probes": probes,
            "monitoring": monitoring or {},
        }
    )


# Alerts on the probe's traffic and runs, evaluated by hand after each run of `probed`.
PROBE_ALERTS = {
    "evaluate_every": 3600,
    "alerts": [
        {"name": "golden-recall", "probe": "golden", "score": "retrieval.recall@5", "min": 0.75,
         "window": 3600, "min_samples": 4},
        {"name": "golden-unanswered", "probe": "golden", "max_unanswered": 0},
        {"name": "golden-tracing", "probe": "golden", "max_missing_traces": 0},
    ],
}  # fmt: skip


def finished_runs(svc: Service | str, probe: str) -> list[dict[str, Any]]:
    return sql(
        svc,
        f"SELECT * FROM probe_runs WHERE probe = '{probe}' AND status <> 'running' ORDER BY started_at",
    )


def results_of(run: dict[str, Any]) -> list[dict[str, Any]]:
    results = run["results"]
    return json.loads(results) if isinstance(results, str) else list(results)


def summary_of(run: dict[str, Any]) -> dict[str, Any]:
    summary = run["summary"]
    return json.loads(summary) if isinstance(summary, str) else dict(summary)


# --------------------------------------------------------------------------- the pure parts


def test_templates_fill_the_question_and_case_id_into_the_json_and_the_url() -> None:
    body = {"question": "{question}", "meta": [{"case": "{case_id}", "n": 3}, "ask: {question}"], "k": None}
    assert fill(body, "Do gift cards expire?", "g/7") == {
        "question": "Do gift cards expire?",
        "meta": [{"case": "g/7", "n": 3}, "ask: Do gift cards expire?"],
        "k": None,
    }
    url = request_url("https://shop.example.com/ask?q={question}&case={case_id}", "a b&c?", "g/7 +x")
    assert url == "https://shop.example.com/ask?q=a%20b%26c%3F&case=g%2F7%20%2Bx"
    assert httpx.URL(url).params["q"] == "a b&c?"


def test_headers_expand_environment_variables_and_name_a_missing_one() -> None:
    headers = {"Authorization": "Bearer ${SHOP_TOKEN}", "X-Tag": "${A}-${B}", "Plain": "$HOME {x}"}
    environ = {"SHOP_TOKEN": "s3cret", "A": "1", "B": "2"}
    assert expand_headers(headers, environ) == {
        "Authorization": "Bearer s3cret",
        "X-Tag": "1-2",
        "Plain": "$HOME {x}",
    }
    with pytest.raises(ProbeError, match=r"request\.headers\.Authorization: .*SHOP_TOKEN is not set"):
        expand_headers(headers, {"A": "1", "B": "2"})


def test_the_trace_context_headers_are_read_back_by_the_w3c_propagators() -> None:
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    headers = trace_headers(trace_id, span_id, "shop golden, v2", "gift card/7 +x=1;2")
    assert headers["traceparent"] == f"00-{trace_id}-{span_id}-01"
    context = TraceContextTextMapPropagator().extract(headers)
    parent = get_current_span(context).get_span_context()
    assert (format(parent.trace_id, "032x"), format(parent.span_id, "016x")) == (trace_id, span_id)
    assert parent.trace_flags.sampled and parent.is_remote
    entries = baggage.get_all(W3CBaggagePropagator().extract(headers))
    assert dict(entries) == {"rag.case.id": "gift card/7 +x=1;2", "rag.probe": "shop golden, v2"}


def _result(**changes: Any) -> ProbeResult:
    values: dict[str, Any] = {
        "case_id": "refund-window",
        "question": "How long do I have to return an item?",
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "span_id": "00f067aa0ba902b7",
        "method": "POST",
        "url": "http://shop.test/api/ask",
        "start_ns": 1_700_000_000_000_000_000,
        "end_ns": 1_700_000_000_250_000_000,
        "http_status": 200,
        "outcome": "answered",
        "latency_ms": 250.0,
    }
    values.update(changes)
    return ProbeResult(**values)


_SPAN_COLUMNS = [
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "kind",
    "service_name",
    "duration_ms",
    "status_code",
    "status_message",
    "attributes",
]


def test_the_client_span_is_decoded_as_a_root_client_span_with_the_probe_attributes() -> None:
    ok = decode_request(client_span_request("golden", "shop-probe", "run1", _result())).spans
    failed = decode_request(
        client_span_request(
            "golden",
            "golden",
            "run1",
            _result(http_status=None, outcome="timeout", error="no answer in 30 s"),
        )
    ).spans
    (span,) = ok.select(_SPAN_COLUMNS).to_pylist()
    assert (span["trace_id"], span["span_id"], span["parent_span_id"]) == (
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "00f067aa0ba902b7",
        None,
    )
    assert (span["name"], span["kind"], span["service_name"], span["status_code"]) == (
        "probe golden",
        "CLIENT",
        "shop-probe",
        "UNSET",
    )
    assert span["duration_ms"] == pytest.approx(250.0)
    assert json.loads(span["attributes"]) == {
        "rag.probe": "golden",
        "rag.probe.run": "run1",
        "rag.case.id": "refund-window",
        "rag.question": "How long do I have to return an item?",
        "http.request.method": "POST",
        "url.full": "http://shop.test/api/ask",
        "http.response.status_code": 200,
    }
    (error,) = failed.select(_SPAN_COLUMNS).to_pylist()
    assert (error["status_code"], error["status_message"]) == ("ERROR", "no answer in 30 s")
    assert "http.response.status_code" not in json.loads(error["attributes"])


def test_results_are_tallied_and_scores_summarized() -> None:
    own = {
        "a" * 32: {"span_count": 4},  # continued by the app
        "b" * 32: {"span_count": 1},  # the app started its own trace: found by question
        "c" * 32: {"span_count": 1},  # no app trace at all
        "d" * 32: {"span_count": 1},  # the app answered 500
    }
    results = [
        _result(case_id="1", trace_id="a" * 32),
        _result(case_id="2", trace_id="b" * 32),
        _result(case_id="3", trace_id="c" * 32),
        _result(case_id="4", trace_id="d" * 32, http_status=500, outcome="http_error", error="HTTP 500"),
        _result(case_id="5", trace_id="e" * 32, outcome="not_sent", http_status=None),
    ]
    rows = result_rows(results, own, {"b" * 32: "f" * 32})
    assert [(r["case_id"], r["app_trace_id"][0], r["received"], r["matched_by"]) for r in rows] == [
        ("1", "a", True, "case_id"),
        ("2", "f", True, "question"),
        ("3", "c", False, None),
        ("4", "d", False, None),
        ("5", "e", False, None),
    ]
    assert tally(rows) == {"cases": 5, "answered": 3, "errors": 1, "traces_received": 2, "missing_traces": 1}
    scores: list[dict[str, Any]] = [
        {"name": "recall", "value": 1.0, "status": "pass"},
        {"name": "recall", "value": 0.0, "status": "fail"},
        {"name": "recall", "value": None, "status": "error"},
        {"name": "recall", "value": None, "status": "skipped"},
        {"name": "faithfulness", "value": 0.5, "status": "pass"},
    ]
    summary = summarize(scores)
    assert list(summary) == ["faithfulness", "recall"]
    assert summary["recall"] == {
        "n": 4,
        "n_pass": 1,
        "n_fail": 1,
        "n_error": 1,
        "n_skipped": 1,
        "mean": 0.5,
        "pass_rate": pytest.approx(1 / 3),
    }
    assert summary["faithfulness"]["mean"] == 0.5 and summary["faithfulness"]["pass_rate"] == 1.0


def test_traces_found_by_question_are_given_once_each_to_requests_sent_before_them() -> None:
    sent = datetime(2026, 12, 4, 12, 0, 0)
    ns = int((sent - datetime(1970, 1, 1)).total_seconds() * 1e9)
    first = _result(case_id="q", trace_id="1" * 32, start_ns=ns)
    second = _result(case_id="q", trace_id="2" * 32, start_ns=ns + 10**9)
    continued = _result(case_id="q", trace_id="3" * 32, start_ns=ns)
    candidates = [
        {"trace_id": "old", "case_id": "q", "start_time": (sent - timedelta(minutes=5)).isoformat()},
        {"trace_id": "late", "case_id": "q", "start_time": (sent + timedelta(seconds=1.2)).isoformat()},
        {"trace_id": "early", "case_id": "q", "start_time": (sent + timedelta(seconds=0.1)).isoformat()},
        {"trace_id": "other", "case_id": "z", "start_time": (sent + timedelta(seconds=0.1)).isoformat()},
    ]
    own = {"3" * 32: {"span_count": 5}}
    assigned = assign_question_traces([second, first, continued], own, candidates)
    assert assigned == {"1" * 32: "early", "2" * 32: "late"}


def test_due_probes_are_those_whose_time_came_and_that_are_not_running() -> None:
    now = datetime(2026, 12, 4, 12, 0)
    due = {"a": now - timedelta(seconds=1), "b": now, "c": now + timedelta(seconds=1), "d": now}
    assert due_probes(due, now, running={"d"}) == ["a", "b"]


def test_the_store_replaces_a_run_by_id_and_reads_runs_newest_first(tmp_path: Path) -> None:
    start = datetime(2026, 12, 4, 12, 0)

    def run(run_id: str, probe: str, minutes: int, status: str) -> pa.Table:
        row = {"run_id": [run_id], "probe": [probe], "started_at": [start + timedelta(minutes=minutes)]}
        return PROBE_RUNS.arrow_table({**row, "status": [status]}, 1)

    with DuckDBStore(tmp_path / "runs.duckdb") as store:
        store.write_probe_run(run("r1", "a", 0, "running"))
        store.write_probe_run(run("r2", "b", 1, "running"))
        store.write_probe_run(run("r3", "a", 2, "running"))
        store.write_probe_run(run("r1", "a", 0, "done"))  # the finish of r1 replaces its start
        every = store.read_probe_runs().to_pylist()
        of_a = store.read_probe_runs("a", 1).to_pylist()
    assert [(r["run_id"], r["status"]) for r in every] == [
        ("r3", "running"),
        ("r2", "running"),
        ("r1", "done"),
    ]
    assert [r["run_id"] for r in of_a] == ["r3"]


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        ({"requst": {}}, r"probes\.0\.requst: unknown key"),
        (
            {"request": {"url": "ftp://shop.example.com/ask"}},
            r"probes\.0\.request\.url: .*http:// or https://",
        ),
        ({"request": {"url": "http:///ask"}}, r"probes\.0\.request\.url: .*a URL with a host"),
        ({"request": {"url": "http://x/ask", "method": "TRACE"}}, r"probes\.0\.request\.method"),
        ({"request": {"url": "http://x/ask", "timeout": 0}}, r"probes\.0\.request\.timeout"),
        ({"request": {"url": "http://x/ask", "jsn": {}}}, r"probes\.0\.request\.jsn: unknown key"),
        (
            {"request": {"url": "http://x/ask", "headers": {"Traceparent": "00-x"}}},
            r"probes\.0\.request\.headers: .*Traceparent: set by ragpulse",
        ),
        ({"request": {"url": "http://x/ask"}, "concurrency": 0}, r"probes\.0\.concurrency"),
        ({"request": {"url": "http://x/ask"}, "every": -1}, r"probes\.0\.every"),
        ({"request": {"url": "http://x/ask"}, "name": ""}, r"probes\.0\.name"),
    ],
)
def test_bad_probe_config_is_refused_with_its_path(
    tmp_path: Path, probe: dict[str, Any], expected: str
) -> None:
    entry = {"name": "golden", **probe}
    path = tmp_path / "ragpulse.yaml"
    path.write_text(yaml.safe_dump({"probes": [entry]}), encoding="utf-8")
    with pytest.raises(ConfigError, match=expected):
        load_config(path, environ={})


def test_probe_names_are_unique_and_a_good_probe_is_read(tmp_path: Path) -> None:
    path = tmp_path / "ragpulse.yaml"
    request = {
        "url": "https://shop.example.com/api/ask",
        "method": "post",
        "json": {"question": "{question}"},
    }
    path.write_text(
        yaml.safe_dump({"probes": [{"name": "a", "request": request}, {"name": "a", "request": request}]}),
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"probes: .*probe names must be unique; repeated: a"):
        load_config(path, environ={})
    path.write_text(yaml.safe_dump({"probes": [{"name": "a", "request": request}]}), encoding="utf-8")
    (probe,) = load_config(path, environ={}).probes
    assert (probe.request.method, probe.request.json_body, probe.service_name, probe.every, probe.wait) == (
        "POST",
        {"question": "{question}"},
        "a",
        3600.0,
        120.0,
    )


# --------------------------------------------------------------------------- end to end


@dataclass
class Probed:
    service: Service
    app: ProbeApp
    runs: dict[str, dict[str, Any]]  # app mode -> the probe run made in that mode
    alerts: dict[str, list[tuple[str, str]]]  # app mode -> (alert, state) of the events after its run


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Probed]:
    """One service and one app, and a run of the probe `golden` in each of the app's modes: the
    first at start-up (scheduled), the others made one after the other."""
    tmp = tmp_path_factory.mktemp("probes")
    cases = write_cases(tmp / "cases.yaml")
    grpc_port = free_port()
    with ProbeApp(f"127.0.0.1:{grpc_port}") as app:
        probe = {
            "name": "golden",
            "cases": str(cases),
            "every": 3600,
            "wait": 4,
            "concurrency": 2,
            "request": {"url": app.url, "json": {"question": "{question}", "case": "{case_id}"}},
        }
        with BackgroundService(service_config(tmp, grpc_port, [probe], PROBE_ALERTS)) as svc:
            assert svc.probe_runner is not None and svc.alert_evaluator is not None
            evaluate = svc.alert_evaluator.evaluate_once
            (healthy,) = wait_for(
                lambda: finished_runs(svc, "golden"), timeout=30, what="the start-up probe run"
            )
            runs = {"healthy": healthy}
            alerts = {"healthy": [(e.alert, e.state) for e in evaluate()]}
            for mode in ("degraded", "drop_context", "no_traces"):
                app.mode = mode
                svc.probe_runner.run_once("golden")
                runs[mode] = finished_runs(svc, "golden")[-1]
                alerts[mode] = [(e.alert, e.state) for e in evaluate()]
            yield Probed(svc, app, runs, alerts)


def test_a_healthy_run_has_one_trace_per_case_matched_by_id_and_scored_against_its_references(
    probed: Probed,
) -> None:
    svc, run = probed.service, probed.runs["healthy"]
    assert (run["status"], run["error"], run["cases"], run["answered"], run["errors"]) == (
        "done",
        None,
        4,
        4,
        0,
    )
    assert (run["traces_received"], run["missing_traces"]) == (4, 0)
    assert run["finished_at"] > run["started_at"]
    results = results_of(run)
    assert {r["case_id"] for r in results} == CASE_IDS
    assert all(r["received"] and r["matched_by"] == "case_id" for r in results)
    assert all(r["app_trace_id"] == r["trace_id"] and r["http_status"] == 200 for r in results)
    ids = ", ".join(f"'{r['trace_id']}'" for r in results)
    traces = sql(
        svc,
        "SELECT trace_id, case_id, case_match, span_count, service_name, probe, probe_run, sample_reason, "
        f"expected_documents FROM traces WHERE trace_id IN ({ids}) ORDER BY case_id",
    )
    assert sorted(t["case_id"] for t in traces) == sorted(CASE_IDS)
    for trace in traces:
        assert (trace["case_match"], trace["span_count"], trace["service_name"]) == ("case_id", 4, "golden")
        assert (trace["probe"], trace["probe_run"], trace["sample_reason"]) == (
            "golden",
            run["run_id"],
            "probe",
        )
    recall = sql(
        svc,
        "SELECT trace_id, value, status FROM scores "
        f"WHERE name = 'retrieval.recall@5' AND trace_id IN ({ids})",
    )
    assert len(recall) == 4 and all((s["value"], s["status"]) == (1.0, "pass") for s in recall)
    # ragpulse's span is the root; the app's server span continues it, with the baggage decoded.
    gift = next(r for r in results if r["case_id"] == "gift card/7 +x")
    spans = sql(
        svc,
        "SELECT span_id, parent_span_id, name, kind, attributes FROM spans "
        f"WHERE trace_id = '{gift['trace_id']}' ORDER BY start_time",
    )
    root = next(s for s in spans if s["parent_span_id"] is None)
    server = next(s for s in spans if s["name"] == "POST /api/ask")
    assert (root["name"], root["kind"]) == ("probe golden", "CLIENT")
    assert server["parent_span_id"] == root["span_id"]
    assert server["attributes"]["rag.case.id"] == "gift card/7 +x"
    assert server["attributes"]["rag.probe"] == "golden"
    summary = summary_of(run)
    assert summary["retrieval.recall@5"]["n"] == 4
    assert summary["retrieval.recall@5"]["pass_rate"] == 1.0
    # What the app received: the question in the templated body, the trace context in the headers.
    sent = [
        r
        for r in probed.app.requests
        if r.headers.get("traceparent", "").split("-")[1:2] == [gift["trace_id"]]
    ]
    assert len(sent) == 1
    assert sent[0].body == {"question": "Do gift cards expire?", "case": "gift card/7 +x"}


def test_a_degraded_run_drops_recall_against_the_healthy_one(probed: Probed) -> None:
    healthy, degraded = summary_of(probed.runs["healthy"]), summary_of(probed.runs["degraded"])
    assert probed.runs["degraded"]["traces_received"] == 4
    assert healthy["retrieval.recall@5"]["mean"] == 1.0
    assert degraded["retrieval.recall@5"]["mean"] == 0.0
    assert degraded["retrieval.recall@5"]["pass_rate"] == 0.0
    assert degraded["retrieval.hit@5"]["pass_rate"] < healthy["retrieval.hit@5"]["pass_rate"]


def test_alerts_on_the_probe_fire_once_when_recall_drops_and_when_traces_stop(probed: Probed) -> None:
    """Healthy: nothing fires. Degraded: the probe's recall (4 of 8 scores pass: 0.5 < 0.75) fires,
    once. Dropped context: those traces are the app's own (not the probe's), nothing changes. No
    traces: the tracing alert fires; the app answered every time, so the unanswered one never does."""
    assert probed.alerts == {
        "healthy": [],
        "degraded": [("golden-recall", "firing")],
        "drop_context": [],
        "no_traces": [("golden-tracing", "firing")],
    }
    states = {r["alert"]: r["state"] for r in sql(probed.service, "SELECT alert, state FROM alerts")}
    assert states == {"golden-recall": "firing", "golden-unanswered": "ok", "golden-tracing": "firing"}
    (event,) = sql(probed.service, "SELECT message FROM alert_events WHERE alert = 'golden-tracing'")
    assert "4 request(s) without a trace of 4" in event["message"]


def test_an_app_that_drops_the_trace_context_is_matched_by_question(probed: Probed) -> None:
    svc, run = probed.service, probed.runs["drop_context"]
    assert (run["status"], run["answered"], run["traces_received"], run["missing_traces"]) == (
        "done",
        4,
        4,
        0,
    )
    results = results_of(run)
    assert all(r["received"] and r["matched_by"] == "question" for r in results)
    assert all(r["app_trace_id"] != r["trace_id"] for r in results)
    apps = ", ".join(f"'{r['app_trace_id']}'" for r in results)
    traces = sql(
        svc, f"SELECT trace_id, case_id, case_match, service_name FROM traces WHERE trace_id IN ({apps})"
    )
    by_id = {t["trace_id"]: t for t in traces}
    for result in results:
        app_trace = by_id[result["app_trace_id"]]
        assert (app_trace["case_id"], app_trace["case_match"], app_trace["service_name"]) == (
            result["case_id"],
            "question",
            "shop-bot",
        )
    own = ", ".join(f"'{r['trace_id']}'" for r in results)
    assert {
        t["span_count"] for t in sql(svc, f"SELECT span_count FROM traces WHERE trace_id IN ({own})")
    } == {1}
    assert summary_of(run)["retrieval.recall@5"] == {
        "n": 4,
        "n_pass": 4,
        "n_fail": 0,
        "n_error": 0,
        "n_skipped": 0,
        "mean": 1.0,
        "pass_rate": 1.0,
    }


def test_an_app_that_exports_nothing_leaves_every_trace_missing(probed: Probed) -> None:
    run = probed.runs["no_traces"]
    assert (run["status"], run["cases"], run["answered"], run["errors"]) == ("done", 4, 4, 0)
    assert (run["traces_received"], run["missing_traces"]) == (0, 4)
    assert summary_of(run) == {}
    assert not any(r["received"] for r in results_of(run))
    # It waited for the traces as long as the probe says, and no longer.
    waited = (
        datetime.fromisoformat(run["finished_at"]) - datetime.fromisoformat(run["started_at"])
    ).total_seconds()
    assert 4 <= waited < 15


def test_probe_requests_and_runs_are_counted_in_metrics(probed: Probed) -> None:
    svc = probed.service
    assert metric(svc, "ragpulse_probe_requests_total", probe="golden", outcome="answered") == 16
    assert metric(svc, "ragpulse_probe_runs_total", probe="golden", status="done") == 4
    assert metric(svc, "ragpulse_spans_received_total", protocol="probe") == 16


def test_probes_show_and_list_on_the_command_line(probed: Probed, tmp_path: Path) -> None:
    server = probed.service.http_url
    degraded = probed.runs["degraded"]["run_id"]
    shown = run_ragpulse("probes", "show", degraded, "--server", server, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"probe run {degraded} of golden: done" in shown.stdout
    assert "retrieval.recall@5 fail 0.00" in shown.stdout
    assert "gift card/7 +x" in shown.stdout
    latest = run_ragpulse("probes", "show", "--probe", "golden", "--json", "--server", server, cwd=tmp_path)
    assert latest.returncode == 0, latest.stderr
    report = json.loads(latest.stdout)
    assert report["run"]["run_id"] == probed.runs["no_traces"]["run_id"]
    assert {c["case_id"] for c in report["cases"]} == CASE_IDS
    assert all(c["received"] is False and c["scores"] == {} for c in report["cases"])
    listed = run_ragpulse("probes", "list", "--limit", "3", "--json", "--server", server, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [r["run_id"] for r in json.loads(listed.stdout)] == [
        probed.runs[m]["run_id"] for m in ("no_traces", "drop_context", "degraded")
    ]
    table = run_ragpulse("probes", "list", "--server", server, cwd=tmp_path)
    assert table.returncode == 0 and probed.runs["healthy"]["run_id"] in table.stdout
    unknown = run_ragpulse("probes", "show", "nosuchrun", "--server", server, cwd=tmp_path)
    assert unknown.returncode == 1
    assert "no probe run 'nosuchrun'" in unknown.stderr and "Traceback" not in unknown.stderr


def test_the_json_api_lists_runs_and_reports_one(probed: Probed) -> None:
    base = probed.service.http_url
    listed = httpx.get(f"{base}/api/probes", params={"probe": "golden", "limit": 2}, timeout=10)
    assert listed.status_code == 200
    assert [r["run_id"] for r in listed.json()["runs"]] == [
        probed.runs["no_traces"]["run_id"],
        probed.runs["drop_context"]["run_id"],
    ]
    assert httpx.get(f"{base}/api/probes", params={"probe": "other"}, timeout=10).json()["runs"] == []
    healthy = probed.runs["healthy"]["run_id"]
    report = httpx.get(f"{base}/api/probes/{healthy}", timeout=10).json()
    assert report["run"]["traces_received"] == 4
    assert report["run"]["summary"]["retrieval.recall@5"]["pass_rate"] == 1.0
    (gift,) = [c for c in report["cases"] if c["case_id"] == "gift card/7 +x"]
    assert gift["scores"]["retrieval.recall@5"]["status"] == "pass"
    assert gift["trace"]["span_count"] == 4 and gift["http_status"] == 200
    missing = httpx.get(f"{base}/api/probes/nosuchrun", timeout=10)
    assert missing.status_code == 404 and "nosuchrun" in missing.json()["error"]
    assert httpx.get(f"{base}/api/probes", params={"limit": 0}, timeout=10).status_code == 400


def test_an_agent_reads_a_probe_run_over_mcp(probed: Probed) -> None:
    """`get_probe_run` answers what `/api/probes/{run_id}` does: a run, or the latest of a probe."""
    base = probed.service.http_url
    healthy = probed.runs["healthy"]["run_id"]

    async def read(session: Any) -> tuple[Any, Any]:
        one = await session.call_tool("get_probe_run", {"run_id": healthy})
        latest = await session.call_tool("get_probe_run", {"probe": "golden"})
        return one, latest

    one, latest = over_http(base, read)
    assert content(one) == httpx.get(f"{base}/api/probes/{healthy}", timeout=10).json()
    assert text(one) == f"probe run {healthy} of golden: done"
    assert content(latest)["run"]["run_id"] == probed.runs["no_traces"]["run_id"]


def test_failing_requests_and_runs_that_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A 500 and a refused connection are errors of their run; a missing header variable and an
    unreadable cases file fail the run as a whole (logged once as an error, then its end, with no
    counts of a run that did not run); a probe without a cases file sends the cases loaded into the
    store, with its header variable and URL template filled in."""
    caplog.set_level(logging.INFO, logger="collector.probes.runner")
    monkeypatch.setenv("PROBE_TEST_TOKEN", "s3cret")
    monkeypatch.delenv("PROBE_TEST_UNSET", raising=False)
    db = tmp_path / "ragpulse.duckdb"
    stored = read_cases(write_cases(tmp_path / "stored.yaml", CASES[:2]))
    with DuckDBStore(db) as store:
        store.write_cases(cases_table(stored, "stored.yaml"))
    # The other probes' file holds the same two cases: loading it keeps the store's cases as they are.
    cases = str(write_cases(tmp_path / "cases.yaml", CASES[:2]))
    grpc_port = free_port()
    with ProbeApp(f"127.0.0.1:{grpc_port}") as app:
        probes: list[dict[str, Any]] = [
            {"name": "broken", "cases": cases, "wait": 5, "request": {"url": f"{app.base_url}/api/fail"}},
            {
                "name": "refused",
                "cases": cases,
                "every": 1,
                "wait": 5,
                "request": {"url": f"http://127.0.0.1:{free_port()}/api/ask", "timeout": 2},
            },
            {
                "name": "no-token",
                "cases": cases,
                "request": {"url": app.url, "headers": {"Authorization": "Bearer ${PROBE_TEST_UNSET}"}},
            },
            {"name": "bad-cases", "cases": str(tmp_path / "nowhere.yaml"), "request": {"url": app.url}},
            {
                "name": "stored",
                "wait": 10,
                "service": "shop-probe",
                "request": {
                    "url": app.url + "?case={case_id}",
                    "json": {"question": "{question}"},
                    "headers": {"Authorization": "Bearer ${PROBE_TEST_TOKEN}"},
                },
            },
        ]
        with BackgroundService(service_config(tmp_path, grpc_port, probes)) as svc:

            def first_run(name: str) -> dict[str, Any]:
                return wait_for(lambda: finished_runs(svc, name), timeout=30, what=f"a run of {name}")[0]

            done = {name: first_run(name) for name in ("broken", "no-token", "bad-cases", "stored")}
            refused = wait_for(lambda: finished_runs(svc, "refused"), lambda r: len(r) >= 2, timeout=30)
            http_errors = metric(svc, "ragpulse_probe_requests_total", probe="broken", outcome="http_error")
            unreachable = metric(svc, "ragpulse_probe_requests_total", probe="refused", outcome="unreachable")
            failed_runs = metric(svc, "ragpulse_probe_runs_total", probe="no-token", status="failed")
            broken_ids = ", ".join(f"'{r['trace_id']}'" for r in results_of(done["broken"]))
            broken_spans = sql(
                svc, f"SELECT status_code, status_message FROM spans WHERE trace_id IN ({broken_ids})"
            )
            stored_traces = sql(
                svc,
                f"SELECT service_name, case_match FROM traces WHERE probe_run = '{done['stored']['run_id']}'",
            )

    broken = done["broken"]
    assert (broken["status"], broken["cases"], broken["answered"], broken["errors"]) == ("done", 2, 0, 2)
    assert (broken["traces_received"], broken["missing_traces"]) == (0, 0)
    assert {(r["http_status"], r["error"], r["outcome"]) for r in results_of(broken)} == {
        (500, "HTTP 500", "http_error")
    }
    assert broken_spans == [{"status_code": "ERROR", "status_message": "HTTP 500"}] * 2
    assert http_errors == 2
    first = refused[0]
    assert (first["status"], first["answered"], first["errors"]) == ("done", 0, 2)
    assert all(r["outcome"] == "unreachable" and r["http_status"] is None for r in results_of(first))
    # `every: 1` apart (the schedule is kept from the moment a run is started, a few ms before its row)
    between = datetime.fromisoformat(refused[1]["started_at"]) - datetime.fromisoformat(first["started_at"])
    assert between >= timedelta(seconds=0.9)
    assert unreachable >= 4
    token = done["no-token"]
    assert (token["status"], token["cases"]) == ("failed", 0)
    assert token["error"] == "request.headers.Authorization: environment variable PROBE_TEST_UNSET is not set"
    assert failed_runs == 1
    bad = done["bad-cases"]
    assert (
        bad["status"] == "failed" and "cases: cannot read" in bad["error"] and "nowhere.yaml" in bad["error"]
    )
    said = [
        (r.levelname, r.getMessage()) for r in caplog.records if r.getMessage().startswith("probe bad-cases:")
    ]
    run = bad["run_id"]
    assert ("INFO", f"probe bad-cases: run {run} failed") in said, said
    assert [m for level, m in said if level == "ERROR"] == [
        f"probe bad-cases: run {run} could not run: {bad['error']}"
    ]
    assert not any("answered" in m or "None" in m for _, m in said), said
    stored_run = done["stored"]
    assert (stored_run["status"], stored_run["cases"], stored_run["answered"]) == ("done", 2, 2)
    assert stored_run["traces_received"] == 2
    assert {t["service_name"] for t in stored_traces} == {"shop-probe"}
    assert {t["case_match"] for t in stored_traces} == {"case_id"}
    asked = [r for r in app.requests if r.path.startswith("/api/ask?case=")]
    assert {r.headers["authorization"] for r in asked} == {"Bearer s3cret"}
    assert {httpx.URL(f"http://x{r.path}").params["case"] for r in asked} == {"refund-window", "shipping"}
    assert not any(r.headers.get("authorization") == "Bearer " for r in app.requests)


def test_without_probes_the_commands_say_where_they_are_set_up(tmp_path: Path) -> None:
    db = tmp_path / "ragpulse.duckdb"
    with DuckDBStore(db):
        pass
    listed = run_ragpulse("probes", "list", "--db", str(db), cwd=tmp_path)
    assert listed.returncode == 0
    assert listed.stdout.strip() == "no probe runs; probes are set up under probes: (docs/probes.md)"
    shown = run_ragpulse("probes", "show", "--db", str(db), cwd=tmp_path)
    assert shown.returncode == 1
    assert shown.stderr.strip() == "Error: no probe run yet; probes are set up under probes: (docs/probes.md)"
