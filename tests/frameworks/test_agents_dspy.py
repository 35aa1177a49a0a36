"""DSPy ReAct agents, traced by OpenInference, read as agentic RAG (tests/support/agentic.py).

Checked against dspy 3.4.1 (with litellm 1.110.2) and openinference-instrumentation-dspy 0.1.48. The
model is `dspy.LM("openai/gpt-4o-mini", api_base=<the OpenAI-protocol stub>, cache=False)`, run on
both of DSPy's engines: `engine="auto"` (DSPy's native OpenAI client, lm15; litellm is not even
imported) and `engine="litellm"`.

`dspy.ReAct("question -> answer", tools=[search_docs])` asks the model for one turn per step (a
`Predict` whose outputs are `next_thought`, `next_tool_name`, `next_tool_args`), calls the tool the
model named, and after the built-in `finish` tool asks a `ChainOfThought` "extract" step for
`reasoning` and `answer`. The model speaks text, not function calling: ChatAdapter's
`[[ ## field ## ]]` sections (or a JSON object with JSONAdapter).

The instrumentation emits, per run: a CHAIN span `ReAct.forward` (`ReAct.aforward` when awaited) whose
`input.value` is `{"input_args": {"question": ...}}` and `output.value` the Prediction as JSON
(`{"trajectory": {...}, "reasoning": ..., "answer": ...}`); per model turn the CHAIN spans
`Predict.forward` (`ChainOfThought.forward` for the extract step) > `Predict(StringSignature).forward` >
`ChatAdapter.__call__` > the LLM span `LM.__call__` (`llm.input_messages.*`, `llm.output_messages.0`
= the `[[ ## ... ## ]]` text, no token counts); and per tool call a TOOL span named
`<tool>.__call__`, a child of `ReAct.forward`, with NO `tool.name` attribute,
`input.value` = `{"kwargs": {"query": ...}}` and `output.value` the tool's result as JSON (the
`finish` tool: `"Completed."`). Awaited, the names are `ReAct.aforward`, `Predict.aforward`,
`ChatAdapter.acall`, `LM.acall` and `<tool>.acall`; with JSONAdapter, `JSONAdapter.__call__` and the
model's replies are JSON objects (the requests ask for `response_format: json_object`).

Each test also proves that DSPy stayed off the network (only the loopback stub: no model-cost-map
download, see `offline`) and wrote nothing in the working directory, $HOME or DSPy's cache directory.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy
import pytest
from openinference.instrumentation.dspy import DSPyInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from semconv.options import MappingOptions
from tests.support import agentic
from tests.support.openai_stub import ChatReply, OpenAIStub, RecordedRequest

pytestmark = pytest.mark.usefixtures("no_leaked_context")


# DSPy makes the tool from the function's own name, signature and docstring (tests.support.agentic.search_docs
# would offer the model its `k` argument and its longer docstring).
def search_docs(query: str) -> list[dict]:
    """Search the shop's knowledge base and return the matching documents."""
    return agentic.search_docs(query)


# -- the scripted model -----------------------------------------------------------------------------------


def react_turn(observations: int) -> dict[str, Any]:
    """The ReAct step's outputs after `observations` tool results: search FIRST_QUERY, then
    SECOND_QUERY, then call DSPy's built-in `finish` tool."""
    if observations == 0:
        return {
            "next_thought": "Look up refunds.",
            "next_tool_name": agentic.TOOL_NAME,
            "next_tool_args": {"query": agentic.FIRST_QUERY},
        }
    if observations == 1:
        return {
            "next_thought": "Look up the return window.",
            "next_tool_name": agentic.TOOL_NAME,
            "next_tool_args": {"query": agentic.SECOND_QUERY},
        }
    return {"next_thought": "I have both facts.", "next_tool_name": "finish", "next_tool_args": {}}


def formatted(fields: dict[str, Any], as_json: bool) -> str:
    """The outputs as the adapter expects them: ChatAdapter's `[[ ## name ## ]]` sections ending with
    `[[ ## completed ## ]]`, or one JSON object (JSONAdapter)."""
    if as_json:
        return json.dumps(fields)
    sections = [
        f"[[ ## {name} ## ]]\n{value if isinstance(value, str) else json.dumps(value)}"
        for name, value in fields.items()
    ]
    return "\n\n".join([*sections, "[[ ## completed ## ]]"])


def react_turns(answer: str) -> Any:
    """The responder of the ReAct program's model. Stateless: the system prompt says which step asks
    (its output fields: `next_thought`... for a ReAct turn, `reasoning` and `answer` for the extract
    step), the trajectory in the last user message how many tool results came back, and the request
    which format is expected (a `response_format`, or no `[[ ## completed ## ]]` marker: JSON)."""

    def respond(request: RecordedRequest) -> ChatReply:
        body = request.json
        messages = body["messages"]
        system = str(messages[0]["content"])
        user = str(messages[-1]["content"])
        as_json = "response_format" in body or "[[ ## completed ## ]]" not in system
        if "`next_thought`" in system:
            observations = len(set(re.findall(r"observation_(\d+)", user)))
            return ChatReply(content=formatted(react_turn(observations), as_json))
        if "`answer`" not in system:
            return ChatReply(status=500, error_message=f"unexpected request: {system[:200]}")
        return ChatReply(
            content=formatted({"reasoning": "Both documents say so.", "answer": answer}, as_json)
        )

    return respond


# -- plumbing ---------------------------------------------------------------------------------------------


@pytest.fixture
def instrumented(capture: tuple[TracerProvider, InMemorySpanExporter]) -> Iterator[InMemorySpanExporter]:
    """DSPy instrumented with OpenInference on the private provider, for this test only."""
    with agentic.instrumenting(DSPyInstrumentor(), capture) as exporter:
        yield exporter


@dataclass
class DSPySandbox(agentic.Sandbox):
    """The sandbox (tests/frameworks/conftest.py: refused non-loopback hosts, the working directory), and
    the other directories DSPy must leave untouched."""

    home: Path
    cache_dir: Path

    def check(self, framework: str = "DSPy") -> None:
        super().check(framework)
        agentic.assert_wrote_nothing(self.home, framework, "$HOME")
        assert not self.cache_dir.exists(), f"{framework} created its disk cache"


@pytest.fixture
def offline(sandbox: agentic.Sandbox, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> DSPySandbox:
    """The sandbox (every non-loopback name lookup and connection refused, an empty working directory),
    with $HOME and DSPY_CACHEDIR in tmp_path. `LITELLM_LOCAL_MODEL_COST_MAP=True` keeps both DSPy's
    model metadata (dspy.clients.model_metadata) and litellm (on import) from downloading the model
    cost map from raw.githubusercontent.com: both read it lazily, at the first model call or the
    first import of litellm, i.e. inside this fixture."""
    dspy_sandbox = DSPySandbox(sandbox.refused, sandbox.cwd, tmp_path / "home", tmp_path / "dspy_cache")
    dspy_sandbox.home.mkdir()
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("DSPY_CACHEDIR", str(dspy_sandbox.cache_dir))
    monkeypatch.setenv("HOME", str(dspy_sandbox.home))
    return dspy_sandbox


def model_on(stub: OpenAIStub, engine: str) -> dspy.LM:
    # cache=False: no lookup in, nor write to, DSPy's response cache (memory or disk); no retries, so
    # that a failing stub fails the test at once.
    return dspy.LM(
        "openai/" + agentic.MODEL,
        api_base=stub.base_url,
        api_key="test",
        cache=False,
        num_retries=0,
        engine=engine,
    )


def run_react(
    stub: OpenAIStub,
    sandbox: DSPySandbox,
    answer: str,
    engine: str = "auto",
    adapter: dspy.Adapter | None = None,
    asynchronous: bool = False,
) -> None:
    """Run a ReAct program on QUESTION (settings through `dspy.context`, never the global
    `dspy.configure`) and check what the framework itself did: it asked the model four times (three
    ReAct turns and the extract step), called search_docs with FIRST_QUERY then SECOND_QUERY and then
    `finish`, returned `answer`, and stayed in the sandbox."""
    stub.responder = react_turns(answer)
    agent = dspy.ReAct("question -> answer", tools=[search_docs], max_iters=5)
    with dspy.context(lm=model_on(stub, engine), adapter=adapter or dspy.ChatAdapter()):
        prediction = (
            asyncio.run(agent.acall(question=agentic.QUESTION))
            if asynchronous
            else agent(question=agentic.QUESTION)
        )

    assert len(stub.chat_requests) == 4, [r.json for r in stub.chat_requests]
    trajectory = prediction.trajectory
    called = [trajectory[f"tool_name_{i}"] for i in range(3)]
    assert called == [agentic.TOOL_NAME, agentic.TOOL_NAME, "finish"], trajectory
    assert trajectory["observation_1"] == agentic.search_docs(agentic.SECOND_QUERY)
    assert prediction.answer == answer
    sandbox.check()


def tool_spans(records: list[Any], suffix: str = ".__call__") -> list[Any]:
    """DSPy's TOOL spans of search_docs, found by span name (they have no `tool.name`)."""
    return [r for r in records if r.name == agentic.TOOL_NAME + suffix]


def assert_react_trace(exporter: InMemorySpanExporter, answer: str) -> None:
    """The raw tool spans (JSON arguments and result) and the mapped trace
    (tests.support.agentic.assert_agentic_rag, one LLM call per model request)."""
    trace, records = agentic.only_trace(exporter, MappingOptions())

    searches = tool_spans(records)
    assert [json.loads(str(r.attributes["input.value"])) for r in searches] == [
        {"kwargs": {"query": agentic.FIRST_QUERY}},
        {"kwargs": {"query": agentic.SECOND_QUERY}},
    ]
    assert [json.loads(str(r.attributes["output.value"])) for r in searches] == agentic.search_results()
    agentic.assert_agentic_rag(trace, answer, llm_calls=4)


# -- tests ------------------------------------------------------------------------------------------------


@agentic.ANSWERS
def test_react_agent(
    instrumented: InMemorySpanExporter, stub: OpenAIStub, offline: DSPySandbox, answer: str
) -> None:
    """A ReAct program that searches twice, calls `finish` and extracts the answer maps to the user's
    question (the program's input, not a tool argument), the answer text (the extract step's `answer`,
    not the Prediction's JSON nor the model's `[[ ## ... ## ]]` text), and one retrieval step per
    `search_docs` call with the tool's JSON documents in order (the `finish` call is no retrieval);
    faithfulness passes on the grounded answer and fails on the invented one."""
    run_react(stub, offline, answer)

    # DSPy's default engine ("auto") sent the requests with its own client, not litellm's.
    assert all(r.headers.get("user-agent", "").startswith("lm15") for r in stub.chat_requests)
    assert_react_trace(instrumented, answer)


def test_react_agent_litellm(
    instrumented: InMemorySpanExporter, stub: OpenAIStub, offline: DSPySandbox
) -> None:
    """On the litellm engine (litellm calls the OpenAI SDK) the spans and the mapped trace are the same,
    and litellm stays off the network and the disk too. (One case only: importing litellm takes
    seconds.)"""
    run_react(stub, offline, agentic.GROUNDED_ANSWER, engine="litellm")

    assert all("x-stainless-lang" in r.headers for r in stub.chat_requests), stub.chat_requests[0].headers
    assert_react_trace(instrumented, agentic.GROUNDED_ANSWER)


@agentic.ANSWERS
def test_react_agent_configured_tool(
    instrumented: InMemorySpanExporter, stub: OpenAIStub, offline: DSPySandbox, answer: str
) -> None:
    """With detection off and `search_docs` named in the options, the two calls are still retrieval
    rounds: the tool's name is read from the span name `search_docs.__call__` (DSPy's TOOL spans
    have no `tool.name`), and the steps carry it as `tool_name`."""
    run_react(stub, offline, answer)
    trace, _ = agentic.only_trace(instrumented, agentic.CONFIGURED)

    agentic.assert_agentic_rag(trace, answer, tool_name=agentic.TOOL_NAME)


def test_react_agent_json_adapter(
    instrumented: InMemorySpanExporter, stub: OpenAIStub, offline: DSPySandbox
) -> None:
    """With JSONAdapter the model answers JSON objects (the request asks for `response_format`); the
    trace's answer is still the `answer` text, not the extract step's JSON reply."""
    run_react(stub, offline, agentic.GROUNDED_ANSWER, adapter=dspy.JSONAdapter())
    trace, records = agentic.only_trace(instrumented)

    assert all("response_format" in r.json for r in stub.chat_requests), [r.json for r in stub.chat_requests]
    assert any(r.name == "JSONAdapter.__call__" for r in records), sorted({r.name for r in records})
    agentic.assert_agentic_rag(trace, agentic.GROUNDED_ANSWER)


def test_react_agent_async(
    instrumented: InMemorySpanExporter, stub: OpenAIStub, offline: DSPySandbox
) -> None:
    """Awaited (`ReAct.acall`), the spans are named `ReAct.aforward`, `LM.acall`, `search_docs.acall`;
    the trace maps the same: question, answer, the two retrieval rounds, and the tool's name without
    the `.acall` suffix."""
    run_react(stub, offline, agentic.GROUNDED_ANSWER, asynchronous=True)
    trace, records = agentic.only_trace(instrumented)

    assert len(tool_spans(records, ".acall")) == 2, sorted({r.name for r in records})
    agentic.assert_agentic_rag(trace, agentic.GROUNDED_ANSWER, tool_name=agentic.TOOL_NAME)
