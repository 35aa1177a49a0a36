"""smolagents agents, traced by OpenInference, read as agentic RAG (tests/support/agentic.py).

Checked against smolagents 1.26.0 and openinference-instrumentation-smolagents 0.1.43 (the model is
`OpenAIServerModel` on the OpenAI-protocol stub; no torch, no transformers, no hub).

The instrumentation emits, per run: an AGENT span `<Agent>.run` (`input.value` is a JSON object whose
`task` is the user's question, `output.value` the final answer as plain text), one CHAIN span `Step N`
per step (`output.value` a Python repr or the code's execution logs), under it an LLM span
`OpenAIModel.generate` and one TOOL span per tool call, named after the tool's class (`SimpleTool` for
an `@tool` function, `FinalAnswerTool`), with `tool.name`, `input.value` =
`{"args": [...], "sanitize_inputs_outputs": ..., "kwargs": {"query": ...}}` and `output.value` the
tool's result as JSON (`output.mime_type` application/json). The agent ends by calling the
`final_answer` tool: a TOOL span too, whose argument is the answer.

`ToolCallingAgent` (OpenAI function calling): the model calls `search_docs` with FIRST_QUERY, then with
SECOND_QUERY, then `final_answer` with {"answer": ...}. `CodeAgent`: the model writes one code block per
step (`search_docs(query=...)` then print, twice; then `final_answer(...)`), run by smolagents' local
Python executor in-process. Each test also proves that smolagents stayed off the network (only the
loopback stub) and wrote no file in the working directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from smolagents import CodeAgent, MultiStepAgent, OpenAIServerModel, ToolCallingAgent, tool
from smolagents.monitoring import LogLevel

from semconv.options import MappingOptions
from tests.support import agentic
from tests.support.openai_stub import ChatReply, OpenAIStub, RecordedRequest

pytestmark = pytest.mark.usefixtures("no_leaked_context")


# smolagents makes the tool from the function's own name, type hints and docstring (`Args:` required).
@tool
def search_docs(query: str) -> list[dict]:
    """Search the shop's knowledge base and return the matching documents.

    Args:
        query: The words to search the knowledge base for.
    """
    return agentic.search_docs(query)


# -- the scripted model -----------------------------------------------------------------------------------


def message_text(content: Any) -> str:
    """The text of an OpenAI chat message's content (smolagents sends a list of text parts)."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def observations_in(request: RecordedRequest) -> int:
    """How many tool observations smolagents has sent the model so far: it sends each step's result
    as a user message starting with "Observation:" (its `tool-response` role), not as a `tool` message."""
    messages = request.json["messages"]
    return sum(
        1
        for m in messages
        if m.get("role") == "user" and message_text(m.get("content")).startswith("Observation:")
    )


def tool_calling_turns(answer: str) -> Any:
    """The responder of a ToolCallingAgent's model: search FIRST_QUERY, search SECOND_QUERY, then call
    `final_answer` (the only way a ToolCallingAgent ends). Stateless: read from the messages."""

    def respond(request: RecordedRequest) -> ChatReply:
        seen = observations_in(request)
        if seen == 0:
            return agentic.tool_call({"query": agentic.FIRST_QUERY}, "call_first")
        if seen == 1:
            return agentic.tool_call({"query": agentic.SECOND_QUERY}, "call_second")
        return agentic.tool_call({"answer": answer}, "call_final", name="final_answer")

    return respond


def code_turns(answer: str) -> Any:
    """The responder of a CodeAgent's model: one code block per step, searching FIRST_QUERY, then
    SECOND_QUERY (printing the documents, so that they reach the next step's observation), then
    calling `final_answer`."""

    def respond(request: RecordedRequest) -> ChatReply:
        seen = observations_in(request)
        if seen == 0:
            code = f"docs = {agentic.TOOL_NAME}(query={agentic.FIRST_QUERY!r})\nprint(docs)"
        elif seen == 1:
            code = f"docs = {agentic.TOOL_NAME}(query={agentic.SECOND_QUERY!r})\nprint(docs)"
        else:
            code = f"final_answer({answer!r})"
        return ChatReply(content=f"Thought: the next step.\n<code>\n{code}\n</code>")

    return respond


# -- plumbing ---------------------------------------------------------------------------------------------


@pytest.fixture
def instrumented(capture: tuple[TracerProvider, InMemorySpanExporter]) -> Iterator[InMemorySpanExporter]:
    """smolagents instrumented with OpenInference on the private provider, for this test only."""
    with agentic.instrumenting(SmolagentsInstrumentor(), capture) as exporter:
        yield exporter


def model_on(stub: OpenAIStub) -> OpenAIServerModel:
    # No retries (smolagents waits 60 s between them; openai retries on its own): a failing stub must
    # fail the test at once.
    return OpenAIServerModel(
        model_id=agentic.MODEL,
        api_base=stub.base_url,
        api_key="test",
        client_kwargs={"max_retries": 0},
        retry=False,
    )


def run_agent(agent: MultiStepAgent, stub: OpenAIStub, sandbox: agentic.Sandbox, answer: str) -> None:
    """Run the agent on QUESTION and check what the framework itself did: it returned `answer`, asked the
    model three times, stayed off the network and wrote nothing in the working directory."""
    result = agent.run(agentic.QUESTION)
    assert len(stub.chat_requests) == 3, [r.json for r in stub.chat_requests]
    sandbox.check("smolagents")
    assert result == answer


# -- tests ------------------------------------------------------------------------------------------------


@agentic.OPTIONS
@agentic.ANSWERS
def test_tool_calling_agent(
    instrumented: InMemorySpanExporter,
    stub: OpenAIStub,
    sandbox: agentic.Sandbox,
    answer: str,
    options: MappingOptions,
) -> None:
    """A ToolCallingAgent that searches twice and answers through `final_answer` maps to the user's
    question (the run's `task`, not a tool argument), the answer text (not the `final_answer` call's
    JSON), and one retrieval step per `search_docs` call with the JSON result's documents in order,
    whether the tool is detected from its name and documents or named in the options; faithfulness
    passes on the grounded answer and fails on the invented one."""
    stub.responder = tool_calling_turns(answer)
    agent = ToolCallingAgent(
        tools=[search_docs], model=model_on(stub), verbosity_level=LogLevel.OFF, max_steps=5
    )

    run_agent(agent, stub, sandbox, answer)
    trace, _ = agentic.only_trace(instrumented, options)

    agentic.assert_agentic_rag(trace, answer, tool_name=agentic.TOOL_NAME)


@agentic.ANSWERS
def test_code_agent(
    instrumented: InMemorySpanExporter, stub: OpenAIStub, sandbox: agentic.Sandbox, answer: str
) -> None:
    """A CodeAgent whose code calls `search_docs` in two steps and then `final_answer(...)` maps the
    same way: the tool calls made from inside the executed code are retrieval rounds with their
    documents, and the answer is the `final_answer` argument's text (not the step's execution logs
    nor the model's code block)."""
    stub.responder = code_turns(answer)
    agent = CodeAgent(tools=[search_docs], model=model_on(stub), verbosity_level=LogLevel.OFF, max_steps=5)

    run_agent(agent, stub, sandbox, answer)
    trace, records = agentic.only_trace(instrumented)

    # The search results are the tool spans' JSON (the model only saw their printed repr).
    assert agentic.tool_outputs(records) == agentic.search_results()
    agentic.assert_agentic_rag(trace, answer)
