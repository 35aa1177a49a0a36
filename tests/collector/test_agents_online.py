"""Agents through the running service: an agent's spans sent with the real OTel SDK over OTLP are
stored with their tool steps and counts, scored as grounded (or not), a trace that retrieved nothing
gets `no_retrieval` skips that count against no pass rate, `mapping:` reaches the mapping workers,
and `ragpulse eval` keeps treating a case without retrieval as an error.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collector.service import BackgroundService
from tests.support.agentic import (
    FIRST_QUERY,
    GROUNDED_ANSWER,
    INVENTED_ANSWER,
    QUESTION,
    SECOND_QUERY,
    emit_genai_agent,
    expected_ids,
)
from tests.support.helpers import (
    fast_assembler,
    make_config,
    run_ragpulse,
    sdk_tracer_provider,
    sql,
    wait_for,
)

NEEDS_DOCUMENTS = {
    "faithfulness",
    "context_precision",
    "context_recall",
    "context_relevance",
    "context_entity_recall",
    "citation",
}


def scores(service: BackgroundService, trace_id: str) -> dict[str, dict[str, object]]:
    rows = wait_for(
        lambda: sql(service, f"SELECT * FROM scores WHERE trace_id = '{trace_id}'"),
        lambda rows: any(r["name"] == "faithfulness" for r in rows),
        timeout=30,
        what=f"scores of {trace_id}",
    )
    return {str(r["name"]): r for r in rows}


def small_talk(tracer: object) -> str:
    """An agent turn that retrieves nothing: a greeting answered by one chat call."""
    with tracer.start_as_current_span("invoke_agent shop_assistant") as agent:  # type: ignore[attr-defined]
        agent.set_attribute("gen_ai.operation.name", "invoke_agent")
        user = [{"role": "user", "parts": [{"type": "text", "content": "Hi there!"}]}]
        agent.set_attribute("gen_ai.input.messages", json.dumps(user))
        with tracer.start_as_current_span("chat gpt-4o-mini") as chat:  # type: ignore[attr-defined]
            chat.set_attribute("gen_ai.operation.name", "chat")
            chat.set_attribute("gen_ai.request.model", "gpt-4o-mini")
            reply = [
                {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": "Hello! The shop opens at 9 am every day."}],
                    "finish_reason": "stop",
                }
            ]
            chat.set_attribute("gen_ai.output.messages", json.dumps(reply))
        return format(agent.get_span_context().trace_id, "032x")


def test_an_agent_is_stored_with_its_tool_steps_and_scored_as_grounded(tmp_path: Path) -> None:
    # Mapping workers (a process) this time: `mapping:` must travel with the jobs.
    config = make_config(
        tmp_path,
        assembler={**fast_assembler(), "workers": 1},
        mapping={"retrieval_tools": ["lookup_*"], "detect_retrieval_tools": True},
    )
    with BackgroundService(config) as service:
        provider = sdk_tracer_provider(service, "shop-agent")
        tracer = provider.get_tracer("agent-app")
        grounded = emit_genai_agent(tracer, GROUNDED_ANSWER, failed_tool=True)
        invented = emit_genai_agent(tracer, INVENTED_ANSWER)
        chat_only = small_talk(tracer)
        provider.shutdown()

        grounded_scores = scores(service, grounded)
        assert grounded_scores["faithfulness"]["status"] == "pass"
        assert scores(service, invented)["faithfulness"]["status"] == "fail"

        (row,) = sql(service, f"SELECT * FROM traces WHERE trace_id = '{grounded}'")
        assert (row["question"], row["answer"]) == (QUESTION, GROUNDED_ANSWER)
        assert (row["tool_calls"], row["tool_errors"], row["retrieval_rounds"], row["llm_calls"]) == (
            3,
            1,
            2,
            4,
        )
        steps = sql(
            service,
            f"SELECT kind, tool_name, query, input, result_size, status FROM steps "
            f"WHERE trace_id = '{grounded}' AND tool_name IS NOT NULL ORDER BY position",
        )
        assert [(s["kind"], s["tool_name"], s["status"]) for s in steps] == [
            ("retrieval", "search_docs", "UNSET"),
            ("tool", "get_order_status", "ERROR"),
            ("retrieval", "search_docs", "UNSET"),
        ]
        assert [s["query"] for s in steps if s["kind"] == "retrieval"] == [FIRST_QUERY, SECOND_QUERY]
        assert steps[1]["input"] == json.dumps({"order_id": "A-1001"})
        assert all(s["result_size"] and s["result_size"] > 0 for s in steps if s["kind"] == "retrieval")
        documents = sql(
            service,
            "SELECT d.doc_id FROM documents d JOIN steps s USING (trace_id, span_id) "
            f"WHERE d.trace_id = '{grounded}' ORDER BY s.position, d.rank",
        )
        assert [d["doc_id"] for d in documents] == expected_ids(FIRST_QUERY) + expected_ids(SECOND_QUERY)

        # Small talk: every score of documents is skipped (`no_retrieval`), never failed; the
        # answer's own scores (answer_relevance) still apply.
        chat_scores = scores(service, chat_only)
        for name in NEEDS_DOCUMENTS:
            assert (chat_scores[name]["status"], chat_scores[name]["label"]) == ("skipped", "no_retrieval"), (
                name
            )
        assert chat_scores["answer_relevance"]["status"] in ("pass", "fail")

    # The gate counts passes among pass and fail only: the skipped small talk changes nothing.
    gate = run_ragpulse(
        "check",
        "--db",
        str(tmp_path / "ragpulse.duckdb"),
        "--since",
        "1h",
        "--min",
        "faithfulness=0.5",
        "--min-samples",
        "2",
        "--json",
        cwd=tmp_path,
    )
    report = json.loads(gate.stdout)
    (faithfulness,) = [g for g in report["gates"] if g["score"] == "faithfulness"]
    assert (faithfulness["n"], faithfulness["value"]) == (2, 0.5), faithfulness  # 1 pass, 1 fail
    assert gate.returncode == 0, gate.stdout + gate.stderr


def test_ragpulse_eval_errors_on_a_case_whose_trace_retrieved_nothing(tmp_path: Path) -> None:
    """Online a trace without retrieval is not applicable; in a suite, whose cases promise their
    retrieval, it is a broken test: an error, and a non-zero exit."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace_id = small_talk(provider.get_tracer("agent-app"))
    provider.shutdown()
    request = encode_spans(exporter.get_finished_spans())
    (tmp_path / "trace.json").write_text(json_format.MessageToJson(request))
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        yaml.safe_dump(
            {
                "name": "agent",
                "evaluators": [{"name": "faithfulness"}],
                "cases": [{"name": "greeting", "trace": "trace.json", "trace_id": trace_id}],
            }
        )
    )
    result = run_ragpulse("eval", str(suite), "--json", str(tmp_path / "out.json"), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    ((score,),) = [case["scores"] for case in json.loads((tmp_path / "out.json").read_text())]
    assert (score["status"], score["label"]) == ("error", "no_retrieval"), score


def test_a_bad_mapping_key_is_refused_with_its_path(tmp_path: Path) -> None:
    config = tmp_path / "ragpulse.yaml"
    config.write_text("mapping:\n  retrieval_tool: [search_docs]\n")
    result = run_ragpulse(
        "--config", str(config), "sql", "SELECT 1", "--db", str(tmp_path / "x.duckdb"), cwd=tmp_path
    )
    assert result.returncode != 0
    assert "mapping.retrieval_tool: unknown key" in result.stderr
    config.write_text("mapping:\n  retrieval_tools: ['']\n")
    result = run_ragpulse(
        "--config", str(config), "sql", "SELECT 1", "--db", str(tmp_path / "x.duckdb"), cwd=tmp_path
    )
    assert result.returncode != 0 and "mapping.retrieval_tools" in result.stderr
