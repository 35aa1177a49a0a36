"""`POST /api/feedback`: user feedback stored as human scores, attached to its trace early or late.

Real parts: a service on loopback ports, spans sent with the real OpenTelemetry SDK, feedback posted
over HTTP, the DuckDB file read through /api/sql (and, around restarts, a `ragpulse serve`
subprocess killed with SIGKILL).
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from collector.service import Service
from tests.support.helpers import (
    ServeProcess,
    emit_rag_request,
    metric,
    sdk_tracer_provider,
    sql,
    wait_for,
)

QUESTION = "Can I return opened headphones?"
DOCUMENT = "Opened headphones can be returned within 14 days."
ANSWER = "Yes, within 14 days."


def post(target: Any, body: Any) -> httpx.Response:
    return httpx.post(f"{target.http_url}/api/feedback", json=body, timeout=30)


def assembled(target: Any, trace_id: str) -> None:
    wait_for(
        lambda: sql(target, f"SELECT 1 FROM traces WHERE trace_id = '{trace_id}'"),
        timeout=20,
        what=f"trace {trace_id} assembled",
    )


def human_scores(target: Any, trace_id: str | None = None) -> list[dict[str, Any]]:
    where = f"AND trace_id = '{trace_id}'" if trace_id else ""
    return sql(
        target,
        "SELECT trace_id, span_id, name, value, status, label, explanation, source, feedback_id, "
        f"service_name, revision FROM scores WHERE evaluator = 'human' {where} ORDER BY name, feedback_id",
    )


def aggregate(target: Any, name: str) -> dict[str, Any]:
    rows = sql(
        target,
        "SELECT sum(n) AS n, sum(n_pass) AS n_pass, sum(n_fail) AS n_fail, sum(sum) AS total "
        f"FROM score_aggregates WHERE name = '{name}'",
    )
    return rows[0]


def remote_parent(trace_id: str) -> Context:
    """A context whose span is a caller's in another process, in trace `trace_id`."""
    caller = SpanContext(int(trace_id, 16), 0x1234, is_remote=True, trace_flags=TraceFlags(1))
    return trace_api.set_span_in_context(NonRecordingSpan(caller))


def send_request(target: Any, service: str = "shop-bot", response_id: str | None = None) -> str:
    """One RAG request of `service` (its LLM call answering with `response_id`); its trace id."""
    provider = sdk_tracer_provider(target, service)

    def on_chat(span: Any) -> None:
        if response_id is not None:
            span.set_attribute("gen_ai.response.id", response_id)

    trace_id = emit_rag_request(provider.get_tracer("tests"), QUESTION, DOCUMENT, ANSWER, on_chat=on_chat)
    provider.shutdown()
    return trace_id


# --------------------------------------------------------------------------- attaching


def test_feedback_on_an_assembled_trace_is_a_human_score_on_its_root_counted_in_the_aggregates(
    svc: Service,
) -> None:
    trace_id = send_request(svc)
    assembled(svc, trace_id)
    root = sql(svc, f"SELECT root_span_id FROM traces WHERE trace_id = '{trace_id}'")[0]["root_span_id"]

    answer = post(
        svc,
        {
            "trace_id": trace_id.upper(),
            "name": "thumbs",
            "label": "thumbs_down",
            "comment": "too vague",
            "author": "ana",
        },
    )

    assert answer.status_code == 200, answer.text
    assert answer.json() == {"stored": 1, "attached": 1, "waiting": 0}
    [score] = human_scores(svc)
    assert score["trace_id"] == trace_id and score["span_id"] == root
    assert (score["name"], score["status"], score["value"], score["label"]) == (
        "thumbs",
        "fail",
        0.0,
        "thumbs_down",
    )
    assert (score["explanation"], score["source"], score["service_name"]) == ("too vague", "ana", "shop-bot")
    assert aggregate(svc, "thumbs") == {"n": 1, "n_pass": 0, "n_fail": 1, "total": 0.0}
    assert metric(svc, "ragpulse_feedback_items_total", outcome="attached") == 1
    # Written back into the trace like any score (a human's, not the app's own event).
    [event] = sql(
        svc,
        "SELECT attributes FROM span_events WHERE source = 'ragpulse' AND "
        f"(attributes->>'gen_ai.evaluation.name') = 'thumbs' AND trace_id = '{trace_id}'",
    )
    assert event["attributes"]["ragpulse.evaluator"] == "human"


def test_feedback_before_its_trace_waits_and_is_attached_when_the_trace_is_assembled(svc: Service) -> None:
    trace_id = os.urandom(16).hex()
    answer = post(svc, [{"trace_id": trace_id, "name": "rating", "value": 4, "feedback_id": "f-early"}])
    assert answer.json() == {"stored": 1, "attached": 0, "waiting": 1}
    assert human_scores(svc) == []

    # The app's trace carries the id the feedback named (a frontend that made the trace id).
    provider = sdk_tracer_provider(svc, "shop-bot")
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span("frontend", context=remote_parent(trace_id)):
        emit_rag_request(tracer, QUESTION, DOCUMENT, ANSWER)
    provider.shutdown()

    wait_for(lambda: human_scores(svc), timeout=20, what="the early feedback attached")
    [score] = human_scores(svc, trace_id)
    # A rating is neither a pass nor a fail: it counts in n and in the mean only.
    assert (score["status"], score["value"], score["feedback_id"]) == (None, 4.0, "f-early")
    assert aggregate(svc, "rating") == {"n": 1, "n_pass": 0, "n_fail": 0, "total": 4.0}


def test_feedback_by_response_id_finds_the_trace_with_that_llm_response_before_or_after(svc: Service) -> None:
    late = post(svc, {"response_id": "chatcmpl-early", "name": "helpful", "label": "yes"})
    assert late.json()["waiting"] == 1
    early_trace = send_request(svc, response_id="chatcmpl-early")
    later_trace = send_request(svc, response_id="chatcmpl-later")
    assembled(svc, later_trace)

    answer = post(svc, {"response_id": "chatcmpl-later", "name": "helpful", "value": 0})

    assert answer.json()["attached"] == 1
    wait_for(lambda: len(human_scores(svc)) == 2, timeout=20, what="both feedback items attached")
    by_trace = {s["trace_id"]: s for s in human_scores(svc)}
    assert by_trace[early_trace]["status"] == "pass" and by_trace[early_trace]["value"] == 1.0
    assert by_trace[later_trace]["status"] == "fail"
    # The response was resolved to its trace once, and the trace id kept on the feedback row.
    rows = sql(svc, "SELECT response_id, trace_id FROM feedback ORDER BY response_id")
    assert rows == [
        {"response_id": "chatcmpl-early", "trace_id": early_trace},
        {"response_id": "chatcmpl-later", "trace_id": later_trace},
    ]


def test_a_repeated_feedback_id_replaces_the_first_and_counts_once(svc: Service) -> None:
    trace_id = send_request(svc)
    assembled(svc, trace_id)
    first = {"feedback_id": "f-1", "trace_id": trace_id, "name": "thumbs", "label": "up"}

    for body in (
        first,
        first,
        {**first, "label": "down"},
        [{**first, "label": "up"}, {**first, "label": "down"}],
    ):
        assert post(svc, body).status_code == 200

    [score] = human_scores(svc)
    assert score["status"] == "fail"  # the last item of the last request
    assert sql(svc, "SELECT count(*) AS n FROM feedback")[0]["n"] == 1
    assert aggregate(svc, "thumbs") == {"n": 1, "n_pass": 0, "n_fail": 1, "total": 0.0}


def test_bad_items_are_refused_with_the_field_and_nothing_of_the_request_is_stored(svc: Service) -> None:
    trace_id = os.urandom(16).hex()
    good = {"trace_id": trace_id, "name": "thumbs", "label": "up"}
    cases = [
        ({**good, "rating": 5}, "rating: unknown field"),
        ([good, {**good, "trace_id": "xyz"}], "[1].trace_id: String should match pattern"),
        ([good, {"name": "thumbs", "value": 1}], "[1]: give trace_id or response_id"),
        ({"trace_id": trace_id, "name": "thumbs"}, "give value or label"),
        ({**good, "name": ""}, "name: String should have at least 1 character"),
        ([good, 3], "[1]: each item is a JSON object"),
        ([], "no feedback"),
    ]
    for body, message in cases:
        answer = post(svc, body)
        assert answer.status_code == 400, body
        assert message in answer.json()["error"], (body, answer.json())
    bad_json = httpx.post(f"{svc.http_url}/api/feedback", content=b"{", timeout=10)
    assert bad_json.status_code == 400 and "must be JSON" in bad_json.json()["error"]
    nan = httpx.post(
        f"{svc.http_url}/api/feedback",
        content=b'{"trace_id": "%s", "name": "x", "value": NaN}' % trace_id.encode(),
    )
    assert nan.status_code == 400
    assert sql(svc, "SELECT count(*) AS n FROM feedback")[0]["n"] == 0
    assert metric(svc, "ragpulse_feedback_items_total", outcome="refused") == len(cases) + 2


# --------------------------------------------------------------------------- durability


def late_span(target: Any, trace_id: str) -> None:
    """A span of the trace's service whose parent is a caller elsewhere: the trace's entry."""
    provider = sdk_tracer_provider(target, "shop-bot")
    with provider.get_tracer("tests").start_as_current_span("late", context=remote_parent(trace_id)):
        pass
    provider.shutdown()


def test_feedback_survives_a_re_assembly_of_its_trace_and_a_sigkill(serve_process: ServeProcess) -> None:
    srv = serve_process
    srv.start(decision_wait="0.3")
    waiting_trace = os.urandom(16).hex()
    early = post(srv, {"trace_id": waiting_trace, "name": "thumbs", "label": "down", "feedback_id": "w"})
    assert early.json()["waiting"] == 1
    trace_id = send_request(srv)
    assembled(srv, trace_id)
    answer = post(srv, {"trace_id": trace_id, "name": "thumbs", "label": "up", "feedback_id": "a"})
    assert answer.json()["attached"] == 1

    # A late span assembles the trace again: every score is made again, the feedback's too.
    late_span(srv, trace_id)
    wait_for(
        lambda: (
            sql(srv, f"SELECT assembly_count FROM traces WHERE trace_id = '{trace_id}'")[0]["assembly_count"]
            == 2
        ),
        timeout=20,
        what="the trace assembled again",
    )
    [score] = human_scores(srv, trace_id)
    assert (score["feedback_id"], score["status"], score["revision"]) == ("a", "pass", 2)
    assert aggregate(srv, "thumbs") == {"n": 1, "n_pass": 1, "n_fail": 0, "total": 1.0}

    srv.kill()
    srv.start(decision_wait="0.3")

    # The feedback acknowledged before the kill is attached when its trace comes, after it.
    late_span(srv, waiting_trace)
    wait_for(lambda: len(human_scores(srv)) == 2, timeout=20, what="the waiting feedback attached")
    assert {s["feedback_id"]: s["status"] for s in human_scores(srv)} == {"a": "pass", "w": "fail"}
    assert aggregate(srv, "thumbs") == {"n": 2, "n_pass": 1, "n_fail": 1, "total": 1.0}
