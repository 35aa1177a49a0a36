"""LangChain / LangGraph ReAct agents, traced by OpenInference, read as agentic RAG
(tests/support/agentic.py).

Checked against langchain 1.5.2 (`langchain.agents.create_agent`, what the LangChain docs tell users to
write today), langgraph 1.2.24 with langgraph-prebuilt 1.1.3 (`langgraph.prebuilt.create_react_agent`,
deprecated since LangGraph 1.0 in favour of `create_agent`, still common in apps: one test), langchain-core
1.8.3, langchain-openai 1.8.1 and openinference-instrumentation-langchain 0.1.80. The model is `ChatOpenAI`
on the OpenAI-protocol stub; the agent is invoked with `{"messages": [("user", QUESTION)]}`.

What the instrumentation emits per run (one trace, every span INTERNAL, `openinference.span.kind` says
what it is): a CHAIN root `LangGraph` (`input.value` = `{"messages": [["user", QUESTION]]}`,
`llm.input_messages.0.message.content` = the question, `output.value` = the final state as JSON, its
last `messages` item the `ai` answer); per model turn a CHAIN `model` (with create_react_agent: an
AGENT-kind span `agent`, see test_legacy_create_react_agent) around an LLM `ChatOpenAI`
(`llm.output_messages.0.message.tool_calls.N.tool_call.function.name` / `.arguments`, or `.content` =
the answer); per tool round a CHAIN `tools` (`input.value` = the tool calls as JSON) around a TOOL span
named after the tool with `tool.name`, `tool.description`, `input.value` = the bare `query` string (a
single-argument tool's only argument, not JSON) and `output.value` = the `ToolMessage` as JSON:
`{"type": "tool", "data": {"content": ..., "artifact": ..., "tool_call_id": ..., "status": "success", ...}}`.
`content` is what the model is sent:

- `create_retriever_tool`: the documents' texts joined by a blank line (no ids), `artifact` null, or with
  `response_format="content_and_artifact"` the documents as `{"id", "metadata", "page_content",
  "type": "Document"}`; under the TOOL span, a RETRIEVER span `VectorStoreRetriever` (`input.value` = the
  query, `output.value` = `{"documents": [...]}` with ids, `retrieval.documents.N.document.content` and
  `.metadata`, but no `.document.id` attribute);
- `@tool def search_docs(query: str) -> list[dict]`: the list as JSON text;
- a `@tool` returning `list[Document]`: the list's Python repr, `[Document(id='refunds', metadata={'source':
  'refunds.md'}, page_content='...'), ...]`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, create_retriever_tool, tool
from langchain_core.vectorstores import InMemoryVectorStore, VectorStoreRetriever
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from langgraph.warnings import LangGraphDeprecatedSinceV10
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from semconv import SpanRecord
from semconv.options import MappingOptions
from tests.support import agentic
from tests.support.openai_stub import ChatReply, OpenAIStub, RecordedRequest

pytestmark = pytest.mark.usefixtures("no_leaked_context")

# LangSmith's own tracing would post runs to api.smith.langchain.com when one of these is set.
LANGSMITH_SWITCHES = (
    "LANGSMITH_TRACING",
    "LANGSMITH_TRACING_V2",
    "LANGCHAIN_TRACING_V2",
    "LANGCHAIN_TRACING",
)

Agent = Any  # a compiled LangGraph state graph
AgentBuilder = Callable[[ChatOpenAI, list[BaseTool]], Agent]


class KeywordEmbeddings(Embeddings):
    """tests.support.agentic.keyword_vector as LangChain embeddings (the `retriever` fixture checks that
    they rank as `search_docs` does)."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [agentic.keyword_vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return agentic.keyword_vector(text)


# -- the tools --------------------------------------------------------------------------------------------


def retriever_tool(retriever: VectorStoreRetriever, response_format: str = "content") -> BaseTool:
    """`search_docs` as LangChain's retriever tool over the vector store."""
    return create_retriever_tool(
        retriever,
        agentic.TOOL_NAME,
        agentic.TOOL_DESCRIPTION,
        response_format=response_format,  # type: ignore[arg-type]
    )


# The `@tool` functions below are the app's own: LangChain makes the tool's name, description and schema
# from the decorated function (tests.support.agentic.search_docs has another docstring and a `k` argument).


def function_tool() -> BaseTool:
    """`search_docs` as a plain `@tool` function returning `[{"id", "text"}]`."""

    @tool
    def search_docs(query: str) -> list[dict[str, str]]:
        """Search the shop's knowledge base and return the matching documents."""
        return agentic.search_docs(query)

    return search_docs


def documents_tool() -> BaseTool:
    """`search_docs` as a `@tool` function returning LangChain `Document`s."""

    @tool
    def search_docs(query: str) -> list[Document]:
        """Search the shop's knowledge base and return the matching documents."""
        return [
            Document(id=doc["id"], page_content=doc["text"], metadata={"source": f"{doc['id']}.md"})
            for doc in agentic.search_docs(query)
        ]

    return search_docs


def legacy_react_agent(model: ChatOpenAI, tools: list[BaseTool]) -> Agent:
    """`langgraph.prebuilt.create_react_agent`, checked to be deprecated (create_agent replaces it)."""
    with pytest.warns(LangGraphDeprecatedSinceV10):
        return create_react_agent(model, tools)


# -- the scripted model -----------------------------------------------------------------------------------


def model_turns(answer: str) -> Callable[[RecordedRequest], ChatReply]:
    """The responder: checks that the agent offers the model exactly `search_docs(query)`, then searches
    FIRST_QUERY, then SECOND_QUERY, then answers `answer` (tests.support.agentic.agent_turn). Stateless."""

    def respond(request: RecordedRequest) -> ChatReply:
        body = request.json
        (offered,) = body["tools"]
        assert offered["function"]["name"] == agentic.TOOL_NAME, offered
        assert offered["function"]["parameters"]["required"] == ["query"], offered
        return agentic.agent_turn(body["messages"], answer)

    return respond


# -- plumbing ---------------------------------------------------------------------------------------------


@pytest.fixture
def sandbox(loopback_only: list[Any], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """`loopback_only` (tests/frameworks/conftest.py), with LangSmith's tracing switched off; the refused
    addresses (the tests assert there are none)."""
    for name in LANGSMITH_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    return loopback_only


@pytest.fixture
def retriever() -> VectorStoreRetriever:
    """The knowledge base in an in-memory vector store (document id = knowledge-base id, `source`
    metadata), top 2. Built before the instrumentation (`instrumented` asks for it), as an app builds it
    at start-up; checked to rank each query's documents as `search_docs` does."""
    store = InMemoryVectorStore(KeywordEmbeddings())
    store.add_documents(
        [
            Document(id=doc_id, page_content=text, metadata={"source": f"{doc_id}.md"})
            for doc_id, text in agentic.KNOWLEDGE_BASE.items()
        ]
    )
    built = store.as_retriever(search_kwargs={"k": 2})
    for query in agentic.QUERIES:
        assert [doc.id for doc in built.invoke(query)] == agentic.expected_ids(query), query
    return built


@pytest.fixture
def instrumented(
    capture: tuple[TracerProvider, InMemorySpanExporter], retriever: VectorStoreRetriever, sandbox: list[Any]
) -> Iterator[InMemorySpanExporter]:
    """LangChain instrumented with OpenInference on the private provider, for this test only."""
    with agentic.instrumenting(LangChainInstrumentor(), capture) as exporter:
        yield exporter


def run_agent(
    agent_tool: BaseTool,
    stub: OpenAIStub,
    sandbox: list[Any],
    answer: str,
    build: AgentBuilder = create_agent,
) -> list[ToolMessage]:
    """Run a ReAct agent with `agent_tool` on QUESTION and check what the framework itself did: it
    returned `answer` after three model requests and two tool calls, and stayed off the network.
    Returns the tool messages (what the model was sent)."""
    assert agent_tool.name == agentic.TOOL_NAME
    assert agent_tool.description == agentic.TOOL_DESCRIPTION
    stub.responder = model_turns(answer)
    # No retries: a failing stub must fail the test at once.
    model = ChatOpenAI(base_url=stub.base_url, api_key="test", model=agentic.MODEL, max_retries=0)
    agent = build(model, [agent_tool])

    state = agent.invoke({"messages": [("user", agentic.QUESTION)]})

    messages: list[BaseMessage] = state["messages"]
    assert messages[-1].type == "ai" and messages[-1].content == answer
    assert len(stub.chat_requests) == 3
    agentic.assert_no_network(sandbox, "LangChain")
    tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in tool_messages] == ["call_first", "call_second"]
    return tool_messages


def tool_messages(records: list[SpanRecord]) -> list[dict[str, Any]]:
    """The TOOL spans' `output.value`s: the LangChain ToolMessages as JSON, their fields under `data`."""
    results: list[dict[str, Any]] = []
    for output in agentic.tool_outputs(records):
        assert output["type"] == "tool", output
        data = output["data"]
        assert data["name"] == agentic.TOOL_NAME and data["status"] == "success", data
        results.append(data)
    return results


def joined_texts(query: str) -> str:
    """What the retriever tool sends the model: the documents' texts joined by a blank line."""
    return "\n\n".join(doc["text"] for doc in agentic.search_docs(query))


# -- tests ------------------------------------------------------------------------------------------------


@agentic.OPTIONS
@pytest.mark.parametrize("response_format", ["content", "content_and_artifact"])
@agentic.ANSWERS
def test_retriever_tool(
    instrumented: InMemorySpanExporter,
    retriever: VectorStoreRetriever,
    stub: OpenAIStub,
    sandbox: list[Any],
    answer: str,
    response_format: str,
    options: MappingOptions,
) -> None:
    """A `create_agent` agent whose `search_docs` is `create_retriever_tool` over an in-memory vector
    store maps to the user's question, the agent's final text, and exactly one retrieval step per search
    holding the retrieved documents (ids, text, rank in retrieval order), whether the tool is detected or
    named in the options, and whatever the tool's `response_format`.

    The tool's result is the documents' texts without ids (with `content_and_artifact`, the documents as
    well, in the ToolMessage's `artifact`); the ids are in the RETRIEVER span under the tool call. Each
    search must be one retrieval round, not one for the retriever and one more for the tool's text or
    artifact; faithfulness passes on the grounded answer and fails on the invented one."""
    agent_tool = retriever_tool(retriever, response_format)

    sent = run_agent(agent_tool, stub, sandbox, answer)
    assert [m.content for m in sent] == [joined_texts(q) for q in agentic.QUERIES]
    trace, records = agentic.only_trace(instrumented, options)

    calls = agentic.tool_spans(records)
    assert [c.attributes["input.value"] for c in calls] == list(agentic.QUERIES)
    results = tool_messages(records)
    assert [r["content"] for r in results] == [joined_texts(q) for q in agentic.QUERIES]
    if response_format == "content":
        assert [r["artifact"] for r in results] == [None, None]
    else:
        assert [[d["id"] for d in r["artifact"]] for r in results] == [
            agentic.expected_ids(q) for q in agentic.QUERIES
        ]
    for call, query in zip(calls, agentic.QUERIES, strict=True):
        (found,) = [
            r
            for r in records
            if r.parent_span_id == call.span_id and r.attributes.get("openinference.span.kind") == "RETRIEVER"
        ]
        assert found.attributes["input.value"] == query
        listed = json.loads(str(found.attributes["output.value"]))["documents"]
        assert [d["id"] for d in listed] == agentic.expected_ids(query)

    agentic.assert_agentic_rag(trace, answer, tool_calls=2, llm_calls=3)


@agentic.OPTIONS
@pytest.mark.parametrize("returns", ["dicts", "documents"])
@agentic.ANSWERS
def test_function_tool(
    instrumented: InMemorySpanExporter,
    stub: OpenAIStub,
    sandbox: list[Any],
    answer: str,
    returns: str,
    options: MappingOptions,
) -> None:
    """A `create_agent` agent whose tool is a `@tool def search_docs(query: str)` returning `[{"id",
    "text"}]` (`dicts`) or a list of LangChain `Document`s (`documents`) maps to the question, the final
    answer, and one retrieval step per call with the returned documents' ids and text in order, read
    from the TOOL span's `output.value`: a ToolMessage JSON whose `data.content` is what LangChain sends
    the model, the list as JSON text, or the `Document` list's Python repr. Whether the tool is detected
    or named in the options; faithfulness passes on the grounded answer and fails on the invented one."""
    sent = run_agent(function_tool() if returns == "dicts" else documents_tool(), stub, sandbox, answer)
    if returns == "dicts":
        assert [json.loads(str(m.content)) for m in sent] == agentic.search_results()
    else:
        assert all(str(m.content).startswith("[Document(id=") for m in sent), [m.content for m in sent]
    trace, records = agentic.only_trace(instrumented, options)

    assert [c.attributes["input.value"] for c in agentic.tool_spans(records)] == list(agentic.QUERIES)
    results = tool_messages(records)
    assert [r["content"] for r in results] == [m.content for m in sent]
    assert [r["artifact"] for r in results] == [None, None]
    agentic.assert_agentic_rag(trace, answer, tool_name=agentic.TOOL_NAME, tool_calls=2, llm_calls=3)


@pytest.mark.parametrize("kind", ["retriever", "function"])
def test_legacy_create_react_agent(
    instrumented: InMemorySpanExporter,
    retriever: VectorStoreRetriever,
    stub: OpenAIStub,
    sandbox: list[Any],
    kind: str,
) -> None:
    """The same agent built with LangGraph's deprecated `create_react_agent` maps the same: the question,
    the final answer, one retrieval step per search with the documents in order, two tool calls and
    three LLM calls (grounded answer only: the invented one adds nothing the tests above do not check).
    Its spans differ: each model turn is an AGENT-kind span `agent` (under the CHAIN
    root `LangGraph`) whose input is the conversation so far and whose output is that turn's message
    (a tool call, or the answer), with CHAIN spans `call_model`, `RunnableSequence`, `Prompt` and
    `should_continue` under it; none of these `agent` spans is the agent run, nor its question or
    answer."""
    agent_tool = retriever_tool(retriever) if kind == "retriever" else function_tool()

    run_agent(agent_tool, stub, sandbox, agentic.GROUNDED_ANSWER, build=legacy_react_agent)
    trace, records = agentic.only_trace(instrumented)

    turns = [r for r in records if r.attributes.get("openinference.span.kind") == "AGENT"]
    assert [r.name for r in turns] == ["agent"] * 3
    assert {r.parent_span_id for r in turns} == {trace.root_span_id}
    agentic.assert_agentic_rag(trace, agentic.GROUNDED_ANSWER, tool_calls=2, llm_calls=3)
