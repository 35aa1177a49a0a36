"""The rules for agents and tools (docs/conventions.md, "Agents and tools"), one by one, on spans built
in the shapes the conventions document: which tool calls are retrievals, the documents in every result
shape, several rounds, the question and the answer of agents and pipelines, and what is not a
retrieval. Real frameworks emitting real spans are in tests/frameworks/test_agents_*.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from evaluators.judge.fence import MAX_DOCUMENT_CHARS, clip_documents
from evaluators.registry import build_evaluator
from semconv import RagTrace
from semconv.mapping import map_trace
from semconv.options import MappingOptions
from tests.support.agentic import GROUNDED_ANSWER, INVENTED_ANSWER, KNOWLEDGE_BASE, QUESTION, search_docs
from tests.support.traces import TraceBuilder

FIRST, SECOND = "refund processing time", "return window for items"


def user_message(content: str) -> list[dict[str, Any]]:
    return [{"role": "user", "parts": [{"type": "text", "content": content}]}]


def tool_call_output(name: str, arguments: dict[str, Any], call_id: str) -> list[dict[str, Any]]:
    part = {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}
    return [{"role": "assistant", "parts": [part], "finish_reason": "tool_call"}]


def text_output(content: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "parts": [{"type": "text", "content": content}], "finish_reason": "stop"}]


def genai_agent(
    results: list[Any],
    answer: str = GROUNDED_ANSWER,
    tool: str = "search_docs",
    description: str | None = None,
    encode: bool = True,
) -> TraceBuilder:
    """An OTel GenAI agent (`invoke_agent` > `chat` / `execute_tool` ...): one tool call per result,
    each after a chat turn asking for it, then the answering chat turn. `encode`: results as JSON
    text (else as structured OTLP values)."""
    t = TraceBuilder()
    agent = t.span(
        "invoke_agent shop_assistant",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "shop_assistant",
            "gen_ai.input.messages": json.dumps(user_message(QUESTION)),
        },
    )
    history = user_message(QUESTION)
    for index, result in enumerate(results):
        query = (FIRST, SECOND)[index % 2]
        call = tool_call_output(tool, {"query": query}, f"call_{index}")
        t.span(
            "chat gpt-4o-mini",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.input.messages": json.dumps(history),
                "gen_ai.output.messages": json.dumps(call),
                "gen_ai.usage.input_tokens": 100,
                "gen_ai.usage.output_tokens": 10,
            },
            parent=agent,
        )
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": f"call_{index}",
            "gen_ai.tool.call.arguments": json.dumps({"query": query}),
            "gen_ai.tool.call.result": json.dumps(result)
            if encode and not isinstance(result, str)
            else result,
        }
        if description:
            attributes["gen_ai.tool.description"] = description
        t.span(f"execute_tool {tool}", attributes, parent=agent)
        history = [*history, *call]
    t.span(
        "chat gpt-4o-mini",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.input.messages": json.dumps(history),
            "gen_ai.output.messages": json.dumps(text_output(answer)),
            "gen_ai.usage.input_tokens": 300,
            "gen_ai.usage.output_tokens": 30,
        },
        parent=agent,
    )
    return t


def faithfulness(trace: RagTrace) -> Any:
    return build_evaluator({"name": "faithfulness"})(trace)


def docs_of(trace: RagTrace) -> list[list[tuple[int, str | None, str | None]]]:
    return [[(d.rank, d.id, d.content) for d in s.documents] for s in trace.steps_of("retrieval")]


def expected_docs(query: str) -> list[tuple[int, str | None, str | None]]:
    return [(rank, d["id"], d["text"]) for rank, d in enumerate(search_docs(query), start=1)]


# -- retrieval through tools --------------------------------------------------------------------------------


def test_a_genai_agent_retrieving_through_a_tool_is_read_as_two_retrieval_rounds() -> None:
    """The issue's first case: documents in `gen_ai.tool.call.result`; grounded, not 'no documents'."""
    trace = genai_agent([search_docs(FIRST), search_docs(SECOND)]).map()
    assert [s.kind for s in trace.steps] == ["chain", "llm", "retrieval", "llm", "retrieval", "llm"]
    assert docs_of(trace) == [expected_docs(FIRST), expected_docs(SECOND)]
    assert [s.query for s in trace.steps_of("retrieval")] == [FIRST, SECOND]
    assert {s.tool_name for s in trace.steps_of("retrieval")} == {"search_docs"}
    assert (trace.question, trace.answer) == (QUESTION, GROUNDED_ANSWER)
    assert (trace.tool_calls, trace.retrieval_rounds, trace.llm_calls) == (2, 2, 3)
    assert trace.convention == "genai"
    assert faithfulness(trace).status == "pass"
    invented = genai_agent([search_docs(FIRST), search_docs(SECOND)], answer=INVENTED_ANSWER).map()
    assert faithfulness(invented).status == "fail"


def test_structured_tool_results_read_as_their_json_text() -> None:
    """`gen_ai.tool.call.result` as an OTLP array of kvlists, not JSON text."""
    trace = genai_agent([search_docs(FIRST)], encode=False).map()
    assert docs_of(trace) == [expected_docs(FIRST)]


RESULT_SHAPES = [
    pytest.param(
        {"results": [{"id": "refunds", "content": KNOWLEDGE_BASE["refunds"], "score": 0.9}]},
        [(1, "refunds", KNOWLEDGE_BASE["refunds"])],
        id="results-wrapper",
    ),
    pytest.param(
        {
            "hits": {
                "hits": [{"_id": "refunds", "_score": 3.2, "_source": {"body": KNOWLEDGE_BASE["refunds"]}}]
            }
        },
        [(1, "refunds", KNOWLEDGE_BASE["refunds"])],
        id="elasticsearch-hits",
    ),
    pytest.param(
        {"matches": [{"id": "refunds", "score": 0.8, "metadata": {"text": KNOWLEDGE_BASE["refunds"]}}]},
        [(1, "refunds", KNOWLEDGE_BASE["refunds"])],
        id="pinecone-matches",
    ),
    pytest.param(
        {
            "object": "vector_store.search_results.page",
            "data": [
                {
                    "file_id": "file-abc",
                    "filename": "refunds.md",
                    "score": 0.7,
                    "attributes": {},
                    "content": [{"type": "text", "text": KNOWLEDGE_BASE["refunds"]}],
                }
            ],
        },
        [(1, "file-abc", KNOWLEDGE_BASE["refunds"])],
        id="openai-vector-store-search",
    ),
    pytest.param(
        {"chunks": [KNOWLEDGE_BASE["refunds"], KNOWLEDGE_BASE["shipping"]]},
        [(1, None, KNOWLEDGE_BASE["refunds"]), (2, None, KNOWLEDGE_BASE["shipping"])],
        id="plain-strings",
    ),
    pytest.param(
        "[Document(id='refunds', metadata={'source': 'refunds.md'}, page_content='"
        + KNOWLEDGE_BASE["refunds"]
        + "'), Document(metadata={'source': 'ship.md'}, page_content='"
        + KNOWLEDGE_BASE["shipping"]
        + "')]",
        [(1, "refunds", KNOWLEDGE_BASE["refunds"]), (2, "ship.md", KNOWLEDGE_BASE["shipping"])],
        id="langchain-document-repr",
    ),
    pytest.param(
        "[NodeWithScore(node=TextNode(id_='refunds', text='"
        + KNOWLEDGE_BASE["refunds"]
        + "', metadata={}), score=0.83)]",
        [(1, "refunds", KNOWLEDGE_BASE["refunds"])],
        id="llamaindex-node-repr",
    ),
    pytest.param(
        {
            "content": [
                {"type": "text", "text": KNOWLEDGE_BASE["refunds"]},
                {
                    "type": "resource",
                    "resource": {
                        "uri": "kb://shipping",
                        "mimeType": "text/plain",
                        "text": KNOWLEDGE_BASE["shipping"],
                    },
                },
            ],
            "isError": False,
        },
        [(1, None, KNOWLEDGE_BASE["refunds"]), (2, "kb://shipping", KNOWLEDGE_BASE["shipping"])],
        id="mcp-call-tool-result",
    ),
    pytest.param(
        {
            "content": [{"type": "text", "text": json.dumps(search_docs(FIRST))}],
            "structuredContent": {"result": search_docs(FIRST)},
        },
        expected_docs(FIRST),
        id="mcp-json-text-block",
    ),
]


@pytest.mark.parametrize(("result", "expected"), RESULT_SHAPES)
def test_tool_results_in_every_shape_give_their_documents(
    result: Any, expected: list[tuple[int, str | None, str | None]]
) -> None:
    trace = genai_agent([result]).map()
    assert docs_of(trace) == [expected], [(s.kind, s.output) for s in trace.steps]


NOT_DOCUMENTS = [
    pytest.param(42, id="number"),
    pytest.param({"city": "Paris", "temperature_c": 21, "conditions": "sunny"}, id="weather-dict"),
    pytest.param("Error: the search index is unavailable", id="error-string"),
    pytest.param([{"id": "AF123", "price": 312.5}], id="records-without-text"),
    pytest.param({"content": [{"type": "text", "text": "boom"}], "isError": True}, id="mcp-error"),
    pytest.param('[{"id": "refunds", "text": "Refunds are', id="malformed-json"),
]


@pytest.mark.parametrize("result", NOT_DOCUMENTS)
def test_a_search_tool_whose_result_is_not_documents_stays_a_tool_step(result: Any) -> None:
    """A tool named like a search, whose result is no document list, is not a retrieval; the tool
    step is kept, with its arguments and result, and nothing raises."""
    trace = genai_agent([result]).map()
    assert trace.mapping_error is None
    assert not trace.steps_of("retrieval")
    (tool,) = trace.steps_of("tool")
    assert tool.tool_name == "search_docs"
    assert tool.input == json.dumps({"query": FIRST})
    assert tool.output is not None and tool.result_size == len(tool.output)
    assert (trace.tool_calls, trace.retrieval_rounds) == (1, 0)
    assert faithfulness(trace).label == "no_retrieval"


def test_which_tools_are_retrievals_detector_and_configuration() -> None:
    results = [search_docs(FIRST)]
    # Not named like a search: a tool, unless the configuration names it (a glob) or its
    # description says it searches.
    assert not genai_agent(results, tool="policy_docs").map().steps_of("retrieval")
    named = MappingOptions(retrieval_tools=("policy_*",))
    assert docs_of(map_trace(genai_agent(results, tool="policy_docs").spans, named)) == [expected_docs(FIRST)]
    described = genai_agent(results, tool="policy_docs", description="Look up the shop's knowledge base.")
    assert len(described.map().steps_of("retrieval")) == 1
    # The detector off: only named tools.
    off = MappingOptions(detect_retrieval_tools=False)
    assert not map_trace(genai_agent(results).spans, off).steps_of("retrieval")
    assert map_trace(genai_agent(results).spans, MappingOptions(("search_docs",), False)).steps_of(
        "retrieval"
    )
    # A named tool's result is read leniently: plain text is one document.
    text_result = genai_agent(["Refunds are issued within 5 business days."], tool="policy_docs")
    assert docs_of(map_trace(text_result.spans, named)) == [
        [(1, None, "Refunds are issued within 5 business days.")]
    ]


def test_rag_step_retrieval_on_a_tool_span_always_wins() -> None:
    t = genai_agent([search_docs(FIRST)], tool="fetch_policy")
    tool_span = next(s for s in t.spans if s.name == "execute_tool fetch_policy")
    tool_span.attributes["rag.step"] = "retrieval"
    trace = map_trace(t.spans, MappingOptions(detect_retrieval_tools=False))
    (step,) = trace.steps_of("retrieval")
    assert (step.tool_name, step.query) == ("fetch_policy", FIRST)
    assert [(d.rank, d.id, d.content) for d in step.documents] == expected_docs(FIRST)


def test_a_tool_with_a_retriever_span_below_is_not_a_second_retrieval() -> None:
    """LangChain's retriever tool: the RETRIEVER span inside the TOOL span holds the documents; the
    tool's own output (the joined text, or the same documents) is not read again. An agent run as a
    tool over a search tool is one retrieval too."""
    t = TraceBuilder()
    root = t.span("agent", {"openinference.span.kind": "AGENT", "input.value": QUESTION})
    tool = t.span(
        "search_docs",
        {
            "openinference.span.kind": "TOOL",
            "tool.name": "search_docs",
            "input.value": json.dumps({"query": FIRST}),
            "output.value": json.dumps(search_docs(FIRST)),
        },
        parent=root,
    )
    t.span(
        "VectorStoreRetriever",
        {
            "openinference.span.kind": "RETRIEVER",
            "input.value": FIRST,
            **{
                f"retrieval.documents.{i}.document.{k}": v
                for i, doc in enumerate(search_docs(FIRST))
                for k, v in (("id", doc["id"]), ("content", doc["text"]))
            },
        },
        parent=tool,
    )
    inner = t.span(
        "research_agent",
        {
            "openinference.span.kind": "TOOL",
            "tool.name": "ask_researcher",
            "output.value": json.dumps(search_docs(SECOND)),
        },
        parent=root,
    )
    t.span(
        "search_kb",
        {
            "openinference.span.kind": "TOOL",
            "tool.name": "search_kb",
            "output.value": json.dumps(search_docs(SECOND)),
        },
        parent=inner,
    )
    trace = t.map()
    assert [(s.kind, s.name) for s in trace.steps if s.kind != "chain"] == [
        ("tool", "search_docs"),
        ("retrieval", "VectorStoreRetriever"),
        ("tool", "research_agent"),
        ("retrieval", "search_kb"),
    ]
    assert docs_of(trace) == [expected_docs(FIRST), expected_docs(SECOND)]
    assert (trace.tool_calls, trace.retrieval_rounds) == (3, 2)


def test_a_10_mb_tool_result_is_read_and_clipped_for_the_judge_like_any_document() -> None:
    big = "Refunds are issued within 5 business days. " * 240_000  # ~10 MB
    trace = genai_agent([[{"id": "huge", "text": big}]]).map()
    (step,) = trace.steps_of("retrieval")
    assert step.result_size is not None and step.result_size > 10_000_000
    assert step.documents[0].content == big
    (clipped,) = clip_documents([(d.id, d.content or "") for d in trace.contexts]).documents
    assert len(clipped.text) == MAX_DOCUMENT_CHARS and clipped.original_chars == len(big)


# -- several rounds ------------------------------------------------------------------------------------------


def test_the_context_of_several_rounds_is_every_document_before_the_answer_once() -> None:
    """Rounds in call order, a document found again counted once (at its first place); the
    retrieval metrics read the rounds in call order too, each id once."""
    t = genai_agent([search_docs(FIRST), search_docs(SECOND)])
    t.spans[0].attributes["rag.expected.documents"] = ["returns-window"]
    trace = t.map()
    assert [d.id for d in trace.contexts] == ["refunds", "returns-window"]  # not 4: each once
    mrr = build_evaluator({"name": "retrieval.mrr@5"})(trace)
    assert mrr.value == 0.5  # returns-window is second in the deduplicated list (rank 1 of round 2)
    # A search after the answer (a "related articles" lookup) is not part of the answer's context.
    late = t.span(
        "execute_tool search_docs",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "search_docs",
            "gen_ai.tool.call.result": json.dumps([{"id": "warranty", "text": KNOWLEDGE_BASE["warranty"]}]),
        },
        parent=t.spans[0],
    )
    assert late.start_us is not None
    trace = t.map()
    assert trace.retrieval_rounds == 3
    assert [d.id for d in trace.contexts] == ["refunds", "returns-window"]


def test_reranks_replace_the_round_they_reranked() -> None:
    """Hybrid search then one rerank: the rerank's output; a round of retrieve + rerank each: both
    reranks' outputs; a second rerank right after a first: the second."""
    from semconv import Document, Step
    from semconv.models import context_documents

    def step(kind: str, *ids: str) -> Step:
        return Step(
            span_id=kind + "".join(ids),
            kind=kind,
            documents=[Document(rank=i + 1, id=d, content=d) for i, d in enumerate(ids)],
        )  # type: ignore[arg-type]

    def ids(*steps: Step) -> list[str | None]:
        return [d.id for d in context_documents(list(steps))]

    assert ids(step("retrieval", "a", "b"), step("retrieval", "c"), step("rerank", "c", "a")) == ["c", "a"]
    assert ids(
        step("retrieval", "a", "b"), step("rerank", "b"), step("retrieval", "c", "d"), step("rerank", "d")
    ) == ["b", "d"]
    assert ids(step("retrieval", "a", "b", "c"), step("rerank", "b", "c"), step("rerank", "c")) == ["c"]
    assert ids(step("retrieval", "a"), step("rerank"), step("llm")) == ["a"]  # a rerank with no output


# -- question and answer -------------------------------------------------------------------------------------


def test_a_pipeline_root_holding_a_repr_gives_the_llm_steps_clean_answer() -> None:
    """The issue's second case (a pipeline framework with OpenInference): the root's output is a
    JSON object wrapping a `ChatMessage(...)` repr; the answer is the LLM span's clean text."""
    repr_reply = (
        "ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, _content=[TextContent(text='"
        + GROUNDED_ANSWER
        + "')], _name=None, _meta={'model': 'gpt-4o-mini', 'finish_reason': 'stop'})"
    )
    t = TraceBuilder()
    root = t.span(
        "Pipeline.run",
        {
            "openinference.span.kind": "CHAIN",
            "input.value": json.dumps(
                {"retriever": {"query": QUESTION}, "prompt_builder": {"question": QUESTION}}
            ),
            "output.value": json.dumps({"llm": {"replies": [repr_reply]}}),
            "output.mime_type": "application/json",
        },
    )
    t.span(
        "InMemoryBM25Retriever",
        {
            "openinference.span.kind": "RETRIEVER",
            "input.value": QUESTION,
            **{
                f"retrieval.documents.{i}.document.{k}": v
                for i, doc in enumerate(search_docs(FIRST) + search_docs(SECOND)[:1])
                for k, v in (("id", doc["id"]), ("content", doc["text"]))
            },
        },
        parent=root,
    )
    t.span(
        "OpenAIChatGenerator",
        {
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": f"Context: ...\nQuestion: {QUESTION}",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": GROUNDED_ANSWER,
        },
        parent=root,
    )
    trace = t.map()
    assert trace.question == QUESTION
    assert trace.answer == GROUNDED_ANSWER
    assert faithfulness(trace).status == "pass"


def test_the_answer_is_the_last_text_that_calls_no_tool_and_the_question_no_tool_argument() -> None:
    t = genai_agent([search_docs(FIRST)])
    thinking = t.spans[1]  # the chat turn that asked for the search also said something
    thinking.attributes["gen_ai.output.messages"] = json.dumps(
        [
            {
                "role": "assistant",
                "parts": [
                    {"type": "text", "content": "Let me search the knowledge base."},
                    {
                        "type": "tool_call",
                        "id": "call_0",
                        "name": "search_docs",
                        "arguments": {"query": FIRST},
                    },
                ],
                "finish_reason": "tool_call",
            }
        ]
    )
    last = t.spans[-1]
    last.attributes["gen_ai.output.messages"] = json.dumps(
        tool_call_output("search_docs", {"query": SECOND}, "c")
    )
    trace = t.map()
    assert trace.answer is None  # the agent stopped before answering: no tool call, no thinking aloud
    del last.attributes["gen_ai.output.messages"]
    last.attributes["gen_ai.output.messages"] = json.dumps(text_output(GROUNDED_ANSWER))
    assert t.map().answer == GROUNDED_ANSWER
    # With no user message anywhere, the question stays unknown rather than a tool's argument.
    for span in t.spans:
        span.attributes.pop("gen_ai.input.messages", None)
    assert t.map().question is None


def test_openllmetry_tool_spans_are_read_like_any_tool() -> None:
    """Traceloop's `@tool` decorator: `traceloop.span.kind = tool`, the call in `traceloop.entity.*`."""
    t = TraceBuilder()
    root = t.span(
        "shop.workflow",
        {
            "traceloop.span.kind": "workflow",
            "traceloop.entity.input": json.dumps({"args": [QUESTION], "kwargs": {}}),
            "traceloop.entity.output": json.dumps(GROUNDED_ANSWER),
        },
    )
    t.span(
        "lookup_policy.tool",
        {
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": "lookup_policy",
            "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"query": FIRST}}),
            "traceloop.entity.output": json.dumps(search_docs(FIRST)),
        },
        parent=root,
    )
    trace = t.map()
    (step,) = trace.steps_of("retrieval")
    assert (step.tool_name, step.query, step.convention) == ("lookup_policy", FIRST, "openllmetry")
    assert docs_of(trace) == [expected_docs(FIRST)]
    assert (trace.question, trace.answer) == (QUESTION, GROUNDED_ANSWER)
