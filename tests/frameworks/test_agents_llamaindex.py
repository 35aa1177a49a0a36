"""LlamaIndex agents, traced by OpenInference, read as agentic RAG (tests/support/agentic.py).

Checked against llama-index-core 0.14.25, llama-index-llms-openai 0.8.3 (installed with `--no-deps`: it
asks for openai<3, the venv has openai 3.63.0, and its non-streaming chat with tools works with it) and
openinference-instrumentation-llama-index 4.6.1. The agent is a `FunctionAgent` (llama_index.core.agent
.workflow, `streaming=False`: the stub streams text only, never tool-call deltas) on `OpenAI` pointed at the
OpenAI-protocol stub. The knowledge base is a `VectorStoreIndex` of one `TextNode` per document (node id =
document id, no splitting, so nltk is never loaded) embedded by a local bag-of-words `BaseEmbedding`
(tests.support.agentic.keyword_vector).

What the instrumentation emits per run (one trace; the index is built before instrumenting, at the app's
start, so its embedding spans are not part of it): a CHAIN root `FunctionAgent.run` (`input.value` is the
workflow's start state without the user's message; `output.value` a Python repr of the StopEvent cut at
200 characters), CHAIN spans per workflow step (`BaseWorkflowAgent.run_agent_step`, `.call_tool`, ...),
under each agent step an LLM span `OpenAI.achat` (`llm.input_messages.*`: the user's question first, then
the tool calls and `tool` results; `llm.output_messages.0.message.tool_calls.*` or `.content` = the final
answer) and an LLM-kind span `OpenAI._prepare_chat_with_tools` that calls no model. A tool call is a TOOL
span `<ToolClass>.acall` with `tool.name`, `input.value` = `{"kwargs": {...}}` and `output.value` = the
`ToolOutput` as JSON: `{"blocks": [{"text": ...}], "tool_name", "raw_input", "raw_output", ...}`.

`QueryEngineTool` (argument `input`): its `raw_output` is the query engine's `Response` (the synthesized
text and `source_nodes`); under the TOOL span, a RETRIEVER span `VectorIndexRetriever.aretrieve`
(`input.value` = the query, `retrieval.documents.N.document.id/content/score`, node ids as given) and the
synthesis: `CompactAndRefine.*` CHAIN spans with an LLM span `OpenAI.apredict` around `OpenAI.achat`.
`FunctionTool.from_defaults(fn=search_docs)` (argument `query`): `raw_output` is the list of documents as
JSON, while `blocks[0].text` (also what the model receives as the `tool` message) is its Python repr.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.schema import TextNode
from llama_index.core.tools import BaseTool, FunctionTool, QueryEngineTool
from llama_index.llms.openai import OpenAI
from openai import AsyncOpenAI
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from semconv.options import MappingOptions
from tests.support import agentic
from tests.support.openai_stub import ChatReply, OpenAIStub, RecordedRequest

pytestmark = pytest.mark.usefixtures("no_leaked_context")


class KeywordEmbedding(BaseEmbedding):
    """tests.support.agentic.keyword_vector as a LlamaIndex embedding model (the `index` fixture checks
    that it ranks as `search_docs` does)."""

    def _get_query_embedding(self, query: str) -> list[float]:
        return agentic.keyword_vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return agentic.keyword_vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return agentic.keyword_vector(text)


# -- the scripted model -----------------------------------------------------------------------------------

CONTEXT_FENCE = "---------------------\n"


def synthesis_context(messages: list[dict[str, Any]]) -> str:
    """The retrieved text in a query engine's synthesis prompt (LlamaIndex's text_qa template puts it
    between two lines of dashes), documents separated by a blank line."""
    prompt = str(messages[-1]["content"])
    parts = prompt.split(CONTEXT_FENCE)
    assert len(parts) == 3 and prompt.startswith("Context information is below."), prompt
    return parts[1].strip()


def model_turns(answer: str) -> Callable[[RecordedRequest], ChatReply]:
    """The responder: the agent's function-calling requests (they carry the tool's schema) get the
    scripted turns, searching FIRST_QUERY, then SECOND_QUERY (with the argument the tool's schema requires,
    as a real model would: `input` for a QueryEngineTool, `query` for search_docs), then `answer`; the
    query engine's synthesis requests (no tools) are answered with the retrieved text. Stateless."""

    def respond(request: RecordedRequest) -> ChatReply:
        body = request.json
        if not body.get("tools"):
            return ChatReply(content=synthesis_context(body["messages"]))
        (tool,) = body["tools"]
        assert tool["function"]["name"] == agentic.TOOL_NAME, tool
        argument = tool["function"]["parameters"]["required"][0]
        seen = agentic.tool_results_in(body["messages"])
        if seen == 0:
            return agentic.tool_call({argument: agentic.FIRST_QUERY}, "call_first")
        if seen == 1:
            return agentic.tool_call({argument: agentic.SECOND_QUERY}, "call_second")
        return ChatReply(content=answer)

    return respond


# -- plumbing ---------------------------------------------------------------------------------------------


@pytest.fixture
def bundled_data(sandbox: agentic.Sandbox, monkeypatch: pytest.MonkeyPatch) -> agentic.Sandbox:
    """The sandbox (tests/frameworks/conftest.py: no network, an empty working directory), in which
    LlamaIndex must use its bundled nltk and tiktoken data, never download them."""
    # Unset, LlamaIndex reads the nltk and tiktoken data bundled in llama_index/core/_static.
    monkeypatch.delenv("NLTK_DATA", raising=False)
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    return sandbox


@pytest.fixture
def index(bundled_data: agentic.Sandbox) -> VectorStoreIndex:
    """The knowledge base as a vector index, one node per document (node id = document id). Built before
    the instrumentation (`instrumented` asks for it), as an app builds it at start-up: its embedding spans
    are not part of the agent's trace."""
    nodes = [TextNode(id_=doc_id, text=text) for doc_id, text in agentic.KNOWLEDGE_BASE.items()]
    built = VectorStoreIndex(nodes, embed_model=KeywordEmbedding())
    retriever = built.as_retriever(similarity_top_k=2)
    for query in agentic.QUERIES:
        assert [hit.node.node_id for hit in retriever.retrieve(query)] == agentic.expected_ids(query), query
    return built


@pytest.fixture
def instrumented(
    capture: tuple[TracerProvider, InMemorySpanExporter], index: VectorStoreIndex
) -> Iterator[InMemorySpanExporter]:
    """LlamaIndex instrumented with OpenInference on the private provider, for this test only."""
    with agentic.instrumenting(LlamaIndexInstrumentor(), capture) as exporter:
        yield exporter


@pytest.fixture
def llm(stub: OpenAIStub) -> tuple[OpenAI, AsyncOpenAI]:
    """The LLM on the stub, and its async OpenAI client (given, so that `run_agent` can close it inside
    the event loop: left to the garbage collector, it would try to close after `asyncio.run` ended)."""
    client = agentic.async_client(stub)
    # No retries: a failing stub must fail the test at once.
    model = OpenAI(
        model=agentic.MODEL, api_base=stub.base_url, api_key="test", max_retries=0, async_openai_client=client
    )
    return model, client


def run_agent(
    tool: BaseTool, llm: tuple[OpenAI, AsyncOpenAI], stub: OpenAIStub, sandbox: agentic.Sandbox, answer: str
) -> None:
    """Run a FunctionAgent with `tool` on QUESTION and check what the framework itself did: it returned
    `answer` after three function-calling requests, stayed off the network and wrote nothing."""
    model, client = llm
    agent = FunctionAgent(tools=[tool], llm=model, streaming=False)

    async def main() -> Any:
        try:
            return await agent.run(agentic.QUESTION)
        finally:
            await client.close()

    result = asyncio.run(main())
    assert len([r for r in stub.chat_requests if r.json.get("tools")]) == 3
    sandbox.check("LlamaIndex")
    assert str(result) == answer


# -- tests ------------------------------------------------------------------------------------------------


@agentic.ANSWERS
def test_query_engine_tool(
    instrumented: InMemorySpanExporter,
    index: VectorStoreIndex,
    llm: tuple[OpenAI, AsyncOpenAI],
    stub: OpenAIStub,
    sandbox: agentic.Sandbox,
    answer: str,
) -> None:
    """A FunctionAgent whose `search_docs` is a QueryEngineTool (vector retrieval of the top 2, then an LLM
    call that synthesizes the tool's answer from them) maps to the user's question (not the tool's `input`
    nor the synthesis prompt), the agent's final text (not a synthesized tool answer, not the root's
    StopEvent repr), and one retrieval step per search holding the retrieved nodes (ids as given, text,
    rank in retrieval order); faithfulness passes on the grounded answer and fails on the invented one.

    The tool's result is not a list of documents but a synthesized text (its JSON carries the `Response`
    with `source_nodes`): the documents are the ones of the RETRIEVER span under each tool call, and
    each search must be one retrieval round, not one for the retriever and one more for the tool."""
    stub.responder = model_turns(answer)
    tool = QueryEngineTool.from_defaults(
        index.as_query_engine(similarity_top_k=2, llm=llm[0]),
        name=agentic.TOOL_NAME,
        description=agentic.TOOL_DESCRIPTION,
    )

    run_agent(tool, llm, stub, sandbox, answer)
    # Three agent turns, and one synthesis call per search.
    assert len(stub.chat_requests) == 5
    trace, records = agentic.only_trace(instrumented)

    # What the tool returned to the agent: the synthesized text of the two retrieved documents.
    assert [o["blocks"][0]["text"] for o in agentic.tool_outputs(records)] == [
        "\n\n".join(doc["text"] for doc in docs) for docs in agentic.search_results()
    ]

    # One LLM call per model request: the agent's three turns and the two syntheses (not the LLM-kind
    # `_prepare_chat_with_tools` spans, nor `apredict` and its `achat` counted twice).
    agentic.assert_agentic_rag(trace, answer, tool_calls=2, llm_calls=5)


@agentic.OPTIONS
@agentic.ANSWERS
def test_function_tool(
    instrumented: InMemorySpanExporter,
    llm: tuple[OpenAI, AsyncOpenAI],
    stub: OpenAIStub,
    sandbox: agentic.Sandbox,
    answer: str,
    options: MappingOptions,
) -> None:
    """A FunctionAgent whose tool is `FunctionTool.from_defaults(fn=search_docs)` maps to the question,
    the final answer, and one retrieval step per call with the returned documents in order, read from
    the TOOL span's JSON `raw_output` (the `blocks` text beside it, which the model is sent, is a Python
    repr), whether the tool is detected or named in the options; faithfulness passes on the grounded
    answer and fails on the invented one."""
    stub.responder = model_turns(answer)
    tool = FunctionTool.from_defaults(fn=agentic.search_docs)
    assert tool.metadata.name == agentic.TOOL_NAME

    run_agent(tool, llm, stub, sandbox, answer)
    trace, records = agentic.only_trace(instrumented, options)

    outputs = agentic.tool_outputs(records)
    assert [o["raw_output"] for o in outputs] == agentic.search_results()
    assert [o["blocks"][0]["text"] for o in outputs] == [str(docs) for docs in agentic.search_results()]

    assert len(stub.chat_requests) == 3
    agentic.assert_agentic_rag(trace, answer, tool_name=agentic.TOOL_NAME, tool_calls=2, llm_calls=3)
