"""Online scoring end to end: the real OpenTelemetry SDK as the app, a real ragpulse service, the
OpenAI-protocol test server as the judge, and a second real ragpulse as the downstream OTLP/gRPC
backend that receives the evaluation spans (and the forwarded spans)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import yaml
from opentelemetry.sdk.trace import TracerProvider

from collector.service import BackgroundService, Service
from semconv import emit
from tests.support.helpers import (
    DEFAULT_SCORE_NAMES,
    ServeProcess,
    fast_assembler,
    make_config,
    metric,
    sdk_tracer_provider,
    sql,
    wait_for,
)
from tests.support.openai_stub import ChatReply, OpenAIStub, RecordedRequest, passing_verdict

POLICY = "Items can be returned within 30 days of delivery for a full refund."
SHIPPING = "Standard shipping takes 3 to 5 business days."
QUESTION = "How long do I have to return an item?"
ANSWER = "Items can be returned within 30 days of delivery for a full refund."
DETERMINISTIC = DEFAULT_SCORE_NAMES


def send_trace(
    provider: TracerProvider,
    *,
    answer: str = ANSWER,
    expected: list[str] | None = None,
    expected_answer: str | None = None,
    route: str | None = None,
) -> dict[str, str]:
    """One RAG request in the ragpulse convention; returns the span ids by role (hex)."""
    tracer = provider.get_tracer("test-app")
    ids: dict[str, str] = {}
    with emit.request(tracer, QUESTION) as request:
        if route:
            request.span.set_attribute("rag.route", route)
        if expected is not None or expected_answer is not None:
            request.expected(expected, expected_answer)
        with emit.retrieval(tracer, QUESTION, data_source="kb", top_k=2) as step:
            step.documents(
                [
                    {"id": "returns-policy", "score": 0.9, "content": POLICY},
                    {"id": "shipping-times", "score": 0.4, "content": SHIPPING},
                ]
            )
            ids["retrieval"] = format(step.span.get_span_context().span_id, "016x")
        with emit.chat(tracer, model="gpt-test", provider="openai") as chat:
            chat.messages([{"role": "user", "content": QUESTION}])
            chat.output(answer, input_tokens=50, output_tokens=12)
            ids["llm"] = format(chat.span.get_span_context().span_id, "016x")
        request.answer(answer)
        ids["root"] = format(request.span.get_span_context().span_id, "016x")
        ids["trace"] = format(request.span.get_span_context().trace_id, "032x")
    return ids


def scores_of(svc: Service | str, trace_id: str) -> dict[str, dict[str, Any]]:
    rows = sql(svc, f"SELECT * FROM scores WHERE trace_id = '{trace_id}'")
    by_name = {row["name"]: row for row in rows}
    assert len(by_name) == len(rows), f"two rows for one score name: {rows}"
    return by_name


def wait_scored(
    svc: Service, trace_id: str, names: set[str], timeout: float = 30
) -> dict[str, dict[str, Any]]:
    return wait_for(
        lambda: scores_of(svc, trace_id),
        lambda scores: names <= set(scores),
        timeout=timeout,
        what=f"scores {sorted(names)} of trace {trace_id}",
    )


def trace_row(svc: Service, trace_id: str) -> dict[str, Any]:
    (row,) = sql(svc, f"SELECT * FROM traces WHERE trace_id = '{trace_id}'")
    return row


def judge_config(stub: OpenAIStub, **judge: Any) -> dict[str, Any]:
    return {"base_url": stub.base_url, "model": "judge-test", "api_key": "test", "max_retries": 0, **judge}


# ---------------------------------------------------------------------------------------------------


def test_every_complete_trace_gets_the_deterministic_scores_under_the_right_spans(tmp_path: Path) -> None:
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        provider = sdk_tracer_provider(svc, "shop-bot")
        ids = send_trace(provider, expected=["returns-policy"], expected_answer=ANSWER)
        bare = send_trace(provider)  # no references: reference scores are skipped, not errors
        provider.shutdown()
        scores = wait_scored(svc, ids["trace"], DETERMINISTIC)
        unlabelled = wait_scored(svc, bare["trace"], DETERMINISTIC)
        trace = trace_row(svc, ids["trace"])
        events = sql(
            svc,
            "SELECT span_id, attributes FROM span_events "
            f"WHERE trace_id = '{ids['trace']}' AND source = 'ragpulse'",
        )
        aggregates = sql(svc, "SELECT * FROM score_aggregates WHERE name = 'retrieval.recall@5'")
        decisions = metric(
            svc, "ragpulse_sampling_decisions_total", decision="deterministic", reason="sampled"
        )
        stored = metric(
            svc, "ragpulse_scores_total", name="retrieval.recall@5", status="pass", evaluator="deterministic"
        )

    assert set(scores) == DETERMINISTIC
    assert (trace["sample_decision"], trace["sample_reason"], trace["judge_status"]) == (
        "deterministic",
        "sampled",
        None,
    )
    assert trace["scored_at"] is not None
    recall = scores["retrieval.recall@5"]
    assert (recall["value"], recall["status"], recall["evaluator"], recall["revision"]) == (
        1.0,
        "pass",
        "deterministic",
        1,
    )
    assert recall["service_name"] == "shop-bot" and recall["bucket"].endswith(":00")
    # Retrieval and context scores under the retrieval span, groundedness under the LLM span,
    # answer scores under the root span.
    for name, row in scores.items():
        expected_span = (
            ids["retrieval"]
            if name.startswith(("retrieval.", "context_"))
            else ids["llm"]
            if name in ("faithfulness", "citation")
            else ids["root"]
        )
        assert row["span_id"] == expected_span, name
    assert scores["faithfulness"]["status"] == "pass"
    assert unlabelled["retrieval.recall@5"]["status"] == "skipped"
    assert unlabelled["retrieval.recall@5"]["label"] == "no_expected_ids"
    assert unlabelled["answer_correctness"]["status"] == "skipped"
    # One write-back event per score, under the evaluated span, with the GenAI attributes.
    assert len(events) == len(scores)
    by_name = {e["attributes"]["gen_ai.evaluation.name"]: e for e in events}
    assert by_name["retrieval.recall@5"]["span_id"] == ids["retrieval"]
    attributes = by_name["retrieval.recall@5"]["attributes"]
    assert attributes["gen_ai.evaluation.score.value"] == 1.0
    assert attributes["ragpulse.status"] == "pass" and attributes["ragpulse.threshold"] == 1.0
    items = {item["text"]: item["ok"] for item in json.loads(attributes["ragpulse.items"])}
    assert items["returns-policy"] is True
    # Aggregates count what is in `scores`: one trace passed recall, one skipped it.
    assert len(aggregates) == 1
    assert (aggregates[0]["n"], aggregates[0]["n_pass"], aggregates[0]["n_skipped"]) == (2, 1, 1)
    assert aggregates[0]["sum"] == 1.0 and aggregates[0]["min"] == aggregates[0]["max"] == 1.0
    assert decisions == 2 and stored == 1


def test_golden_cases_give_online_traces_their_references(tmp_path: Path) -> None:
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        cases = {
            "cases": [{"id": "refund-window", "question": QUESTION, "expected_documents": ["returns-policy"]}]
        }
        assert httpx.post(f"{svc.http_url}/api/cases", json=cases, timeout=10).status_code == 200
        provider = sdk_tracer_provider(svc, "shop-bot")
        ids = send_trace(provider)
        provider.shutdown()
        scores = wait_scored(svc, ids["trace"], {"retrieval.recall@5"})
    assert scores["retrieval.recall@5"]["status"] == "pass"
    assert scores["context_recall"]["label"] == "no_reference"  # the case has no expected answer


def test_sampling_rate_rules_and_not_applicable_traces_are_recorded(tmp_path: Path) -> None:
    sampling = {
        "rate": 0.0,
        "rules": [{"name": "refunds", "match": {"attributes": {"rag.route": "refunds"}}, "rate": 1.0}],
    }
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler(), sampling=sampling)) as svc:
        provider = sdk_tracer_provider(svc, "shop-bot")
        refunds = send_trace(provider, route="refunds")
        other = send_trace(provider, route="shipping")
        with provider.get_tracer("t").start_as_current_span("plain work"):
            pass
        provider.shutdown()
        wait_scored(svc, refunds["trace"], DETERMINISTIC)
        rows = wait_for(
            lambda: sql(svc, "SELECT convention, sample_decision, sample_reason FROM traces ORDER BY ALL"),
            lambda rows: len(rows) == 3,
            what="three assembled traces",
        )
        unscored = sql(svc, f"SELECT count(*) AS n FROM scores WHERE trace_id = '{other['trace']}'")
    assert {(r["sample_decision"], r["sample_reason"]) for r in rows} == {
        ("deterministic", "rule:refunds"),
        ("skip", "not_sampled"),
        ("skip", "not_applicable"),
    }
    assert unscored == [{"n": 0}]


def test_judge_scores_arrive_for_judge_sampled_traces(tmp_path: Path, judge: OpenAIStub) -> None:
    config = make_config(
        tmp_path,
        assembler=fast_assembler(),
        judge=judge_config(judge),
        sampling={"judge_rate": 1.0},
        scoring={"judge_poll_interval": 0.1},
    )
    with BackgroundService(config) as svc:
        provider = sdk_tracer_provider(svc, "shop-bot")
        ids = send_trace(provider, expected=["returns-policy"], expected_answer=ANSWER)
        provider.shutdown()
        judged = {"faithfulness", "context_relevance", "context_precision", "context_recall"}
        scores = wait_scored(svc, ids["trace"], judged | {"answer_relevance", "answer_correctness"})
        trace = wait_for(
            lambda: trace_row(svc, ids["trace"]), lambda row: row["judge_status"] == "done", what="judge done"
        )
        health = httpx.get(f"{svc.http_url}/healthz", timeout=5).json()
        calls = metric(svc, "ragpulse_judge_calls_total", outcome="ok")
    faithfulness = scores["faithfulness"]
    assert (faithfulness["evaluator"], faithfulness["judge_model"], faithfulness["status"]) == (
        "judge",
        "judge-test",
        "pass",
    )
    assert faithfulness["judge_input_tokens"] > 0 and faithfulness["prompt_version"]
    # Exact rules stay deterministic; one row per name.
    assert scores["retrieval.recall@5"]["evaluator"] == "deterministic"
    assert (trace["sample_decision"], trace["sample_reason"]) == ("judge", "sampled")
    assert health == {
        "status": "ok",
        "store": {"writable": True},
        "judge": {"model": "judge-test", "ok": True, "error": None},
    }
    assert calls == 6


def test_a_judge_outage_gives_error_scores_and_ingestion_goes_on(tmp_path: Path) -> None:
    with OpenAIStub(responder=lambda request: ChatReply(status=500, error_message="model down")) as down:
        config = make_config(
            tmp_path,
            assembler=fast_assembler(),
            judge=judge_config(down),
            sampling={"judge_rate": 1.0},
            scoring={"judge_poll_interval": 0.1},
        )
        with BackgroundService(config) as svc:
            provider = sdk_tracer_provider(svc, "shop-bot")
            ids = send_trace(provider)
            provider.shutdown()
            scores = wait_scored(svc, ids["trace"], {"faithfulness", "retrieval.recall@5"})
            health = wait_for(
                lambda: httpx.get(f"{svc.http_url}/healthz", timeout=5).json(),
                lambda body: body["judge"]["ok"] is False,
                what="the judge reported down",
            )
            spans = sql(svc, f"SELECT count(*) AS n FROM spans WHERE trace_id = '{ids['trace']}'")
    assert scores["faithfulness"]["status"] == "error"
    assert scores["faithfulness"]["label"] in ("http_error", "retries_exhausted")
    assert scores["retrieval.recall@5"]["evaluator"] == "deterministic"
    assert "model down" in health["judge"]["error"] or "500" in health["judge"]["error"]
    assert spans == [{"n": 3}]


def test_a_judge_budget_throttles_and_records_the_reason(tmp_path: Path, judge: OpenAIStub) -> None:
    config = make_config(
        tmp_path,
        assembler=fast_assembler(),
        judge=judge_config(judge),
        sampling={"judge_rate": 1.0, "budget": {"judge_calls_per_minute": 6}},
        scoring={"judge_poll_interval": 0.1},
    )
    with BackgroundService(config) as svc:
        provider = sdk_tracer_provider(svc, "shop-bot")
        traces = [send_trace(provider)["trace"] for _ in range(3)]
        provider.shutdown()
        rows = wait_for(
            lambda: sql(svc, "SELECT trace_id, sample_decision, sample_reason, judge_status FROM traces"),
            lambda rows: len(rows) == 3 and all(r["judge_status"] in ("done", "throttled") for r in rows),
            what="every trace judged or throttled",
        )
    assert sorted(r["judge_status"] for r in rows) == ["done", "throttled", "throttled"]
    throttled = [r for r in rows if r["judge_status"] == "throttled"]
    assert all(
        (r["sample_decision"], r["sample_reason"]) == ("deterministic", "throttled") for r in throttled
    )
    assert {r["trace_id"] for r in rows} == set(traces)


def test_a_late_span_rescores_the_trace_and_replaces_its_rows(tmp_path: Path) -> None:
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as svc:
        provider = sdk_tracer_provider(svc, "shop-bot")
        ids = send_trace(provider, expected=["returns-policy"])
        wait_scored(svc, ids["trace"], DETERMINISTIC)
        # A late retrieval span of the same trace, under the root.
        from opentelemetry import trace as otel_trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

        parent = SpanContext(int(ids["trace"], 16), int(ids["root"], 16), True, TraceFlags(1))
        tracer = provider.get_tracer("test-app")
        with (
            otel_trace.use_span(NonRecordingSpan(parent)),
            emit.retrieval(tracer, QUESTION, data_source="kb2", top_k=1) as step,
        ):
            step.documents([{"id": "late-doc", "score": 0.2, "content": "Late."}])
        provider.shutdown()
        trace = wait_for(
            lambda: trace_row(svc, ids["trace"]), lambda row: row["assembly_count"] == 2, what="re-assembly"
        )
        scores = wait_for(
            lambda: scores_of(svc, ids["trace"]),
            lambda s: s and all(row["revision"] == 2 for row in s.values()),
            what="scores of revision 2",
        )
        events = sql(
            svc,
            "SELECT count(*) AS n FROM span_events "
            f"WHERE trace_id = '{ids['trace']}' AND source = 'ragpulse'",
        )
        aggregate = sql(svc, "SELECT n FROM score_aggregates WHERE name = 'retrieval.recall@5'")
    assert trace["assembly_reason"] == "late_span"
    assert set(scores) == DETERMINISTIC  # replaced, not added
    assert events == [{"n": len(DETERMINISTIC)}]
    assert aggregate == [{"n": 1}]


# ------------------------------------------------------------------------- export to a downstream


def test_scores_arrive_downstream_as_evaluation_events_parented_to_the_evaluated_span(
    tmp_path: Path, downstream: Service
) -> None:
    exporters = {"otlp": {"endpoint": f"127.0.0.1:{downstream.grpc_port}"}, "forward_spans": True}
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler(), exporters=exporters)) as svc:
        provider = sdk_tracer_provider(svc, "shop-bot")
        ids = send_trace(provider, expected=["returns-policy"])
        provider.shutdown()
        wait_scored(svc, ids["trace"], DETERMINISTIC)
        evaluation = wait_for(
            lambda: sql(
                downstream,
                "SELECT s.span_id, s.parent_span_id, s.name, e.attributes FROM spans s "
                "JOIN span_events e USING (trace_id, span_id) "
                f"WHERE s.trace_id = '{ids['trace']}' AND e.name = 'gen_ai.evaluation.result'",
            ),
            lambda rows: len(rows) == len(DETERMINISTIC),
            what="every evaluation event downstream",
        )
        forwarded = sql(
            downstream,
            "SELECT span_id, name FROM spans "
            f"WHERE trace_id = '{ids['trace']}' AND name <> 'ragpulse.evaluation'",
        )
        outbox = wait_for(
            lambda: sql(svc, "SELECT count(*) AS n FROM evaluation_outbox"), lambda rows: rows[0]["n"] == 0
        )
    by_name = {row["attributes"]["gen_ai.evaluation.name"]: row for row in evaluation}
    assert by_name["retrieval.recall@5"]["parent_span_id"] == ids["retrieval"]
    assert by_name["faithfulness"]["parent_span_id"] == ids["llm"]
    assert by_name["answer_relevance"]["parent_span_id"] == ids["root"]
    assert by_name["retrieval.recall@5"]["attributes"]["gen_ai.evaluation.score.value"] == 1.0
    assert {row["name"] for row in evaluation} == {"ragpulse.evaluation"}
    assert {row["span_id"] for row in forwarded} == {ids["root"], ids["retrieval"], ids["llm"]}
    assert outbox == [{"n": 0}]


def test_a_downstream_outage_loses_no_evaluation_event(tmp_path: Path) -> None:
    from tests.support.helpers import free_port

    port = free_port()
    exporters = {"otlp": {"endpoint": f"127.0.0.1:{port}", "timeout": 1}, "export_interval": 0.2}
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler(), exporters=exporters)) as svc:
        provider = sdk_tracer_provider(svc, "shop-bot")
        ids = send_trace(provider)
        provider.shutdown()
        wait_scored(svc, ids["trace"], DETERMINISTIC)
        wait_for(
            lambda: metric(svc, "ragpulse_evaluation_export_errors_total"),
            lambda errors: errors >= 1,
            what="a failed export",
        )
        waiting = sql(svc, "SELECT count(*) AS n FROM evaluation_outbox")
        assert waiting == [{"n": len(DETERMINISTIC)}]
        # The downstream comes up on that port: everything waiting arrives.
        config = make_config(tmp_path / "late", assembler={"enabled": False}, receivers={"grpc_port": port})
        (tmp_path / "late").mkdir()
        with BackgroundService(config) as late:
            arrived = wait_for(
                lambda: sql(
                    late, "SELECT count(*) AS n FROM span_events WHERE name = 'gen_ai.evaluation.result'"
                ),
                lambda rows: rows[0]["n"] == len(DETERMINISTIC),
                timeout=60,
                what="the waiting events downstream",
            )
    assert arrived == [{"n": len(DETERMINISTIC)}]


# ------------------------------------------------------------------------- crash while judging


def test_sigkill_while_judge_calls_are_in_flight_scores_every_trace_once_after_restart(
    tmp_path: Path,
) -> None:
    def slow_judge(request: RecordedRequest) -> ChatReply:
        messages = request.json["messages"]
        content = json.dumps(passing_verdict(messages[0]["content"], messages[-1]["content"]))
        return ChatReply(content=content, delay=1.5)

    with OpenAIStub(responder=slow_judge) as stub:
        config = tmp_path / "ragpulse.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "judge": judge_config(stub),
                    "sampling": {"judge_rate": 1.0},
                    "scoring": {"judge_poll_interval": 0.1},
                    "assembler": fast_assembler(workers=0),
                    "evaluators": [{"name": "retrieval.recall@5"}, {"name": "faithfulness"}],
                }
            )
        )
        server = ServeProcess(tmp_path / "ragpulse.duckdb", tmp_path / "serve.log", config)
        try:
            server.start()
            provider = sdk_tracer_provider(server, "shop-bot")
            traces = [send_trace(provider, expected=["returns-policy"])["trace"] for _ in range(6)]
            provider.shutdown()
            # Judge calls are in flight (the judge takes 1.5 s) and none has been stored yet.
            wait_for(lambda: len(stub.chat_requests), lambda n: n >= 2, what="judge calls in flight")
            pending = sql(server, "SELECT count(*) AS n FROM traces WHERE judge_status = 'pending'")
            server.kill()
            assert pending[0]["n"] >= 1
            server.start()
            done = wait_for(
                lambda: sql(server, "SELECT trace_id FROM traces WHERE judge_status = 'done'"),
                lambda rows: len(rows) == len(traces),
                timeout=60,
                what="every trace judged after the restart",
            )
            counts = sql(
                server,
                "SELECT trace_id, name, evaluator, count(*) AS n FROM scores GROUP BY ALL ORDER BY ALL",
            )
            aggregates = sql(server, "SELECT name, n FROM score_aggregates ORDER BY name")
            server.terminate()
        finally:
            server.cleanup()
    assert {row["trace_id"] for row in done} == set(traces)
    # Exactly one row per (trace, score): the judge's faithfulness and the deterministic recall.
    assert len(counts) == 2 * len(traces)
    assert all(row["n"] == 1 for row in counts)
    assert {(row["name"], row["evaluator"]) for row in counts} == {
        ("faithfulness", "judge"),
        ("retrieval.recall@5", "deterministic"),
    }
    assert aggregates == [
        {"name": "faithfulness", "n": len(traces)},
        {"name": "retrieval.recall@5", "n": len(traces)},
    ]


def test_replay_into_a_file_scores_the_traces_as_the_service_would(tmp_path: Path) -> None:
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    from tests.support.helpers import file_rows, key_values, run_ragpulse, trace_request

    trace_id, now = bytes.fromhex("ab" * 16), 1_700_000_000_000_000_000
    documents = json.dumps([{"id": "returns-policy", "score": 0.9, "content": POLICY}])

    def span(number: int, parent: int | None, name: str, attributes: dict[str, Any]) -> Span:
        return Span(
            trace_id=trace_id,
            span_id=number.to_bytes(8, "big"),
            parent_span_id=parent.to_bytes(8, "big") if parent else b"",
            name=name,
            start_time_unix_nano=now + number * 1_000_000,
            end_time_unix_nano=now + 50_000_000,
            attributes=key_values(attributes),
        )

    spans = [
        span(1, None, "rag.request", {"rag.question": QUESTION, "rag.answer": ANSWER, "rag.step": "chain"}),
        span(
            2,
            1,
            "retrieval kb",
            {
                "gen_ai.operation.name": "retrieval",
                "gen_ai.retrieval.query.text": QUESTION,
                "gen_ai.retrieval.documents": documents,
            },
        ),
        span(3, 1, "chat m", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}),
    ]
    capture = tmp_path / "capture.pb"
    capture.write_bytes(trace_request(spans, "shop-bot", "app").SerializeToString())
    db = tmp_path / "replayed.duckdb"
    done = run_ragpulse("replay", str(capture), "--db", str(db), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    traces = file_rows(db, "SELECT sample_decision, sample_reason FROM traces")
    names = {row["name"] for row in file_rows(db, "SELECT name FROM scores")}
    assert traces == [{"sample_decision": "deterministic", "sample_reason": "sampled"}]
    assert names == DETERMINISTIC
