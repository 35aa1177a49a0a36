"""What the agent-framework tests share (tests/frameworks/test_agents_*.py): a knowledge base and its search
tool, the scripted model turns of an agent that searches twice and answers, span capture with a
private OpenTelemetry SDK provider, and the assertions every framework's trace must meet.

The app is the same whatever the framework: an agent with one tool, `search_docs(query)`, over
`KNOWLEDGE_BASE`. The model (the OpenAI-protocol stub, tests/support/openai_stub.py) first calls the tool with
`FIRST_QUERY`, then with `SECOND_QUERY`, then answers `QUESTION` with `GROUNDED_ANSWER` (every claim
from the documents the two searches returned) or `INVENTED_ANSWER` (claims no document makes). The
real framework and its real instrumentation emit the spans; the tests check what ragpulse reads from
them: the question, the answer, one retrieval step per search with the documents (ids and text) in
the tool's order, and deterministic faithfulness passing on the grounded answer and failing on the
invented one.

Also shared: `ANSWERS` and `OPTIONS`, the parametrizations of the tests (both answers; the tool
detected, or named in the options); `keyword_vector`, the bag-of-words embedding of the frameworks'
vector stores; `instrumenting`, an instrumentor on the private provider for one test; and what the
sandbox every test runs in checks (`assert_no_network`, `Sandbox.check`). The fixtures (`capture`,
`loopback_only`, `sandbox`, `no_leaked_context`) are in tests/frameworks/conftest.py.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collector.otlp.batch import decode_request
from collector.schema.span_records import span_records
from evaluators.registry import build_evaluator
from evaluators.scores import Score
from semconv import RagTrace, SpanRecord
from semconv.mapping import MappingOptions, map_trace
from tests.support.openai_stub import ChatReply, OpenAIStub

KNOWLEDGE_BASE: dict[str, str] = {
    "refunds": "Refunds are issued within 5 business days of receiving the returned item.",
    "returns-window": "Items can be returned within 30 days of delivery.",
    "shipping": "Standard shipping takes 3 to 7 business days.",
    "warranty": "The warranty covers manufacturing defects for two years.",
}
QUESTION = "How long do refunds take, and how long do I have to return an item?"
FIRST_QUERY = "refund processing time"
SECOND_QUERY = "return window for items"
GROUNDED_ANSWER = (
    "Refunds are issued within 5 business days of receiving the returned item. "
    "Items can be returned within 30 days of delivery."
)
INVENTED_ANSWER = "Refunds take 90 days to process, and every refund includes a $50 store credit."
QUERIES = (FIRST_QUERY, SECOND_QUERY)
TOOL_NAME = "search_docs"
TOOL_DESCRIPTION = "Search the shop's knowledge base and return the matching documents."
MODEL = "gpt-4o-mini"

# Each test runs on both answers, and where the tool is detected as well as named in the options.
ANSWERS = pytest.mark.parametrize("answer", [GROUNDED_ANSWER, INVENTED_ANSWER], ids=["grounded", "invented"])
CONFIGURED = MappingOptions(retrieval_tools=(TOOL_NAME,), detect_retrieval_tools=False)
OPTIONS = pytest.mark.parametrize("options", [MappingOptions(), CONFIGURED], ids=["detected", "configured"])


def search_docs(query: str, k: int = 2) -> list[dict[str, str]]:
    """The knowledge base's top `k` documents for `query`, best first, as `{"id", "text"}`.

    Scored by shared word stems (the first five letters), ties broken by id, so each query's
    result is known: FIRST_QUERY -> refunds, then returns-window; SECOND_QUERY -> returns-window,
    then refunds."""

    def stems(text: str) -> set[str]:
        return {word[:5] for word in re.findall(r"[a-z]+", text.lower()) if len(word) > 2}

    wanted = stems(query)
    ranked = sorted(KNOWLEDGE_BASE, key=lambda doc_id: (-len(wanted & stems(KNOWLEDGE_BASE[doc_id])), doc_id))
    return [{"id": doc_id, "text": KNOWLEDGE_BASE[doc_id]} for doc_id in ranked[:k]]


def expected_ids(query: str) -> list[str]:
    return [doc["id"] for doc in search_docs(query)]


def search_results(queries: tuple[str, ...] = QUERIES) -> list[list[dict[str, str]]]:
    """What `search_docs` returns for each query, in call order."""
    return [search_docs(query) for query in queries]


# Word prefixes, chosen so that a vector store's top 2 by `keyword_vector` is `search_docs`' top 2, in
# the same order: FIRST_QUERY shares 'refund' with refunds only, and of the documents it shares nothing
# with, returns-window has the fewest vocabulary words (the constant component then favours it);
# SECOND_QUERY shares 'return' and 'item' with both refunds and returns-window, and returns-window is
# the shorter of the two. The frameworks' vector-store fixtures check it.
VOCABULARY = (
    "refund",
    "return",
    "window",
    "item",
    "day",
    "ship",
    "standard",
    "take",
    "warrant",
    "cover",
    "defect",
    "manufactur",
    "year",
)


def keyword_vector(text: str) -> list[float]:
    """A bag-of-words embedding over VOCABULARY (how many words start with each prefix), for
    comparison by cosine similarity: no model, no network."""
    words = re.findall(r"[a-z]+", text.lower())
    # A constant component keeps every vector non-zero (cosine similarity needs a norm).
    return [*(float(sum(word.startswith(v) for word in words)) for v in VOCABULARY), 0.1]


# -- the scripted model -----------------------------------------------------------------------------------


def tool_call(arguments: dict[str, Any], call_id: str, name: str = TOOL_NAME) -> ChatReply:
    """A chat completion that asks for one tool call (OpenAI function calling)."""
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return ChatReply(content=None, tool_calls=[call], finish_reason="tool_calls")


def tool_results_in(messages: list[dict[str, Any]]) -> int:
    """How many tool results the model has been sent so far (OpenAI chat messages)."""
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool")


def agent_turn(messages: list[dict[str, Any]], answer: str) -> ChatReply:
    """The model's next turn in a chat-completions agent loop: search with FIRST_QUERY, then with
    SECOND_QUERY, then answer. Stateless (read from the messages), so a framework that retries or
    re-sends the history gets the same turn."""
    seen = tool_results_in(messages)
    if seen == 0:
        return tool_call({"query": FIRST_QUERY}, "call_first")
    if seen == 1:
        return tool_call({"query": SECOND_QUERY}, "call_second")
    return ChatReply(content=answer)


def async_client(stub: OpenAIStub) -> AsyncOpenAI:
    """An async OpenAI client on the stub. No retries: a failing stub must fail the test at once."""
    return AsyncOpenAI(base_url=stub.base_url, api_key="test", max_retries=0)


# -- the sandbox ------------------------------------------------------------------------------------------

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def assert_no_network(refused: list[Any], framework: str) -> None:
    """Nothing was refused by `loopback_only`: `framework` stayed off the network."""
    assert refused == [], f"{framework} tried the network: {refused}"


def assert_wrote_nothing(directory: Path, framework: str, where: str = "the working directory") -> None:
    """`directory`, empty at the start, is still empty: `framework` wrote nothing there."""
    assert list(directory.iterdir()) == [], f"{framework} wrote into {where}"


@dataclass
class Sandbox:
    """What a framework reached outside the test: the hosts `loopback_only` refused, and the working
    directory it ran in, empty at the start."""

    refused: list[Any]
    cwd: Path

    def check(self, framework: str) -> None:
        """`framework` stayed off the network and wrote nothing in the working directory."""
        assert_no_network(self.refused, framework)
        assert_wrote_nothing(self.cwd, framework)


# -- spans ------------------------------------------------------------------------------------------------


@contextmanager
def instrumenting(
    instrumentor: Any, capture: tuple[TracerProvider, InMemorySpanExporter]
) -> Iterator[InMemorySpanExporter]:
    """An (OpenInference) instrumentor on `capture`'s private provider for the block, never the global
    one; the exporter that receives its spans. Uninstrumented however the block ends."""
    provider, exporter = capture
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        instrumentor.uninstrument()


def received(exporter: InMemorySpanExporter) -> dict[str, list[SpanRecord]]:
    """The exported spans as the collector would store them, by trace id (OTLP protobuf round trip)."""
    batch = decode_request(encode_spans(exporter.get_finished_spans()))
    grouped: dict[str, list[SpanRecord]] = defaultdict(list)
    for record in span_records(batch.spans, batch.events):
        grouped[record.trace_id].append(record)
    return dict(grouped)


def only_trace(
    exporter: InMemorySpanExporter, options: MappingOptions | None = None
) -> tuple[RagTrace, list[SpanRecord]]:
    """The mapped trace when the test produced exactly one trace, with its span records."""
    traces = received(exporter)
    assert len(traces) == 1, f"expected one trace, got {len(traces)}: {[len(v) for v in traces.values()]}"
    records = next(iter(traces.values()))
    return map_trace(records, options), records


def dump(records: list[SpanRecord]) -> str:
    """The spans as readable JSON (name, kind, parent, attributes, events): for assertion messages."""
    rows = [
        {
            "name": r.name,
            "span_id": r.span_id,
            "parent": r.parent_span_id,
            "kind": r.kind,
            "status": r.status_code,
            "attributes": dict(r.attributes),
            "events": [{"name": e.name, "attributes": e.attributes} for e in r.events],
        }
        for r in sorted(records, key=lambda r: r.start_us or 0)
    ]
    return json.dumps(rows, indent=1, default=str)


# -- what every framework's trace must give -----------------------------------------------------------------


def faithfulness(trace: RagTrace) -> Score:
    """The deterministic faithfulness score of a mapped trace (the default evaluator)."""
    return build_evaluator({"name": "faithfulness"})(trace)


def steps_summary(trace: RagTrace) -> list[tuple[Any, ...]]:
    """The trace's steps in brief, for assertion messages."""
    return [(s.name, s.kind, s.tool_name, s.query, len(s.documents)) for s in trace.steps]


def ids_and_texts(query: str) -> list[tuple[str | None, str]]:
    """The documents `search_docs` returns for `query`, as (id, text)."""
    return [(doc["id"], doc["text"]) for doc in search_docs(query)]


def assert_agentic_rag(
    trace: RagTrace,
    answer: str,
    queries: tuple[str, ...] = QUERIES,
    *,
    documents: Callable[[str], list[tuple[str | None, str]]] = ids_and_texts,
    tool_name: str | None = None,
    tool_calls: int | None = None,
    llm_calls: int | None = None,
) -> None:
    """The question, the answer, and one retrieval step per search (in call order) holding the
    tool's documents (`documents(query)`: by default `search_docs`' ids and text) with their ranks;
    faithfulness passes on GROUNDED_ANSWER and fails on INVENTED_ANSWER.

    With `tool_name`, every retrieval step is a call of that tool; with `tool_calls` / `llm_calls`, the
    trace counts exactly that many (otherwise at least one tool call per search, and one more LLM call
    than searches)."""
    assert trace.mapping_error is None
    assert trace.question == QUESTION
    assert trace.answer == answer
    rounds = trace.steps_of("retrieval")
    assert len(rounds) == len(queries), steps_summary(trace)
    for step, query in zip(rounds, queries, strict=True):
        assert query in (step.query or ""), (step.name, step.query)
        if tool_name is not None:
            assert step.tool_name == tool_name, steps_summary(trace)
        assert [(d.rank, d.id, d.content) for d in step.documents] == [
            (rank, doc_id, text) for rank, (doc_id, text) in enumerate(documents(query), start=1)
        ]
    assert trace.retrieval_rounds == len(queries)
    if tool_calls is None:
        assert trace.tool_calls >= len(queries), steps_summary(trace)
    else:
        assert trace.tool_calls == tool_calls, steps_summary(trace)
    if llm_calls is None:
        assert trace.llm_calls >= len(queries) + 1, steps_summary(trace)
    else:
        assert trace.llm_calls == llm_calls, steps_summary(trace)
    score = faithfulness(trace)
    if answer == GROUNDED_ANSWER:
        assert score.status == "pass", score
    elif answer == INVENTED_ANSWER:
        assert score.status == "fail", score


def tool_spans(records: list[SpanRecord], name: str = TOOL_NAME) -> list[SpanRecord]:
    """The OpenInference TOOL spans of the tool `name` (their `tool.name`), in call order."""
    calls = [r for r in records if r.attributes.get("openinference.span.kind") == "TOOL"]
    return sorted((r for r in calls if r.attributes.get("tool.name") == name), key=lambda r: r.start_us or 0)


def tool_outputs(records: list[SpanRecord], name: str = TOOL_NAME) -> list[Any]:
    """The JSON `output.value` of each TOOL span of `name`, in call order."""
    return [json.loads(str(r.attributes["output.value"])) for r in tool_spans(records, name)]


# -- an agent's spans through the OTel SDK, for service and dashboard tests ------------------------------


def emit_genai_agent(tracer: Any, answer: str = GROUNDED_ANSWER, failed_tool: bool = False) -> str:
    """One agent request as OpenTelemetry GenAI spans through the real SDK (`invoke_agent`, `chat`,
    `execute_tool`): two searches, optionally an order-status tool call that fails, then the answer.
    Returns the trace id (hex)."""
    from opentelemetry.trace import Status, StatusCode

    def chat(output: list[dict[str, Any]]) -> None:
        with tracer.start_as_current_span(f"chat {MODEL}") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.request.model", MODEL)
            span.set_attribute("gen_ai.output.messages", json.dumps(output))
            span.set_attribute("gen_ai.usage.input_tokens", 120)
            span.set_attribute("gen_ai.usage.output_tokens", 20)

    def call(name: str, arguments: dict[str, Any], call_id: str) -> None:
        part = {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}
        chat([{"role": "assistant", "parts": [part], "finish_reason": "tool_call"}])
        with tracer.start_as_current_span(f"execute_tool {name}") as span:
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.name", name)
            span.set_attribute("gen_ai.tool.call.id", call_id)
            span.set_attribute("gen_ai.tool.call.arguments", json.dumps(arguments))
            if name == TOOL_NAME:
                span.set_attribute("gen_ai.tool.call.result", json.dumps(search_docs(arguments["query"])))
            else:
                span.set_status(Status(StatusCode.ERROR, "order service timed out"))
                span.set_attribute("error.type", "TimeoutError")

    with tracer.start_as_current_span("invoke_agent shop_assistant") as agent:
        agent.set_attribute("gen_ai.operation.name", "invoke_agent")
        agent.set_attribute("gen_ai.agent.name", "shop_assistant")
        user = [{"role": "user", "parts": [{"type": "text", "content": QUESTION}]}]
        agent.set_attribute("gen_ai.input.messages", json.dumps(user))
        call(TOOL_NAME, {"query": FIRST_QUERY}, "call_first")
        if failed_tool:
            call("get_order_status", {"order_id": "A-1001"}, "call_order")
        call(TOOL_NAME, {"query": SECOND_QUERY}, "call_second")
        text = {"type": "text", "content": answer}
        chat([{"role": "assistant", "parts": [text], "finish_reason": "stop"}])
        return format(agent.get_span_context().trace_id, "032x")
