"""OpenAI Agents SDK agents, traced by OpenInference, read as agentic RAG (tests/support/agentic.py).

Checked against openai-agents 0.24.0 and openinference-instrumentation-openai-agents 2.6.0 (openai
3.63.0). The model is the OpenAI-protocol stub: `OpenAIChatCompletionsModel` for the function-tool
agent, `OpenAIResponsesModel` (the Responses API, the SDK's default) for the hosted file search.

The instrumentation is a processor of the SDK's own tracing (it replaces the SDK's processors by
default). Per run it emits: a root AGENT span `Agent workflow` (the SDK trace; no input or output), a
CHAIN span `Agent workflow` under it, an AGENT span named after the agent (`agent.name`), one CHAIN
span `turn` per model turn, and in each turn an LLM span (`generation` for chat completions,
`response` for the Responses API) and one TOOL span per function tool call, named after the tool. No
span carries the run's input or output: the question is the user message in the LLM spans'
`llm.input_messages.*` / `input.value`, the answer the last LLM span's `llm.output_messages.*`.

- Function tool: the TOOL span has `tool.name`, `input.value` = the arguments' JSON
  (`{"query": "..."}`) and `output.value` = the tool's return value as JSON (a list of dicts becomes
  `[{"id": ..., "text": ...}, ...]`, `output.mime_type` application/json), while the model is sent
  its Python repr (`str(list)`: the `tool` messages in the next LLM span's input are
  `[{'id': 'refunds', 'text': ...}]`).
- Hosted file search (Responses API): there is no TOOL span. The `response` LLM span's output holds
  the `file_search_call` item: `llm.output_messages.0.message.tool_calls.0.tool_call.function.name`
  = `file_search_call`, its `...function.arguments` = `{"queries": [...]}`, then a message of role
  `tool` whose `content` is the results' JSON (`[{"attributes", "file_id", "filename", "score",
  "text"}]`), then the assistant's message; `output.value` is the whole Response object's JSON.

Each test also proves that the SDK stayed off the network (only the loopback stub): its default
processor, which exports traces to OpenAI's servers, is never registered.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from typing import Any

import pytest
from agents import (
    Agent,
    FileSearchTool,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
    set_trace_processors,
    set_tracing_disabled,
)
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from semconv.options import MappingOptions
from tests.support import agentic
from tests.support.openai_stub import ChatReply, OpenAIStub, RecordedRequest

pytestmark = pytest.mark.usefixtures("no_leaked_context")

INSTRUCTIONS = "Answer the customer's question from the shop's knowledge base."
VECTOR_STORE = "vs_shop_kb"
FILE_QUERY = "refund time and return window"
FILE_SCORES = (0.92, 0.87)


# The SDK makes the function tool's schema from the function's own signature and docstring (`Args:`).
@function_tool
def search_docs(query: str) -> list[dict[str, str]]:
    """Search the shop's knowledge base and return the matching documents.

    Args:
        query: The words to search the knowledge base for.
    """
    return agentic.search_docs(query)


# -- the scripted model -----------------------------------------------------------------------------------


def file_search_results() -> list[dict[str, Any]]:
    """The hosted file search's results for FILE_QUERY, in the Responses API's shape
    (openai.types.responses.ResponseFileSearchToolCall.Result): the knowledge base's documents as
    chunks of one file each, best first."""
    return [
        {
            "file_id": f"file-{doc['id']}",
            "filename": f"{doc['id']}.md",
            "score": score,
            "text": doc["text"],
            "attributes": {"kb_id": doc["id"]},
        }
        for doc, score in zip(agentic.search_docs(FILE_QUERY), FILE_SCORES, strict=True)
    ]


def file_search_turn(answer: str) -> Any:
    """The responder of a Responses API model with the hosted file search: one response holding the
    `file_search_call` (with its results only when the request `include`s them, as the real API
    does) and then the answer."""

    def respond(request: RecordedRequest) -> ChatReply:
        body = request.json
        call: dict[str, Any] = {
            "type": "file_search_call",
            "id": "fs_stub1",
            "status": "completed",
            "queries": [FILE_QUERY],
            "results": None,
        }
        if "file_search_call.results" in (body.get("include") or []):
            call["results"] = file_search_results()
        return ChatReply(content=answer, output_items=[call])

    return respond


# -- plumbing ---------------------------------------------------------------------------------------------


@pytest.fixture
def instrumented(capture: tuple[TracerProvider, InMemorySpanExporter]) -> Iterator[InMemorySpanExporter]:
    """The SDK's tracing on, with OpenInference's processor on the private provider as its only
    processor, for this test only.

    `set_tracing_disabled(True)` would not do to keep traces from OpenAI's servers: it turns the
    SDK's tracing off, and the instrumentor, being one of its processors, would see nothing. The
    instrumentor's default (exclusive) mode replaces the registered processors, but puts them back
    when uninstrumented, so the SDK's default processor (created on the first use of its tracing,
    batching to OpenAI's exporter) is dropped first: nothing is registered before or after."""
    set_tracing_disabled(False)
    set_trace_processors([])
    with agentic.instrumenting(OpenAIAgentsInstrumentor(), capture) as exporter:
        yield exporter


def run(agent: Agent[Any], refused: list[Any]) -> Any:
    """The agent run on QUESTION, its data in the spans whatever the environment says; checked to have
    stayed off the network."""
    config = RunConfig(tracing_disabled=False, trace_include_sensitive_data=True)
    result = Runner.run_sync(agent, agentic.QUESTION, run_config=config)
    agentic.assert_no_network(refused, "the Agents SDK")
    return result


# -- tests ------------------------------------------------------------------------------------------------


@agentic.OPTIONS
@agentic.ANSWERS
def test_function_tool_agent(
    instrumented: InMemorySpanExporter,
    stub: OpenAIStub,
    loopback_only: list[Any],
    answer: str,
    options: MappingOptions,
) -> None:
    """An agent on chat completions that calls its `search_docs` function tool twice and then answers
    maps to the user's question, the answer text, and one retrieval step per call with the tool's
    documents in order (read from the TOOL span's JSON, though the model was sent the result's Python
    repr), whether the tool is detected or named in the options; faithfulness passes on the grounded
    answer and fails on the invented one."""
    stub.responder = lambda request: agentic.agent_turn(request.json["messages"], answer)
    model = OpenAIChatCompletionsModel(model=agentic.MODEL, openai_client=agentic.async_client(stub))
    agent = Agent(name="shop_assistant", instructions=INSTRUCTIONS, tools=[search_docs], model=model)

    result = run(agent, loopback_only)

    assert result.final_output == answer
    assert len(stub.chat_requests) == 3, [r.json for r in stub.chat_requests]
    sent = [m["content"] for m in stub.chat_requests[-1].json["messages"] if m["role"] == "tool"]
    assert [ast.literal_eval(content) for content in sent] == agentic.search_results()
    trace, records = agentic.only_trace(instrumented, options)
    assert agentic.tool_outputs(records) == agentic.search_results()

    agentic.assert_agentic_rag(trace, answer, tool_name=agentic.TOOL_NAME)


@agentic.ANSWERS
def test_hosted_file_search_agent(
    instrumented: InMemorySpanExporter, stub: OpenAIStub, loopback_only: list[Any], answer: str
) -> None:
    """An agent on the Responses API with the hosted `FileSearchTool` (its results included), whose one
    response holds the `file_search_call` and the answer, maps to the user's question, the answer
    text, and one retrieval step for the search: its query, and its results as documents (id = the
    file id, content = the chunk's text, the score, in the results' order). The search has no TOOL
    span: it is read from the LLM span's output. Faithfulness passes on the grounded answer and fails
    on the invented one."""
    stub.responder = file_search_turn(answer)
    model = OpenAIResponsesModel(model=agentic.MODEL, openai_client=agentic.async_client(stub))
    file_search = FileSearchTool(
        vector_store_ids=[VECTOR_STORE], max_num_results=2, include_search_results=True
    )
    agent = Agent(name="shop_assistant", instructions=INSTRUCTIONS, tools=[file_search], model=model)

    result = run(agent, loopback_only)

    assert result.final_output == answer
    assert [type(item).__name__ for item in result.new_items] == ["ToolCallItem", "MessageOutputItem"]
    assert len(stub.responses_requests) == 1 and stub.chat_requests == []
    request = stub.responses_requests[0].json
    assert request["include"] == ["file_search_call.results"]
    assert request["tools"] == [
        {"type": "file_search", "vector_store_ids": [VECTOR_STORE], "max_num_results": 2}
    ]
    trace, records = agentic.only_trace(instrumented)
    # The search is recorded in the `response` LLM span's output only (the Response object's JSON).
    (llm,) = [r for r in records if r.attributes.get("openinference.span.kind") == "LLM"]
    output = json.loads(llm.attributes["output.value"])["output"]
    assert [item["type"] for item in output] == ["file_search_call", "message"]
    assert output[0]["queries"] == [FILE_QUERY] and output[0]["results"] == file_search_results()

    # One retrieval round: the file search's chunks (id = the file id), scored, in the results' order.
    agentic.assert_agentic_rag(
        trace,
        answer,
        (FILE_QUERY,),
        documents=lambda _: [(found["file_id"], found["text"]) for found in file_search_results()],
        llm_calls=1,
    )
    (step,) = trace.steps_of("retrieval")
    assert [d.score for d in step.documents] == [found["score"] for found in file_search_results()]
