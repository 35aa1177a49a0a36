"""Pydantic AI agents, traced by the framework's own OpenTelemetry GenAI instrumentation (no third-party
instrumentor), read as agentic RAG (tests/support/agentic.py); and the same agent on an MCP server's tool.

Checked against pydantic-ai-slim 2.78.0 (its `openai` and `mcp` extras: openai 3.63.0, fastmcp-slim
4.2.3 as the MCP client) and the official MCP SDK `mcp` 2.3.0 (its in-process server is
`mcp.server.mcpserver.MCPServer`, FastMCP's new name in SDK v2). The model is the OpenAI-protocol stub
through `OpenAIChatModel` (chat completions).

Instrumentation is the agent's `Instrumentation` capability (`Agent(instrument=...)` is gone from
2.x's constructor) with `InstrumentationSettings(tracer_provider=<private>, include_content=True)`.
Data format versions 3 and later (5 is the default, 6 the latest) emit the GenAI names; version 2
(deprecated) names its spans `agent run` / `running tool` and puts the call in `tool_arguments` /
`tool_response`. Per run: a root span `invoke_agent <agent name>` (INTERNAL), and under it, in
order, one `chat <model>` span (CLIENT) per model request and one `execute_tool <tool>` span
(INTERNAL) per tool call, siblings.

- `execute_tool`: `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.call.arguments` (JSON text,
  `{"query":"..."}`) and `gen_ai.tool.call.result`: always a string attribute, the tool's return
  value as JSON text (`[{"id":"refunds","text":"..."}]`), or the string itself when the tool returns
  a `str`; never a structured OTLP value.
- `chat`: `gen_ai.input.messages` / `gen_ai.output.messages` (JSON text, GenAI parts: `text`,
  `tool_call` with `arguments` as JSON text, `tool_call_response` with `result` as a JSON value, not
  text), `gen_ai.system_instructions`, `gen_ai.tool.definitions`. The tool results sent back to the
  model are in a message of role `user` up to version 5 and `tool` from version 6.
- `invoke_agent`: no `gen_ai.input.messages` / `gen_ai.output.messages`; the whole conversation is
  `pydantic_ai.all_messages` (the same GenAI message JSON) and the final answer `final_result` (the
  plain text). The question is the first `user` text part of the first `chat` span's input.

MCP: `pydantic_ai.mcp.MCPToolset(server)` connects the agent to an `MCPServer` in-process, but maps
the `CallToolResult` before the span sees it: each text block becomes its text (parsed when it is
JSON), each embedded resource its text (the URI is dropped), one block is the value itself and more
are a list. So `gen_ai.tool.call.result` is `["<text 1>","<text 2>"]`, the MCP shape and the
resource URIs are lost. A function tool that calls the MCP server itself (`mcp.Client(server)`) and
returns `CallToolResult.model_dump(mode="json", by_alias=True, exclude_none=True)` keeps them: the
result is `{"_meta":{...},"content":[{"type":"resource","resource":{"uri":"kb://refunds",...}}],
"isError":false,"resultType":"complete"}`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any, Final, Literal

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, EmbeddedResource, TextContent, TextResourceContents
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent, Tool
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from semconv import RagTrace, SpanRecord
from semconv.options import MappingOptions
from tests.support import agentic
from tests.support.openai_stub import OpenAIStub

pytestmark = pytest.mark.usefixtures("no_leaked_context", "root_logging_kept")

AGENT_NAME = "shop_assistant"
INSTRUCTIONS = "Answer the customer's question from the shop's knowledge base."
# The newest instrumentation data format of pydantic-ai 2.78 (tool results in `tool` messages).
LATEST_VERSION: Final = 6
McpContent = Literal["text", "resource"]
Capture = tuple[TracerProvider, InMemorySpanExporter]


# Pydantic AI makes the tool from the function's own name, signature and docstring
# (tests.support.agentic.search_docs would offer the model its `k` argument and its longer docstring).
def search_docs(query: str) -> list[dict[str, str]]:
    """Search the shop's knowledge base and return the matching documents."""
    return agentic.search_docs(query)


# -- plumbing ---------------------------------------------------------------------------------------------


@pytest.fixture
def root_logging_kept() -> Iterator[None]:
    """Put the root logger back as it was: `MCPServer()` calls `logging.basicConfig` (a rich handler at
    INFO), which would change logging for every later test when nothing had configured it yet."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def instrumentation(provider: TracerProvider, version: Literal[6] | None) -> InstrumentationSettings:
    """The framework's own tracing on the private provider, with content; `version=None` is the
    library's default data format."""
    if version is None:
        return InstrumentationSettings(tracer_provider=provider, include_content=True)
    return InstrumentationSettings(tracer_provider=provider, include_content=True, version=version)


def make_agent(
    stub: OpenAIStub,
    settings: InstrumentationSettings,
    tools: list[Tool[None]] | None = None,
    toolsets: list[MCPToolset[None]] | None = None,
) -> Agent[None, str]:
    model = OpenAIChatModel(agentic.MODEL, provider=OpenAIProvider(openai_client=agentic.async_client(stub)))
    return Agent(
        model,
        name=AGENT_NAME,
        instructions=INSTRUCTIONS,
        tools=tools or (),
        toolsets=toolsets,
        capabilities=[Instrumentation(settings=settings)],
    )


def run_agent(
    capture: Capture,
    stub: OpenAIStub,
    refused: list[Any],
    answer: str,
    version: Literal[6] | None = LATEST_VERSION,
    tools: list[Tool[None]] | None = None,
    toolsets: list[MCPToolset[None]] | None = None,
    options: MappingOptions | None = None,
) -> tuple[RagTrace, list[SpanRecord]]:
    """Run the agent (`make_agent`, traced in data format `version`) on QUESTION, the model scripted to
    search FIRST_QUERY, then SECOND_QUERY, then answer `answer`; check that it returned `answer` after
    three model requests and stayed off the network. The mapped trace and its spans."""
    provider, exporter = capture
    stub.responder = lambda request: agentic.agent_turn(request.json["messages"], answer)
    agent = make_agent(stub, instrumentation(provider, version), tools, toolsets)

    assert agent.run_sync(agentic.QUESTION).output == answer

    assert len(stub.chat_requests) == 3
    agentic.assert_no_network(refused, "Pydantic AI")
    return agentic.only_trace(exporter, options or MappingOptions())


def kb_server(content: McpContent) -> MCPServer:
    """An MCP server with a `search_docs` tool returning the knowledge base's documents as MCP content:
    one text block per document, or one embedded resource (`kb://<id>`) per document."""
    server = MCPServer("shop-kb")

    @server.tool(name=agentic.TOOL_NAME, description=agentic.TOOL_DESCRIPTION, structured_output=False)
    def mcp_search_docs(query: str) -> CallToolResult:
        docs = agentic.search_docs(query)
        if content == "text":
            blocks: list[Any] = [TextContent(type="text", text=doc["text"]) for doc in docs]
        else:
            blocks = [
                EmbeddedResource(
                    type="resource",
                    resource=TextResourceContents(
                        uri=f"kb://{doc['id']}", text=doc["text"], mime_type="text/plain"
                    ),
                )
                for doc in docs
            ]
        return CallToolResult(content=blocks)

    return server


def named(records: list[SpanRecord], name: str) -> list[SpanRecord]:
    """The spans of that name, in start order."""
    return sorted((r for r in records if r.name == name), key=lambda r: r.start_us or 0)


def tool_spans(records: list[SpanRecord]) -> list[SpanRecord]:
    return named(records, f"execute_tool {agentic.TOOL_NAME}")


def chat_spans(records: list[SpanRecord]) -> list[SpanRecord]:
    return named(records, f"chat {agentic.MODEL}")


def tool_results(records: list[SpanRecord]) -> list[Any]:
    """Each tool call's `gen_ai.tool.call.result`, parsed (JSON text), in call order."""
    return [json.loads(span.attributes["gen_ai.tool.call.result"]) for span in tool_spans(records)]


def assert_span_tree(records: list[SpanRecord], answer: str) -> None:
    """The root `invoke_agent` span with three `chat` and two `execute_tool` children, the tool spans
    carrying the GenAI call attributes, and the answer in the root's `final_result`."""
    roots = [r for r in records if not r.parent_span_id]
    assert [r.name for r in roots] == [f"invoke_agent {AGENT_NAME}"]
    root = roots[0]
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["final_result"] == answer
    assert "gen_ai.input.messages" not in root.attributes
    chats, tools = chat_spans(records), tool_spans(records)
    assert len(chats) == 3 and len(tools) == 2
    assert {r.parent_span_id for r in chats + tools} == {root.span_id}
    for span, query, call_id in zip(tools, agentic.QUERIES, ("call_first", "call_second"), strict=True):
        attrs = span.attributes
        assert attrs["gen_ai.operation.name"] == "execute_tool"
        assert attrs["gen_ai.tool.name"] == agentic.TOOL_NAME
        assert attrs["gen_ai.tool.call.id"] == call_id
        assert json.loads(attrs["gen_ai.tool.call.arguments"]) == {"query": query}
        assert isinstance(attrs["gen_ai.tool.call.result"], str)  # JSON text, not a structured value
    first_input = json.loads(chats[0].attributes["gen_ai.input.messages"])
    assert first_input == [{"role": "user", "parts": [{"type": "text", "content": agentic.QUESTION}]}]
    last_output = json.loads(chats[-1].attributes["gen_ai.output.messages"])
    assert last_output[-1]["parts"] == [{"type": "text", "content": answer}]


def texts_only(query: str) -> list[tuple[str | None, str]]:
    """A result that carries the documents' texts but no ids."""
    return [(None, doc["text"]) for doc in agentic.search_docs(query)]


def resource_uris(query: str) -> list[tuple[str | None, str]]:
    """MCP embedded resources: the resource URI is the document's id."""
    return [(f"kb://{doc['id']}", doc["text"]) for doc in agentic.search_docs(query)]


# -- tests ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [None, LATEST_VERSION], ids=["default-format", "latest-format"])
@agentic.ANSWERS
def test_function_tool_agent(
    capture: Capture, stub: OpenAIStub, loopback_only: list[Any], answer: str, version: Literal[6] | None
) -> None:
    """An agent that calls its `search_docs` function tool twice and then answers, traced by its own
    GenAI instrumentation in the default and the latest data format, maps to the user's question,
    the answer text and one retrieval step per call with the tool's documents (detected: the tool
    says it searches and its JSON result reads as documents)."""
    tool = Tool(search_docs, takes_ctx=False)
    trace, records = run_agent(capture, stub, loopback_only, answer, version, tools=[tool])

    assert_span_tree(records, answer)
    assert tool_results(records) == agentic.search_results()
    # The tool results sent back to the model: role `tool` from format 6, `user` before.
    last_input = json.loads(chat_spans(records)[-1].attributes["gen_ai.input.messages"])
    responses = [m for m in last_input if any(p["type"] == "tool_call_response" for p in m["parts"])]
    format_version = instrumentation(capture[0], version).version
    assert [m["role"] for m in responses] == ["tool" if format_version >= 6 else "user"] * 2
    assert responses[0]["parts"][0]["result"] == agentic.search_docs(agentic.FIRST_QUERY)
    agentic.assert_agentic_rag(trace, answer, tool_name=agentic.TOOL_NAME, tool_calls=2, llm_calls=3)


@agentic.ANSWERS
def test_configured_function_tool(
    capture: Capture, stub: OpenAIStub, loopback_only: list[Any], answer: str
) -> None:
    """With the detector off, a tool the configuration names (`mapping.retrieval_tools`) is still
    read as a retrieval from the same spans."""
    tool = Tool(search_docs, takes_ctx=False)
    trace, _ = run_agent(capture, stub, loopback_only, answer, tools=[tool], options=agentic.CONFIGURED)

    agentic.assert_agentic_rag(trace, answer)


@pytest.mark.parametrize("content", ["text", "resource"])
@agentic.ANSWERS
def test_mcp_toolset_agent(
    capture: Capture, stub: OpenAIStub, loopback_only: list[Any], answer: str, content: McpContent
) -> None:
    """An agent connected to an in-process MCP server through `MCPToolset`: the tool result on the
    span is what Pydantic AI makes of the MCP content, a JSON list of the documents' texts (text
    blocks and embedded resources alike; no ids, no URIs), and it still maps to one retrieval step
    per call with the documents' texts in the server's order."""
    toolset: MCPToolset[None] = MCPToolset(kb_server(content))
    trace, records = run_agent(capture, stub, loopback_only, answer, toolsets=[toolset])

    assert_span_tree(records, answer)
    assert tool_results(records) == [[doc["text"] for doc in docs] for docs in agentic.search_results()]
    agentic.assert_agentic_rag(
        trace, answer, documents=texts_only, tool_name=agentic.TOOL_NAME, tool_calls=2, llm_calls=3
    )


@pytest.mark.parametrize("content", ["text", "resource"])
@agentic.ANSWERS
def test_mcp_call_tool_result(
    capture: Capture, stub: OpenAIStub, loopback_only: list[Any], answer: str, content: McpContent
) -> None:
    """A function tool that calls the MCP server's `search_docs` (an MCP client session in-process)
    and returns the `CallToolResult` as MCP JSON: the span's result holds the MCP shape, and each
    call maps to a retrieval step with one document per content block (an embedded resource's URI
    as the document id, a text block without one)."""
    server = kb_server(content)

    async def call_mcp_search(query: str) -> dict[str, Any]:
        async with Client(server) as client:
            result = await client.call_tool(agentic.TOOL_NAME, {"query": query})
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    tool = Tool(
        call_mcp_search, takes_ctx=False, name=agentic.TOOL_NAME, description=agentic.TOOL_DESCRIPTION
    )
    trace, records = run_agent(capture, stub, loopback_only, answer, tools=[tool])

    assert_span_tree(records, answer)
    for result, docs in zip(tool_results(records), agentic.search_results(), strict=True):
        assert result["isError"] is False
        blocks = result["content"]
        if content == "resource":
            assert [(b["type"], b["resource"]["uri"], b["resource"]["text"]) for b in blocks] == [
                ("resource", f"kb://{doc['id']}", doc["text"]) for doc in docs
            ]
        else:
            assert blocks == [{"type": "text", "text": doc["text"]} for doc in docs]
    documents = resource_uris if content == "resource" else texts_only
    agentic.assert_agentic_rag(
        trace, answer, documents=documents, tool_name=agentic.TOOL_NAME, tool_calls=2, llm_calls=3
    )
