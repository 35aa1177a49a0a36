"""The mapper fed with spans of conventions (and eras) that no installable library emits any more, or
that come from libraries this project does not install (vector databases).

The spans are built as `SpanRecord`s, the shape the collector hands the mapper, from the shapes each
convention documents (and, where a test says so, from spans captured from the real library):
OpenLLMetry's legacy `gen_ai.prompt.<i>.*` era, vector-DB result events (Chroma, Pinecone, Milvus),
LangSmith's `gen_ai.prompt` / `gen_ai.completion` blobs, Langfuse's `langfuse.*` keys, GenAI before
v1.37, and OpenInference shapes the LangChain instrumentor never produces (LlamaIndex nesting,
rerankers, evaluators, redaction). Libraries that still emit their convention and that the project
installs are driven for real in tests/frameworks/test_conventions_real.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from semconv import SpanRecord
from tests.support.helpers import doc_tuples, one_step, rag_step_kinds, step_kinds
from tests.support.traces import TraceBuilder

QUESTION = "What is the refund window?"
ANSWER = "You can get a refund within 30 days."
CONTEXT_PROMPT = f"Context: Refunds within 30 days...\nQuestion: {QUESTION}"
SYSTEM = "Answer only from the context."


def dumps(value: Any) -> str:
    return json.dumps(value)


# -- OpenTelemetry GenAI -----------------------------------------------------------------------------------

GENAI_DOCUMENTS = [
    {"id": "file-1#c3", "score": 0.83, "content": "Refunds within 30 days..."},
    {"id": "file-2#c1", "score": 0.71},
]
GENAI_INPUT = [{"role": "user", "parts": [{"type": "text", "content": CONTEXT_PROMPT}]}]
GENAI_OUTPUT = [
    {"role": "assistant", "parts": [{"type": "text", "content": ANSWER}], "finish_reason": "stop"}
]
GENAI_SYSTEM = [{"type": "text", "content": SYSTEM}]


def genai_rag(structured: bool) -> TraceBuilder:
    """GenAI v1.40+: a retrieval span and a chat span under the app's plain root span. `structured`
    sends the "any" attributes as OTLP arrays/kvlists (lists and dicts here) instead of JSON strings."""
    encode = (lambda v: v) if structured else dumps
    t = TraceBuilder()
    root = t.span("POST /ask", kind="SERVER")
    t.span(
        "retrieval vs_68a1f0",
        {
            "gen_ai.operation.name": "retrieval",
            "gen_ai.provider.name": "openai",
            "gen_ai.data_source.id": "vs_68a1f0",
            "gen_ai.request.top_k": 5.0,
            "gen_ai.retrieval.query.text": QUESTION,
            "gen_ai.retrieval.documents": encode(GENAI_DOCUMENTS),
            "server.address": "api.openai.com",
            "server.port": 443,
        },
        parent=root,
        kind="CLIENT",
    )
    t.span(
        "chat gpt-4o-mini",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
            "gen_ai.response.id": "chatcmpl-9J3u",
            "gen_ai.response.finish_reasons": ["stop"],
            "gen_ai.usage.input_tokens": 812,
            "gen_ai.usage.output_tokens": 64,
            "gen_ai.system_instructions": encode(GENAI_SYSTEM),
            "gen_ai.input.messages": encode(GENAI_INPUT),
            "gen_ai.output.messages": encode(GENAI_OUTPUT),
        },
        parent=root,
        kind="CLIENT",
    )
    return t


@pytest.mark.parametrize("structured", [False, True], ids=["json-strings", "structured"])
def test_genai_retrieval_and_chat(structured: bool) -> None:
    trace = genai_rag(structured).map()
    assert trace.convention == "genai"
    assert step_kinds(trace) == ["chain", "retrieval", "llm"]
    # No root I/O: the first user message of the first llm step, and that step's answer.
    assert trace.question == CONTEXT_PROMPT
    assert trace.answer == ANSWER

    retrieval = one_step(trace, "retrieval")
    assert (retrieval.query, retrieval.convention) == (QUESTION, "genai")
    # `content` is an extension property; the second document has none, and no content is made up.
    assert doc_tuples(retrieval) == [
        (1, "file-1#c3", "Refunds within 30 days...", 0.83),
        (2, "file-2#c1", None, 0.71),
    ]

    llm = one_step(trace, "llm")
    assert (llm.model, llm.provider, llm.convention) == ("gpt-4o-mini-2024-07-18", "openai", "genai")
    assert (llm.input_tokens, llm.output_tokens, llm.total_tokens) == (812, 64, 876)
    assert llm.output == ANSWER
    assert llm.input is not None and SYSTEM in llm.input and CONTEXT_PROMPT in llm.input
    assert trace.retrieved_ids == ["file-1#c3", "file-2#c1"]


def test_genai_distance_never_becomes_score_and_missing_ids_stay_none() -> None:
    t = TraceBuilder()
    documents = [
        {"id": "a", "distance": 0.12, "content": "closest"},
        {"content": "no id, scored", "score": 0.4},
        {"distance": 0.3, "content": "no id, distance"},
    ]
    t.span(
        "retrieval kb",
        {
            "gen_ai.operation.name": "retrieval",
            "gen_ai.retrieval.query.text": QUESTION,
            "gen_ai.retrieval.documents": dumps(documents),
        },
        kind="CLIENT",
    )
    retrieval = one_step(t.map(), "retrieval")
    assert doc_tuples(retrieval) == [
        (1, "a", "closest", None),
        (2, None, "no id, scored", 0.4),
        (3, None, "no id, distance", None),
    ]
    assert [d.distance for d in retrieval.documents] == [0.12, None, 0.3]


def test_genai_prompt_name_is_not_a_message() -> None:
    """`gen_ai.prompt.name` (v1.39) shares the `gen_ai.prompt` prefix; only `gen_ai.prompt.<digit>.` are
    OpenLLMetry messages."""
    t = TraceBuilder()
    t.span(
        "chat gpt-4o-mini",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.prompt.name": "refund-policy-prompt",
            "gen_ai.input.messages": dumps(
                [{"role": "user", "parts": [{"type": "text", "content": QUESTION}]}]
            ),
            "gen_ai.output.messages": dumps(GENAI_OUTPUT),
        },
        kind="CLIENT",
    )
    llm = one_step(t.map(), "llm")
    assert llm.input is not None and QUESTION in llm.input
    assert "refund-policy-prompt" not in llm.input
    assert llm.output == ANSWER


def test_genai_v126_span_deprecated_names() -> None:
    """≤ v1.26: `gen_ai.system`, `gen_ai.usage.prompt_tokens`/`completion_tokens`, no operation name
    (it came in v1.27): the token counts are evidence of an llm step."""
    t = TraceBuilder()
    t.span(
        "chat gpt-4",
        {
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4",
            "gen_ai.response.model": "gpt-4-0613",
            "gen_ai.usage.prompt_tokens": 42,
            "gen_ai.usage.completion_tokens": 7,
        },
        kind="CLIENT",
        events=[
            ("gen_ai.content.prompt", {"gen_ai.prompt": dumps([{"role": "user", "content": QUESTION}])}),
            (
                "gen_ai.content.completion",
                {"gen_ai.completion": dumps([{"role": "assistant", "content": ANSWER}])},
            ),
        ],
    )
    trace = t.map()
    llm = one_step(trace, "llm")
    assert (llm.model, llm.provider) == ("gpt-4-0613", "openai")
    assert (llm.input_tokens, llm.output_tokens, llm.total_tokens) == (42, 7, 49)


def test_genai_deprecated_message_events_as_span_events() -> None:
    """v1.28-v1.36 per-message events (`gen_ai.user.message`, `gen_ai.choice`), attached to the span as
    span events: a span event has no body, so the body's fields arrive as event attributes."""
    t = TraceBuilder()
    t.span(
        "chat gpt-4o-mini",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.input_tokens": 30,
            "gen_ai.usage.output_tokens": 9,
        },
        kind="CLIENT",
        events=[
            ("gen_ai.system.message", {"gen_ai.system": "openai", "content": SYSTEM}),
            ("gen_ai.user.message", {"gen_ai.system": "openai", "content": QUESTION}),
            (
                "gen_ai.choice",
                {
                    "gen_ai.system": "openai",
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": ANSWER},
                },
            ),
        ],
    )
    trace = t.map()
    llm = one_step(trace, "llm")
    assert (llm.model, llm.provider, llm.input_tokens, llm.output_tokens) == ("gpt-4o-mini", "openai", 30, 9)
    assert llm.output == ANSWER
    assert llm.input is not None and QUESTION in llm.input
    assert (trace.question, trace.answer) == (QUESTION, ANSWER)


def test_genai_chat_without_content_is_unscorable_not_an_error() -> None:
    """Content capture is opt-in: an llm step with no text is normal."""
    t = TraceBuilder()
    t.span(
        "chat gpt-4o-mini",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.input_tokens": 812,
            "gen_ai.usage.output_tokens": 64,
        },
        kind="CLIENT",
    )
    trace = t.map()
    llm = one_step(trace, "llm")
    assert (llm.input, llm.output) == (None, None)
    assert (trace.question, trace.answer, trace.status) == (None, None, "ok")


# -- OpenLLMetry -------------------------------------------------------------------------------------------


def openllmetry_legacy_chat(**overrides: Any) -> dict[str, Any]:
    """OpenLLMetry's legacy (≤0.54) LLM span attributes: flattened prompt/completion, no operation name."""
    attributes: dict[str, Any] = {
        "gen_ai.system": "openai",
        "llm.request.type": "chat",
        "llm.is_streaming": False,
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "gen_ai.prompt.0.role": "system",
        "gen_ai.prompt.0.content": SYSTEM,
        "gen_ai.prompt.1.role": "user",
        "gen_ai.prompt.1.content": CONTEXT_PROMPT,
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.content": ANSWER,
        "gen_ai.completion.0.finish_reason": "stop",
        "gen_ai.usage.prompt_tokens": 812,
        "gen_ai.usage.completion_tokens": 64,
        "llm.usage.total_tokens": 876,
    }
    attributes.update(overrides)
    return {k: v for k, v in attributes.items() if v is not None}


@pytest.mark.parametrize(
    ("overrides", "provider"),
    [
        ({}, "openai"),
        # 0.50-0.54: the usage keys were renamed.
        (
            {
                "gen_ai.usage.prompt_tokens": None,
                "gen_ai.usage.completion_tokens": None,
                "gen_ai.usage.input_tokens": 812,
                "gen_ai.usage.output_tokens": 64,
            },
            "openai",
        ),
        # semconv-ai 0.4.x capitalised every system but openai; providers are lower-cased.
        ({"gen_ai.system": "Anthropic"}, "anthropic"),
    ],
    ids=["le-0.49", "0.50-0.54", "capitalised-system"],
)
def test_openllmetry_legacy_llm_span(overrides: dict[str, Any], provider: str) -> None:
    t = TraceBuilder()
    t.span("openai.chat", openllmetry_legacy_chat(**overrides), kind="CLIENT")
    trace = t.map()
    llm = one_step(trace, "llm")
    assert (llm.model, llm.provider) == ("gpt-4o-mini-2024-07-18", provider)
    assert (llm.input_tokens, llm.output_tokens, llm.total_tokens) == (812, 64, 876)
    assert llm.output == ANSWER
    assert llm.input is not None and SYSTEM in llm.input and CONTEXT_PROMPT in llm.input
    assert (trace.question, trace.answer) == (CONTEXT_PROMPT, ANSWER)
    assert trace.convention == "openllmetry"


def chroma_results(*hits: tuple[str, float, str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            "db.query.result",
            {
                "db.query.result.id": doc_id,
                "db.query.result.distance": distance,
                "db.query.result.document": text,
                "db.query.result.metadata": dumps(metadata),
            },
        )
        for doc_id, distance, text, metadata in hits
    ]


CHROMA_SPAN = {
    "db.system": "chroma",
    "db.operation": "query",
    "db.chroma.query.n_results": 2,
    "db.chroma.query.texts_count": 1,
}
CHROMA_HITS = (
    ("doc-17", 0.31, "Refunds within 30 days...", {"source": "policy.md"}),
    ("doc-4", 0.55, "Shipping takes 5 days.", {"source": "ship.md"}),
)


def test_openllmetry_chroma_query_events_are_the_documents() -> None:
    """OpenLLMetry's Chroma results are `db.query.result` span events; distance (lower is closer) is
    not a score."""
    t = TraceBuilder()
    root = t.span(
        "answer_question.workflow",
        {"traceloop.span.kind": "workflow", "traceloop.entity.name": "answer_question"},
    )
    t.span("chroma.query", CHROMA_SPAN, parent=root, events=chroma_results(*CHROMA_HITS))
    trace = t.map()
    retrieval = one_step(trace, "retrieval")
    assert doc_tuples(retrieval) == [
        (1, "doc-17", "Refunds within 30 days...", None),
        (2, "doc-4", "Shipping takes 5 days.", None),
    ]
    assert [d.distance for d in retrieval.documents] == [0.31, 0.55]
    assert [d.metadata for d in retrieval.documents] == [{"source": "policy.md"}, {"source": "ship.md"}]
    assert trace.convention == "openllmetry"


def test_openllmetry_langchain_retriever_over_chroma_is_one_step() -> None:
    """OpenLLMetry ≥0.53: `vector_db_retrieve VectorStoreRetriever` ⊃ `chroma.query` collapse into one
    retrieval step, and the same two hits are not listed twice."""
    entity_input = {"query": QUESTION, "tags": [], "metadata": {}, "kwargs": {}}
    entity_output = {
        "documents": [
            {"page_content": "Refunds within 30 days...", "metadata": {"source": "policy.md"}},
            {"page_content": "Shipping takes 5 days.", "metadata": {"source": "ship.md"}},
        ],
        "count": 2,
    }
    t = TraceBuilder()
    root = t.span(
        "RetrievalQA.workflow",
        {
            "traceloop.span.kind": "workflow",
            "traceloop.workflow.name": "RetrievalQA",
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": "langchain",
        },
    )
    retriever = t.span(
        "vector_db_retrieve VectorStoreRetriever",
        {
            "gen_ai.operation.name": "vector_db_retrieve",
            "gen_ai.provider.name": "langchain",
            "traceloop.span.kind": "task",
            "traceloop.entity.name": "VectorStoreRetriever",
            "traceloop.workflow.name": "RetrievalQA",
            "traceloop.entity.input": dumps(entity_input),
            "traceloop.entity.output": dumps(entity_output),
            "gen_ai.task.input": dumps(entity_input),
            "gen_ai.task.output": dumps(entity_output),
            "gen_ai.task.status": "success",
        },
        parent=root,
        kind="CLIENT",
    )
    chroma = t.span("chroma.query", CHROMA_SPAN, parent=retriever, events=chroma_results(*CHROMA_HITS))
    trace = t.map()
    retrieval = one_step(trace, "retrieval")
    assert set(retrieval.span_ids) == {retriever.span_id, chroma.span_id}
    assert retrieval.query == QUESTION
    assert [(d.rank, d.content) for d in retrieval.documents] == [
        (1, "Refunds within 30 days..."),
        (2, "Shipping takes 5 days."),
    ]
    # score stays None: Chroma gives distances only.
    assert [d.score for d in retrieval.documents] == [None, None]
    # The chain spans say gen_ai.provider.name="langchain", which is not a provider.
    assert [s.provider for s in trace.steps] == [None, None]


# A LangChain `VectorStoreRetriever` over Chroma with OpenLLMetry's LangChain and Chroma instrumentations,
# as captured from opentelemetry-instrumentation-langchain 0.62.4 and opentelemetry-instrumentation-chromadb
# 0.62.4 over chromadb 1.5.9 and langchain-chroma 1.1.0 (an in-memory `EphemeralClient`, spans read
# from the SDK's InMemorySpanExporter; only the test's own names and texts differ). The three chunks
# come from one file, so they share metadata `source`; the retriever span's `traceloop.entity.output`
# drops LangChain's `Document.id`, while the `chroma.query` span below it reports one
# `db.query.result` event per hit with Chroma's id.
POLICY_CHUNKS = {
    "chunk-refunds": "Refunds are accepted for 30 days.",
    "chunk-window": "The return window closes 30 days after delivery; the refund goes to the card.",
    "chunk-ship": "Shipping takes 5 business days.",
}
REWRITTEN_WINDOW = "The return window closes 30 days after delivery."  # what a compressor could keep


def langchain_retriever_over_chroma(returned: list[str], hits: list[tuple[str, float]]) -> TraceBuilder:
    """`returned`: the texts of the retriever's documents, in its order; `hits`: (Chroma id, distance)
    of the results the `chroma.query` span reports, in the database's order."""
    entity_input = {
        "query": QUESTION,
        "tags": ["Chroma", "KeywordEmbeddings"],
        "metadata": {
            "ls_retriever_name": "vectorstore",
            "ls_vector_store_provider": "Chroma",
            "ls_embedding_provider": "KeywordEmbeddings",
        },
        "kwargs": {"name": "VectorStoreRetriever"},
    }
    entity_output = {
        "documents": [{"page_content": text, "metadata": {"source": "policy.md"}} for text in returned],
        "count": len(returned),
    }
    t = TraceBuilder()
    retriever = t.span(
        "vector_db_retrieve VectorStoreRetriever",
        {
            "traceloop.workflow.name": "",
            "traceloop.entity.path": "",
            "traceloop.association.properties.ls_retriever_name": "vectorstore",
            "traceloop.association.properties.ls_vector_store_provider": "Chroma",
            "traceloop.association.properties.ls_embedding_provider": "KeywordEmbeddings",
            "gen_ai.operation.name": "vector_db_retrieve",
            "gen_ai.provider.name": "langchain",
            "traceloop.span.kind": "task",
            "traceloop.entity.name": "VectorStoreRetriever",
            "traceloop.entity.input": dumps(entity_input),
            "gen_ai.task.input": dumps(entity_input),
            "gen_ai.task.status": "success",
            "traceloop.entity.output": dumps(entity_output),
            "gen_ai.task.output": dumps(entity_output),
        },
        kind="CLIENT",
    )
    t.span(
        "chroma.query",
        {
            "db.system": "chroma",
            "db.operation": "query",
            "db.chroma.query.embeddings_count": 1,
            "db.chroma.query.n_results": len(hits),
        },
        parent=retriever,
        events=[
            (
                "db.query.result",
                {
                    "db.query.result.id": chunk_id,
                    "db.query.result.distance": distance,
                    "db.query.result.metadata": dumps({"source": "policy.md"}),
                    "db.query.result.document": POLICY_CHUNKS[chunk_id],
                },
            )
            for chunk_id, distance in hits
        ],
    )
    return t


@pytest.mark.parametrize(
    ("returned", "hits", "ids"),
    [
        # Similarity search (captured): the database's order, all of its hits.
        (
            ["chunk-refunds", "chunk-window"],
            [("chunk-refunds", 2.0), ("chunk-window", 2.0)],
            ["chunk-refunds", "chunk-window"],
        ),
        # MMR search (captured with k=2, fetch_k=3): Chroma returns three, the retriever keeps two of
        # them in another order.
        (
            ["chunk-window", "chunk-ship"],
            [("chunk-refunds", 2.0), ("chunk-window", 2.0), ("chunk-ship", 4.0)],
            ["chunk-window", "chunk-ship"],
        ),
        # As many documents as hits, in the reverse order: rank would swap the ids.
        (
            ["chunk-window", "chunk-refunds"],
            [("chunk-refunds", 2.0), ("chunk-window", 2.0)],
            ["chunk-window", "chunk-refunds"],
        ),
        # The second text was rewritten after the search: it has no hit, so it keeps the metadata
        # `source` fallback, not the id of the hit in its rank.
        (
            ["chunk-refunds", REWRITTEN_WINDOW],
            [("chunk-refunds", 2.0), ("chunk-window", 2.0)],
            ["chunk-refunds", "policy.md"],
        ),
    ],
    ids=["similarity", "mmr-fewer-reordered", "same-length-reversed", "one-text-rewritten"],
)
def test_openllmetry_retriever_takes_the_chroma_ids_by_text(
    returned: list[str], hits: list[tuple[str, float]], ids: list[str]
) -> None:
    texts = [POLICY_CHUNKS.get(name, name) for name in returned]
    t = langchain_retriever_over_chroma(texts, hits)
    trace = t.map()
    retrieval = one_step(trace, "retrieval")
    assert retrieval.span_ids == [s.span_id for s in t.spans]
    assert retrieval.query == QUESTION
    assert [(d.rank, d.content) for d in retrieval.documents] == list(enumerate(texts, start=1))
    # The retriever's own metadata stays; only the missing id is filled.
    assert [d.metadata for d in retrieval.documents] == [{"source": "policy.md"}] * len(texts)
    assert trace.retrieved_ids == ids


def test_openllmetry_pinecone_scores_and_python_repr_metadata() -> None:
    """OpenLLMetry's Pinecone results carry id, score and `str(dict)` metadata (not JSON)."""
    t = TraceBuilder()
    t.span(
        "pinecone.query",
        {
            "db.system": "Pinecone",
            "db.operation": "query",
            "pinecone.query.top_k": 2,
            "db.vector.query.top_score": 0.83,
        },
        kind="CLIENT",
        events=[
            (
                "db.query.result",
                {
                    "db.query.result.id": "vec-1",
                    "db.query.result.score": 0.83,
                    "db.query.result.metadata": str(
                        {"text": "Refunds within 30 days...", "source": "policy.md", "page": 2}
                    ),
                },
            ),
            (
                "db.query.result",
                {
                    "db.query.result.id": "vec-9",
                    "db.query.result.score": 0.71,
                    "db.query.result.metadata": str(
                        {"text": "Shipping takes 5 days.", "draft": True, "owner": None}
                    ),
                },
            ),
            ("db.query.embeddings", {"db.query.embeddings.vector": [0.1, 0.2]}),
        ],
    )
    retrieval = one_step(t.map(), "retrieval")
    assert [(d.rank, d.id, d.score, d.distance) for d in retrieval.documents] == [
        (1, "vec-1", 0.83, None),
        (2, "vec-9", 0.71, None),
    ]
    assert [d.metadata for d in retrieval.documents] == [
        {"text": "Refunds within 30 days...", "source": "policy.md", "page": 2},
        {"text": "Shipping takes 5 days.", "draft": True, "owner": None},
    ]


def test_openllmetry_milvus_search_string_distance() -> None:
    """OpenLLMetry's Milvus search results are `db.search.result` events whose distance is a string."""
    t = TraceBuilder()
    t.span(
        "milvus.search",
        {"db.system": "milvus", "db.operation": "search", "db.vector.query.result_count": 2},
        kind="CLIENT",
        events=[
            (
                "db.search.result",
                {"db.search.query.id": 0, "db.search.result.id": "11", "db.search.result.distance": "0.31"},
            ),
            (
                "db.search.result",
                {"db.search.query.id": 0, "db.search.result.id": "12", "db.search.result.distance": "0.5"},
            ),
        ],
    )
    retrieval = one_step(t.map(), "retrieval")
    assert [(d.rank, d.id, d.score, d.distance) for d in retrieval.documents] == [
        (1, "11", None, 0.31),
        (2, "12", None, 0.5),
    ]


def test_openllmetry_llamaindex_retriever_node_list() -> None:
    """OpenLLMetry's LlamaIndex retriever span is `<Class>.task` with the query in
    `str_or_query_bundle` and NodeWithScore items as JSON-encoded strings in `traceloop.entity.output`."""
    nodes = [
        {
            "node": {
                "id_": "n-1",
                "text": "Refunds within 30 days...",
                "metadata": {"file_name": "policy.md"},
            },
            "score": 0.82,
        },
        {
            "node": {"id_": "n-2", "text": "Shipping takes 5 days.", "metadata": {"file_name": "ship.md"}},
            "score": 0.4,
        },
    ]
    t = TraceBuilder()
    root = t.span("RetrieverQueryEngine.workflow", {"traceloop.span.kind": "workflow"})
    t.span(
        "VectorIndexRetriever.task",
        {
            "traceloop.span.kind": "task",
            "traceloop.entity.name": "VectorIndexRetriever",
            "traceloop.entity.input": dumps({"str_or_query_bundle": QUESTION}),
            "traceloop.entity.output": dumps([dumps({**n, "class_name": "NodeWithScore"}) for n in nodes]),
        },
        parent=root,
    )
    retrieval = one_step(t.map(), "retrieval")
    assert retrieval.query == QUESTION
    assert doc_tuples(retrieval) == [
        (1, "n-1", "Refunds within 30 days...", 0.82),
        (2, "n-2", "Shipping takes 5 days.", 0.4),
    ]


def test_openllmetry_root_entity_input_gives_the_question() -> None:
    """The LangChain callback's root `traceloop.entity.input` is {"inputs": {...}, "tags", "metadata",
    "kwargs"}; its question beats the first llm step's (templated) user message."""
    t = TraceBuilder()
    root = t.span(
        "RetrievalQA.workflow",
        {
            "traceloop.span.kind": "workflow",
            "traceloop.entity.input": dumps(
                {
                    "inputs": {"question": QUESTION},
                    "tags": [],
                    "metadata": {},
                    "kwargs": {"name": "RetrievalQA"},
                }
            ),
            "traceloop.entity.output": dumps({"outputs": ANSWER, "kwargs": {"tags": []}}),
        },
    )
    t.span(
        "ChatOpenAI.chat", openllmetry_legacy_chat(**{"gen_ai.completion.0.content": "30 days."}), parent=root
    )
    trace = t.map()
    assert one_step(trace, "llm").output == "30 days."
    assert (trace.question, trace.answer) == (QUESTION, ANSWER)


def test_langchain_provider_is_not_a_provider() -> None:
    t = TraceBuilder()
    root = t.span(
        "execute_task RunnableSequence",
        {"gen_ai.operation.name": "execute_task", "gen_ai.provider.name": "langchain"},
    )
    t.span(
        "ChatLocal.chat",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "langchain",
            "gen_ai.request.model": "local-model",
            "gen_ai.usage.input_tokens": 5,
            "gen_ai.usage.output_tokens": 2,
        },
        parent=root,
        kind="CLIENT",
    )
    trace = t.map()
    assert step_kinds(trace) == ["chain", "llm"]
    assert [s.provider for s in trace.steps] == [None, None]
    assert one_step(trace, "llm").model == "local-model"


# -- LangSmith ---------------------------------------------------------------------------------------------


def langsmith(kind: str, operation: str, **attributes: Any) -> dict[str, Any]:
    return {
        "langsmith.span.kind": kind,
        "langsmith.trace.name": "rag",
        "langsmith.trace.session_name": "default",
        "gen_ai.operation.name": operation,
        "gen_ai.system": attributes.pop("system", "langchain"),
        **attributes,
    }


def test_langsmith_runs() -> None:
    """LangSmith's OTel exporter: retriever runs say gen_ai.operation.name=embeddings (sic);
    langsmith.span.kind wins."""
    t = TraceBuilder()
    root = t.span(
        "rag",
        langsmith(
            "chain",
            "chain",
            **{
                "gen_ai.prompt": dumps({"question": QUESTION}),
                "gen_ai.completion": dumps({"output": ANSWER}),
            },
        ),
    )
    embed = t.span(
        "OpenAIEmbeddings",
        langsmith(
            "embedding", "embeddings", system="openai", **{"gen_ai.request.model": "text-embedding-3-small"}
        ),
        parent=root,
    )
    retriever = t.span(
        "VectorStoreRetriever",
        langsmith(
            "retriever",
            "embeddings",
            **{
                "gen_ai.prompt": dumps({"query": QUESTION}),
                "gen_ai.completion": dumps(
                    {
                        "documents": [
                            {
                                "page_content": "Refunds within 30 days...",
                                "metadata": {"source": "policy.md"},
                                "type": "Document",
                            },
                            {
                                "page_content": "Shipping takes 5 days.",
                                "metadata": {"page": 3},
                                "type": "Document",
                            },
                        ]
                    }
                ),
                "langsmith.span.tags": "seq:step:1, InMemoryVectorStore",
            },
        ),
        parent=root,
    )
    llm_span = t.span(
        "ChatOpenAI",
        langsmith(
            "llm",
            "chat",
            system="openai",
            **{
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.usage.input_tokens": 812,
                "gen_ai.usage.output_tokens": 64,
                "gen_ai.usage.total_tokens": 876,
                "gen_ai.response.finish_reasons": "stop",
                "gen_ai.usage.input_token_details": "{'cache_read': 0}",
            },
        ),
        parent=root,
    )
    trace = t.map()
    assert trace.convention == "langsmith"
    assert step_kinds(trace) == ["chain", "embedding", "retrieval", "llm"]
    assert one_step(trace, "embedding").span_ids == [embed.span_id]
    retrieval = one_step(trace, "retrieval")
    assert retrieval.span_ids == [retriever.span_id]
    assert retrieval.query == QUESTION
    # No Document.id in the run outputs: the first falls back to metadata `source` (docs/conventions.md,
    # "Document ids"), the second has nothing that names it and keeps id None.
    assert doc_tuples(retrieval) == [
        (1, "policy.md", "Refunds within 30 days...", None),
        (2, None, "Shipping takes 5 days.", None),
    ]
    assert [d.metadata for d in retrieval.documents] == [{"source": "policy.md"}, {"page": 3}]
    llm = one_step(trace, "llm")
    assert llm.span_ids == [llm_span.span_id]
    assert (llm.model, llm.provider) == ("gpt-4o-mini", "openai")
    assert (llm.input_tokens, llm.output_tokens, llm.total_tokens) == (812, 64, 876)
    # gen_ai.system="langchain" on the chain root is not a provider.
    assert trace.steps[0].provider is None
    # Last: the root run's inputs/outputs, gen_ai.prompt {"question": ...} / gen_ai.completion {"output": ...}
    # (the llm run here has no gen_ai.completion, so the answer can only come from the root).
    assert (trace.question, trace.answer) == (QUESTION, ANSWER)


# -- Langfuse ----------------------------------------------------------------------------------------------


def test_langfuse_observations() -> None:
    """Langfuse SDK v3+: `langfuse.observation.type` types the step; trace I/O from
    `langfuse.trace.input/output`."""
    t = TraceBuilder()
    root = t.span(
        "rag-request",
        {
            "langfuse.observation.type": "span",
            "langfuse.trace.name": "rag-request",
            "langfuse.trace.input": QUESTION,
            "langfuse.trace.output": ANSWER,
            "session.id": "sess-42",
        },
    )
    t.span(
        "embed-query",
        {
            "langfuse.observation.type": "embedding",
            "langfuse.observation.model.name": "text-embedding-3-small",
            "langfuse.observation.input": QUESTION,
            "langfuse.observation.usage_details": dumps({"input": 6}),
        },
        parent=root,
    )
    t.span(
        "search",
        {
            "langfuse.observation.type": "retriever",
            "langfuse.observation.input": dumps({"query": QUESTION}),
            "langfuse.observation.output": dumps(
                [
                    {"id": "refunds", "content": "Refunds within 30 days...", "score": 0.9},
                    {"content": "Shipping takes 5 days.", "score": 0.2},
                ]
            ),
        },
        parent=root,
    )
    t.span(
        "answer",
        {
            "langfuse.observation.type": "generation",
            "langfuse.observation.model.name": "gpt-4o-mini",
            "langfuse.observation.model.parameters": dumps({"temperature": 0}),
            "langfuse.observation.input": dumps([{"role": "user", "content": CONTEXT_PROMPT}]),
            "langfuse.observation.output": "30 days.",
            "langfuse.observation.usage_details": dumps({"input": 812, "output": 64, "total": 876}),
        },
        parent=root,
    )
    t.span(
        "faithfulness",
        {
            "langfuse.observation.type": "evaluator",
            "langfuse.observation.model.name": "gpt-4o-mini",
            "langfuse.observation.output": dumps({"score": 1}),
        },
        parent=root,
    )
    trace = t.map()
    assert trace.convention == "langfuse"
    assert rag_step_kinds(trace) == ["embedding", "retrieval", "llm"]
    # langfuse.trace.* beats the llm step's own text.
    assert (trace.question, trace.answer) == (QUESTION, ANSWER)
    assert trace.session_id == "sess-42"
    embedding = one_step(trace, "embedding")
    assert (embedding.model, embedding.input_tokens) == ("text-embedding-3-small", 6)
    retrieval = one_step(trace, "retrieval")
    assert retrieval.query == QUESTION
    assert doc_tuples(retrieval) == [
        (1, "refunds", "Refunds within 30 days...", 0.9),
        (2, None, "Shipping takes 5 days.", 0.2),
    ]
    llm = one_step(trace, "llm")
    assert (llm.model, llm.output) == ("gpt-4o-mini", "30 days.")
    assert (llm.input_tokens, llm.output_tokens, llm.total_tokens) == (812, 64, 876)
    # The evaluator has a model but is not an llm step (its own kind is checked in the OpenInference test
    # below and in test_conventions_real.py).
    assert [s.name for s in trace.steps_of("llm")] == ["answer"]
    # Last: Step.input is text; the JSON message list is read as messages (as for every other
    # convention), so the prompt's newline is a newline, not the two characters of JSON's "\n".
    assert llm.input is not None and CONTEXT_PROMPT in llm.input


# -- OpenInference -----------------------------------------------------------------------------------------


def oi(kind: str, **attributes: Any) -> dict[str, Any]:
    return {"openinference.span.kind": kind, **attributes}


def oi_documents(prefix: str, documents: list[dict[str, Any]]) -> dict[str, Any]:
    """Flatten documents as `<prefix>.<i>.document.<field>`, as OpenInference does."""
    return {f"{prefix}.{i}.document.{k}": v for i, d in enumerate(documents) for k, v in d.items()}


def test_openinference_redacted_values_are_absent() -> None:
    """OpenInference's hidden values are the literal "__REDACTED__"; they are absent, never text."""
    t = TraceBuilder()
    root = t.span(
        "RetrievalQA", oi("CHAIN", **{"input.value": "__REDACTED__", "output.value": "__REDACTED__"})
    )
    t.span(
        "VectorStoreRetriever",
        oi(
            "RETRIEVER",
            **{"input.value": QUESTION},
            **oi_documents(
                "retrieval.documents",
                [{"id": "d1", "content": "__REDACTED__"}, {"id": "d2", "content": "visible"}],
            ),
        ),
        parent=root,
    )
    t.span(
        "ChatOpenAI",
        oi(
            "LLM",
            **{
                "llm.model_name": "gpt-4o-mini",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": QUESTION,
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "__REDACTED__",
                "llm.token_count.prompt": 10,
                "llm.token_count.completion": 2,
            },
        ),
        parent=root,
    )
    trace = t.map()
    # Root input redacted: the question comes from the next source, the llm step's user message.
    assert trace.question == QUESTION
    assert trace.answer is None
    assert one_step(trace, "llm").output is None
    assert doc_tuples(one_step(trace, "retrieval")) == [(1, "d1", None, None), (2, "d2", "visible", None)]


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        ('{"file_name": "policy.md", "page": 2}', {"file_name": "policy.md", "page": 2}),
        (
            "{'file_name': 'policy.md', 'page': 2, 'draft': False, 'owner': None}",
            {"file_name": "policy.md", "page": 2, "draft": False, "owner": None},
        ),
    ],
    ids=["json", "python-repr"],
)
def test_openinference_document_metadata(raw: str, parsed: dict[str, Any]) -> None:
    t = TraceBuilder()
    t.span(
        "VectorIndexRetriever.retrieve",
        oi(
            "RETRIEVER",
            **{"input.value": QUESTION},
            **oi_documents(
                "retrieval.documents",
                [
                    {
                        "id": "6c1f3f0e",
                        "content": "Refunds within 30 days...",
                        "score": 0.8231,
                        "metadata": raw,
                    }
                ],
            ),
        ),
    )
    retrieval = one_step(t.map(), "retrieval")
    assert doc_tuples(retrieval) == [(1, "6c1f3f0e", "Refunds within 30 days...", 0.8231)]
    assert retrieval.documents[0].metadata == parsed


def llamaindex_query_engine() -> tuple[TraceBuilder, dict[str, SpanRecord]]:
    """A LlamaIndex query engine with OpenAI instrumented too: `.retrieve` ⊃ `._retrieve`,
    and `OpenAI.predict` ⊃ `OpenAI.chat` ⊃ `ChatCompletion`, all with token counts."""
    t = TraceBuilder()
    spans: dict[str, SpanRecord] = {}
    spans["root"] = t.span(
        "RetrieverQueryEngine.query", oi("CHAIN", **{"input.value": QUESTION, "output.value": ANSWER})
    )
    spans["retrieve"] = t.span(
        "VectorIndexRetriever.retrieve",
        oi(
            "RETRIEVER",
            **{"input.value": QUESTION},
            **oi_documents(
                "retrieval.documents",
                [
                    {"id": "n-1", "content": "Refunds within 30 days...", "score": 0.82},
                    {"id": "n-2", "content": "Shipping takes 5 days.", "score": 0.4},
                ],
            ),
        ),
        parent=spans["root"],
    )
    spans["_retrieve"] = t.span("VectorIndexRetriever._retrieve", oi("RETRIEVER"), parent=spans["retrieve"])
    llm_tokens = {
        "llm.token_count.prompt": 812,
        "llm.token_count.completion": 64,
        "llm.token_count.total": 876,
    }
    spans["predict"] = t.span(
        "OpenAI.predict",
        oi(
            "LLM",
            **{
                "llm.prompt_template.variables": dumps({"query_str": QUESTION}),
                "llm.model_name": "gpt-4o-mini",
            },
            **llm_tokens,
        ),
        parent=spans["root"],
    )
    messages = {
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": CONTEXT_PROMPT,
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": ANSWER,
    }
    spans["chat"] = t.span(
        "OpenAI.chat",
        oi(
            "LLM",
            **{"llm.model_name": "gpt-4o-mini", "output.value": f"assistant: {ANSWER}"},
            **messages,
            **llm_tokens,
        ),
        parent=spans["predict"],
    )
    spans["completion"] = t.span(
        "ChatCompletion",
        oi(
            "LLM",
            **{"llm.model_name": "gpt-4o-mini-2024-07-18", "llm.provider": "openai"},
            **messages,
            **llm_tokens,
        ),
        parent=spans["chat"],
    )
    return t, spans


def test_openinference_llamaindex_nesting_collapses() -> None:
    t, spans = llamaindex_query_engine()
    trace = t.map()
    assert trace.convention == "openinference"
    assert step_kinds(trace) == ["chain", "retrieval", "llm"]
    retrieval = one_step(trace, "retrieval")
    assert set(retrieval.span_ids) == {spans["retrieve"].span_id, spans["_retrieve"].span_id}
    assert doc_tuples(retrieval) == [
        (1, "n-1", "Refunds within 30 days...", 0.82),
        (2, "n-2", "Shipping takes 5 days.", 0.4),
    ]
    llm = one_step(trace, "llm")
    assert set(llm.span_ids) == {spans["predict"].span_id, spans["chat"].span_id, spans["completion"].span_id}
    # Tokens of the leaf only: each level repeats the same 812/64, which must not become 2436/192.
    assert (llm.input_tokens, llm.output_tokens, llm.total_tokens) == (812, 64, 876)
    # The innermost span with messages and tokens describes the step.
    assert (llm.model, llm.provider) == ("gpt-4o-mini-2024-07-18", "openai")
    assert llm.output == ANSWER
    assert (trace.question, trace.answer) == (QUESTION, ANSWER)


def test_nested_llm_spans_sum_tokens_over_leaves_only() -> None:
    """One llm step for the nest; its tokens are the sum over the two leaf calls, not the parent's own."""
    t = TraceBuilder()
    root = t.span("agent", oi("CHAIN", **{"input.value": QUESTION, "output.value": ANSWER}))
    parent = t.span(
        "OpenAI.predict",
        oi(
            "LLM",
            **{
                "llm.model_name": "gpt-4o-mini",
                "llm.token_count.prompt": 999,
                "llm.token_count.completion": 99,
            },
        ),
        parent=root,
    )
    leaves = [
        t.span(
            "ChatCompletion",
            oi(
                "LLM",
                **{
                    "llm.model_name": "gpt-4o-mini",
                    "llm.token_count.prompt": prompt,
                    "llm.token_count.completion": completion,
                    "llm.token_count.total": prompt + completion,
                    "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.content": text,
                },
            ),
            parent=parent,
        )
        for prompt, completion, text in [(100, 10, "draft"), (200, 20, ANSWER)]
    ]
    trace = t.map()
    llm = one_step(trace, "llm")
    assert set(llm.span_ids) == {parent.span_id, *(leaf.span_id for leaf in leaves)}
    assert (llm.input_tokens, llm.output_tokens, llm.total_tokens) == (300, 30, 330)
    assert (trace.input_tokens, trace.output_tokens) == (300, 30)


def test_openinference_reranker() -> None:
    t = TraceBuilder()
    root = t.span("query", oi("CHAIN", **{"input.value": QUESTION}))
    t.span(
        "VectorIndexRetriever.retrieve",
        oi(
            "RETRIEVER",
            **{"input.value": QUESTION},
            **oi_documents(
                "retrieval.documents",
                [
                    {"id": "a", "content": "alpha", "score": 0.7},
                    {"id": "b", "content": "beta", "score": 0.6},
                    {"id": "c", "content": "gamma", "score": 0.5},
                ],
            ),
        ),
        parent=root,
    )
    t.span(
        "CohereRerank.postprocess_nodes",
        oi(
            "RERANKER",
            **{
                "reranker.query": "refund window",
                "reranker.model_name": "rerank-english-v3.0",
                "reranker.top_k": 2,
            },
            **oi_documents(
                "reranker.input_documents",
                [
                    {"id": "a", "content": "alpha", "score": 0.7},
                    {"id": "b", "content": "beta", "score": 0.6},
                    {"id": "c", "content": "gamma", "score": 0.5},
                ],
            ),
            **oi_documents(
                "reranker.output_documents",
                [
                    {"id": "b", "content": "beta", "score": 0.97},
                    {"id": "a", "content": "alpha", "score": 0.41},
                ],
            ),
        ),
        parent=root,
    )
    trace = t.map()
    assert step_kinds(trace) == ["chain", "retrieval", "rerank"]
    rerank = one_step(trace, "rerank")
    assert (rerank.query, rerank.model) == ("refund window", "rerank-english-v3.0")
    assert doc_tuples(rerank) == [(1, "b", "beta", 0.97), (2, "a", "alpha", 0.41)]
    assert [(d.rank, d.id, d.score) for d in rerank.input_documents] == [
        (1, "a", 0.7),
        (2, "b", 0.6),
        (3, "c", 0.5),
    ]
    assert trace.retrieved_ids == ["b", "a"]


def test_openinference_evaluator_is_not_llm() -> None:
    """OpenInference EVALUATOR carrier spans are kind evaluator, even with a model and token counts."""
    t = TraceBuilder()
    root = t.span("RetrievalQA", oi("CHAIN", **{"input.value": QUESTION, "output.value": ANSWER}))
    t.span(
        "ChatOpenAI",
        oi(
            "LLM",
            **{
                "llm.model_name": "gpt-4o-mini",
                "llm.output_messages.0.message.content": ANSWER,
                "llm.token_count.prompt": 50,
                "llm.token_count.completion": 8,
            },
        ),
        parent=root,
    )
    t.span(
        "faithfulness-judge",
        oi(
            "EVALUATOR",
            **{
                "llm.model_name": "gpt-4o",
                "llm.token_count.prompt": 400,
                "llm.token_count.completion": 20,
                "evaluations.0.evaluation.name": "faithfulness",
                "evaluations.0.evaluation.score": 1.0,
            },
        ),
        parent=root,
    )
    trace = t.map()
    assert one_step(trace, "llm").model == "gpt-4o-mini"
    assert trace.answer == ANSWER
    assert (trace.input_tokens, trace.output_tokens) == (50, 8)
    # Last: the carrier is an evaluator step, not dropped (`EVALUATOR` -> evaluator).
    assert step_kinds(trace) == ["chain", "llm", "evaluator"]
    assert one_step(trace, "evaluator").name == "faithfulness-judge"


def test_chain_only_trace_has_unknown_convention() -> None:
    t = TraceBuilder()
    root = t.span("RunnableSequence", oi("CHAIN", **{"input.value": QUESTION, "output.value": ANSWER}))
    t.span("StrOutputParser", oi("CHAIN"), parent=root)
    trace = t.map()
    assert step_kinds(trace) == ["chain", "chain"]
    assert trace.convention == "unknown"
    assert (trace.question, trace.answer) == (QUESTION, ANSWER)


# -- Trace convention and question/answer precedence -------------------------------------------------------


def genai_chat(answer: str = ANSWER) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.input.messages": dumps(
            [{"role": "user", "parts": [{"type": "text", "content": "llm question"}]}]
        ),
        "gen_ai.output.messages": dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": answer}], "finish_reason": "stop"}]
        ),
    }


def oi_retriever() -> dict[str, Any]:
    return oi(
        "RETRIEVER", **{"input.value": QUESTION}, **oi_documents("retrieval.documents", [{"content": "x"}])
    )


@pytest.mark.parametrize(
    ("children", "convention"),
    [
        ([oi_retriever(), genai_chat(), genai_chat()], "genai"),
        ([oi_retriever(), oi_retriever(), genai_chat()], "openinference"),
    ],
    ids=["two-genai-one-oi", "two-oi-one-genai"],
)
def test_convention_is_the_one_that_typed_most_rag_steps(
    children: list[dict[str, Any]], convention: str
) -> None:
    t = TraceBuilder()
    root = t.span("handler")
    for i, attributes in enumerate(children):
        t.span(f"step-{i}", attributes, parent=root)
    trace = t.map()
    assert len(trace.steps) == 1 + len(children)
    assert trace.convention == convention


@pytest.mark.parametrize(
    ("root_attributes", "question", "answer"),
    [
        (
            {
                "rag.question": "rag q",
                "rag.answer": "rag a",
                "input.value": "oi q",
                "output.value": "oi a",
                "langfuse.trace.input": "lf q",
                "langfuse.trace.output": "lf a",
            },
            "rag q",
            "rag a",
        ),
        (
            {
                "input.value": "oi q",
                "output.value": "oi a",
                "langfuse.trace.input": "lf q",
                "langfuse.trace.output": "lf a",
                "traceloop.entity.input": dumps({"question": "tl q"}),
                "traceloop.entity.output": dumps({"answer": "tl a"}),
            },
            "oi q",
            "oi a",
        ),
        (
            {
                "langfuse.trace.input": "lf q",
                "langfuse.trace.output": "lf a",
                "traceloop.entity.input": dumps({"question": "tl q"}),
            },
            "lf q",
            "lf a",
        ),
        ({"traceloop.entity.input": dumps({"query": "tl q"})}, "tl q", ANSWER),
        ({"traceloop.entity.input": dumps({"input": "tl q"})}, "tl q", ANSWER),
        ({}, "llm question", ANSWER),
    ],
    ids=["rag", "input.value", "langfuse.trace", "entity.query", "entity.input", "first-llm-step"],
)
def test_question_and_answer_precedence(root_attributes: dict[str, Any], question: str, answer: str) -> None:
    t = TraceBuilder()
    root = t.span("request", root_attributes)
    t.span("chat gpt-4o-mini", genai_chat(answer="first answer"), parent=root)
    t.span("chat gpt-4o-mini", genai_chat(answer=ANSWER), parent=root)
    trace = t.map()
    assert (trace.question, trace.answer) == (question, answer)


def test_rag_keys_make_the_ragpulse_convention() -> None:
    """`rag.*` keys on the root (what `semconv.emit` writes) make the trace 'ragpulse', although the
    steps themselves are GenAI spans."""
    t = TraceBuilder()
    root = t.span(
        "rag.request", {"rag.step": "chain", "rag.question": QUESTION, "rag.answer": ANSWER}, kind="SERVER"
    )
    t.span(
        "retrieval kb",
        {
            "gen_ai.operation.name": "retrieval",
            "gen_ai.retrieval.query.text": QUESTION,
            "gen_ai.retrieval.documents": dumps(
                [{"id": "refunds", "score": 0.8, "content": "Refunds within 30 days..."}]
            ),
        },
        parent=root,
        kind="CLIENT",
    )
    t.span("chat gpt-4o-mini", genai_chat(), parent=root, kind="CLIENT")
    trace = t.map()
    assert trace.convention == "ragpulse"
    assert (trace.question, trace.answer) == (QUESTION, ANSWER)
    assert trace.retrieved_ids == ["refunds"]
