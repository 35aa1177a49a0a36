"""An app's own `gen_ai.evaluation.result` events become external scores, sent either way the
OpenTelemetry GenAI conventions allow: as span events, or as log records in the span's context.

Real parts: a service on loopback ports, the real OpenTelemetry SDK's span and log exporters, the
DuckDB file read through /api/sql.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from collector.feedback.verdicts import value_of, verdict
from collector.service import Service
from tests.support.helpers import (
    emit_rag_request,
    sdk_exporter,
    sdk_tracer_provider,
    sql,
    wait_for,
)

QUESTION = "Do you ship to Norway?"
DOCUMENT = "We ship to Norway in 5-7 days."
ANSWER = "Yes, in 5 to 7 days."
EVENT = "gen_ai.evaluation.result"


def external_scores(svc: Service) -> list[dict[str, Any]]:
    return sql(
        svc,
        "SELECT trace_id, span_id, name, value, status, label, explanation, source, service_name "
        "FROM scores WHERE evaluator = 'external' ORDER BY name",
    )


def request_with_events(svc: Service, on_chat: Any) -> tuple[str, str]:
    """One RAG request whose chat span gets `on_chat(span)` before it ends; (trace id, chat span id)."""
    provider = sdk_tracer_provider(svc, "shop-bot", transport="grpc")
    chat_spans: list[str] = []

    def evaluate(span: Any) -> None:
        on_chat(span)
        chat_spans.append(format(span.get_span_context().span_id, "016x"))

    trace_id = emit_rag_request(provider.get_tracer("tests"), QUESTION, DOCUMENT, ANSWER, on_chat=evaluate)
    provider.shutdown()
    return trace_id, chat_spans[0]


def test_evaluation_span_events_are_external_scores_counted_once(svc: Service) -> None:
    def evaluate(span: Any) -> None:
        span.add_event(
            EVENT,
            {
                "gen_ai.evaluation.name": "relevance",
                "gen_ai.evaluation.score.value": 0.25,
                "gen_ai.evaluation.score.label": "irrelevant",
                "gen_ai.evaluation.explanation": "talks about Sweden",
            },
        )
        span.add_event(EVENT, {"gen_ai.evaluation.name": "tone", "gen_ai.evaluation.score.value": 1})
        span.add_event(EVENT, {"gen_ai.evaluation.score.value": 1})  # no name: not a score
        # An event ragpulse wrote back, come round again (a Collector that loops its exports back).
        span.add_event(EVENT, {"gen_ai.evaluation.name": "faithfulness", "ragpulse.evaluator": "judge"})

    trace_id, chat_span = request_with_events(svc, evaluate)

    wait_for(lambda: len(external_scores(svc)) == 2, timeout=20, what="two external scores")
    relevance, tone = external_scores(svc)
    assert relevance == {
        "trace_id": trace_id,
        "span_id": chat_span,
        "name": "relevance",
        "value": 0.25,
        "status": "fail",
        "label": "irrelevant",
        "explanation": "talks about Sweden",
        "source": "shop-bot",
        "service_name": "shop-bot",
    }
    assert (tone["status"], tone["value"]) == ("pass", 1.0)
    aggregates = sql(svc, "SELECT n, n_fail, sum FROM score_aggregates WHERE name = 'relevance'")
    assert aggregates == [{"n": 1, "n_fail": 1, "sum": 0.25}]
    # The app's events show in the trace once, as it sent them: not again as ragpulse's write-back.
    events = sql(
        svc,
        f"SELECT source FROM span_events WHERE name = '{EVENT}' "
        "AND (attributes->>'gen_ai.evaluation.name') IN ('relevance', 'tone')",
    )
    assert [e["source"] for e in events] == ["otlp", "otlp"]


def test_evaluation_log_records_in_a_span_context_are_external_scores(svc: Service) -> None:
    logs = LoggerProvider(resource=Resource.create({"service.name": "eval-sidecar"}))
    logs.add_log_record_processor(SimpleLogRecordProcessor(sdk_exporter(svc, "logs", "http")))
    logger = logs.get_logger("tests")

    def evaluate(span: Any) -> None:
        context = trace_api.set_span_in_context(span)
        logger.emit(
            event_name=EVENT,
            context=context,
            attributes={"gen_ai.evaluation.name": "groundedness", "gen_ai.evaluation.score.label": "PASS"},
        )
        logger.emit(
            event_name=EVENT,
            context=context,
            attributes={"gen_ai.evaluation.name": "toxicity", "error.type": "timeout"},
        )

    trace_id, chat_span = request_with_events(svc, evaluate)
    logs.shutdown()

    wait_for(lambda: len(external_scores(svc)) == 2, timeout=20, what="two external scores from logs")
    groundedness, toxicity = external_scores(svc)
    assert (groundedness["trace_id"], groundedness["span_id"]) == (trace_id, chat_span)
    assert (groundedness["status"], groundedness["value"], groundedness["label"]) == ("pass", 1.0, "PASS")
    # The span's service sent it: the log records' own resource names no span.
    assert groundedness["source"] == "shop-bot"
    assert (toxicity["status"], toxicity["value"]) == ("error", None)


@pytest.mark.parametrize(
    ("value", "label", "expected"),
    [
        (None, "thumbs_up", "pass"),
        (None, "Thumbs-Down", "fail"),
        (None, "👍", "pass"),
        (None, "-1", "fail"),
        (None, "+1", "pass"),
        (None, "neutral", None),
        (1.0, None, "pass"),
        (0.0, None, "fail"),
        (0.5, None, None),
        (4.0, None, None),
        (0.0, "good", "pass"),  # the label decides
        (float("nan"), None, None),
    ],
)
def test_verdicts_read_from_labels_and_values(
    value: float | None, label: str | None, expected: str | None
) -> None:
    assert verdict(value, label) == expected


def test_a_label_that_decides_gives_the_value_when_none_was_given() -> None:
    assert value_of(None, "pass") == 1.0
    assert value_of(None, "fail") == 0.0
    assert value_of(None, None) is None
    assert value_of(0.3, "pass") == 0.3


def test_evaluation_log_records_naming_a_response_score_the_trace_that_gave_it(svc: Service) -> None:
    logs = LoggerProvider(resource=Resource.create({"service.name": "eval-sidecar"}))
    logs.add_log_record_processor(SimpleLogRecordProcessor(sdk_exporter(svc, "logs", "grpc")))
    logger = logs.get_logger("tests")
    attributes = {
        "gen_ai.evaluation.name": "helpfulness",
        "gen_ai.evaluation.score.label": "unhelpful",
        "gen_ai.response.id": "chatcmpl-42",
    }
    # Before the trace is here, and again (an exporter retrying): one score, when the trace comes.
    timestamp = 1_765_000_000_000_000_000
    for _ in range(2):
        logger.emit(event_name=EVENT, timestamp=timestamp, attributes=attributes)
    trace_id, _ = request_with_events(
        svc, lambda span: span.set_attribute("gen_ai.response.id", "chatcmpl-42")
    )
    logs.shutdown()

    wait_for(lambda: external_scores(svc), timeout=20, what="the response's evaluation attached")
    [score] = external_scores(svc)
    root = sql(svc, f"SELECT root_span_id FROM traces WHERE trace_id = '{trace_id}'")[0]["root_span_id"]
    assert (score["trace_id"], score["span_id"], score["name"]) == (trace_id, root, "helpfulness")
    assert (score["status"], score["value"], score["source"]) == ("fail", 0.0, "eval-sidecar")
    assert sql(svc, "SELECT count(*) AS n FROM feedback")[0]["n"] == 1
