"""Hypothesis strategies for arbitrary spans and traces: attribute keys the mappers really read (plus
flattened `prefix.<i>.suffix` keys and random ones), any JSON value, JSON text, Python reprs, huge
and non-finite numbers, deeply nested lists, and arbitrary span trees (the mapper's property tests
and the compiled mapping's equivalence test)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from semconv import STEP_KINDS, EventRecord, SpanRecord

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"

# --------------------------------------------------------------------------- vocabulary

# Values that steer classification, per key (the rest get arbitrary values too).
KIND_VALUES: dict[str, list[Any]] = {
    "rag.step": [*STEP_KINDS, "CHAIN", "Retrieval", "nope"],
    "openinference.span.kind": [
        "LLM",
        "RETRIEVER",
        "RERANKER",
        "EMBEDDING",
        "TOOL",
        "EVALUATOR",
        "CHAIN",
        "AGENT",
    ],
    "gen_ai.operation.name": [
        "chat",
        "text_completion",
        "embeddings",
        "retrieval",
        "vector_db_retrieve",
        "rerank",
        "execute_tool",
        "invoke_agent",
        "execute_task",
    ],
    "langfuse.observation.type": ["generation", "retriever", "embedding", "tool", "evaluator", "span"],
    "langsmith.span.kind": ["llm", "retriever", "embedding", "tool", "chain", "prompt"],
    "llm.request.type": ["chat", "completion", "embedding", "rerank"],
    "traceloop.span.kind": ["tool", "workflow", "task"],
    "gen_ai.span.kind": ["LLM", "RETRIEVER", "CHAIN"],
    "db.system": ["chroma", "pinecone", "qdrant", "postgresql"],
    "db.operation": ["query", "search", "insert"],
    "input.mime_type": ["application/json", "text/plain"],
    "output.mime_type": ["application/json", "text/plain"],
}
PLAIN_KEYS = [
    "rag.question",
    "rag.answer",
    "rag.case.id",
    "rag.expected.documents",
    "rag.expected.answer",
    "gen_ai.provider.name",
    "gen_ai.system",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.prompt_tokens",
    "gen_ai.usage.completion_tokens",
    "gen_ai.usage.total_tokens",
    "gen_ai.retrieval.query.text",
    "gen_ai.retrieval.documents",
    "gen_ai.data_source.id",
    "gen_ai.tool.name",
    "gen_ai.tool.call.id",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.conversation.id",
    "gen_ai.prompt",
    "gen_ai.completion",
    "gen_ai.task.input",
    "gen_ai.task.output",
    "input.value",
    "output.value",
    "llm.model_name",
    "llm.provider",
    "llm.system",
    "llm.invocation_parameters",
    "llm.token_count.prompt",
    "llm.token_count.completion",
    "llm.token_count.total",
    "llm.response.model_name",
    "llm.request.model_name",
    "llm.usage.total_tokens",
    "embedding.model_name",
    "reranker.model_name",
    "reranker.query",
    "tool.name",
    "tool.description",
    "gen_ai.tool.description",
    "session.id",
    "traceloop.entity.input",
    "traceloop.entity.output",
    "traceloop.association.properties.session_id",
    "db.system.name",
    "db.operation.name",
    "db.vector.query.top_k",
    "db.marqo.search.query",
    "langfuse.observation.input",
    "langfuse.observation.output",
    "langfuse.observation.usage_details",
    "langfuse.observation.model.name",
    "langfuse.trace.input",
    "langfuse.trace.output",
    "langfuse.session.id",
    "model",
]
FLAT_PREFIXES = [
    "retrieval.documents.",
    "reranker.input_documents.",
    "reranker.output_documents.",
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.choices.",
    "llm.prompts.",
    "gen_ai.prompt.",
    "gen_ai.completion.",
    "embedding.embeddings.",
]
FLAT_SUFFIXES = [
    "document.id",
    "document.content",
    "document.score",
    "document.distance",
    "document.metadata",
    "id",
    "score",
    "message.role",
    "message.content",
    "message.contents.0.message_content.text",
    "completion.text",
    "prompt.text",
    "role",
    "content",
    "embedding.text",
]
# Field names inside JSON payloads: documents, LlamaIndex nodes, messages, framework payloads.
FIELD_KEYS = [
    "id",
    "id_",
    "doc_id",
    "document.id",
    "content",
    "page_content",
    "text",
    "document",
    "document.content",
    "score",
    "relevance_score",
    "document.score",
    "distance",
    "document.distance",
    "metadata",
    "document.metadata",
    "source",
    "node",
    "documents",
    "nodes",
    "source_nodes",
    "results",
    "role",
    "type",
    "parts",
    "kwargs",
    "messages",
    "message",
    "choices",
    "generations",
    "query",
    "question",
    "input",
    "output",
    "answer",
    "args",
    "inputs",
    "outputs",
    "total",
    "db.query.result.id",
    "db.query.result.document",
    "db.query.result.score",
    "db.query.result.distance",
    "db.query.result.metadata",
]
EVENT_NAMES = [
    "db.query.result",
    "db.search.result",
    "gen_ai.choice",
    "gen_ai.user.message",
    "gen_ai.system.message",
    "gen_ai.assistant.message",
    "gen_ai.content.prompt",
    "gen_ai.content.completion",
    "gen_ai.evaluation.result",
    "exception",
]
EVENT_KEYS = [
    "body",
    "event.body",
    "message",
    "content",
    "gen_ai.event.content",
    "gen_ai.prompt",
    "gen_ai.completion",
    "db.query.result.id",
    "db.query.result.document",
    "db.query.result.score",
    "db.query.result.distance",
    "db.query.result.metadata",
    "db.search.result.id",
    "db.search.result.score",
    "db.search.result.distance",
    "db.search.result.entity",
    "id",
    "score",
    "distance",
    "document",
    "metadata",
]
SPAN_NAMES = [
    "chat gpt-4o",
    "openai.chat",
    "ChatCompletion",
    "retriever",
    "vector_db_retrieve",
    "rerank",
    "embeddings",
    "x.embedding",
    "RetrievalQA",
]
SPAN_IDS = ["a1", "b2", "c3", "d4", "e5", "f6"]

# --------------------------------------------------------------------------- value strategies

short_text = st.text(max_size=12)
special_text = st.sampled_from(
    ["", "__REDACTED__", "FILTERED", "null", "NaN", "1e400", "-0", "  [", "{", "'", "3.5", "42", "[]", "{}"]
)
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    # Python ints beyond any float: JSON text can hold them (`json_text` below writes them out).
    st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63), 2**64, 10**30, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, short_text, special_text)
field_keys = st.one_of(st.sampled_from(FIELD_KEYS), short_text)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(field_keys, children, max_size=4)
    ),
    max_leaves=8,
)
# Python literals (Pinecone metadata, OpenInference examples): tuples, non-string keys.
repr_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), short_text),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.tuples(children, children),
        st.dictionaries(st.one_of(field_keys, st.integers(), st.booleans()), children, max_size=3),
    ),
    max_leaves=6,
)


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


json_text = json_values.map(json.dumps)
values = st.one_of(
    json_values,
    json_text,
    json_text.map(json.dumps),  # double-encoded
    st.tuples(json_text, st.integers(0, 40)).map(lambda t: t[0][: t[1]]),  # truncated JSON
    repr_values.map(repr),
    st.tuples(st.integers(1, 30), scalars).map(lambda t: _nested(*t)),  # the collector allows 32 levels
    st.integers(1, 3000).map(lambda d: "[" * d + "]" * d),  # JSON text nested deeper than any value
)


# Well-formed pieces, so that scores, distances, ids and token counts really occur in the input
# (arbitrary values alone almost never make a document with a score).
numeric = st.one_of(
    st.integers(-1000, 10**6),
    st.floats(-1e6, 1e6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(0, 10**6).map(str),
    st.floats(-10, 10).map(str),
)
ids = st.one_of(
    st.text(min_size=1, max_size=8), st.integers(-5, 10**12), st.sampled_from(["", "__REDACTED__"])
)
metadata = st.dictionaries(
    st.sampled_from(["id", "source", "page", "score", "distance"]), st.one_of(ids, numeric)
)
doc_item = st.fixed_dictionaries(
    {},
    optional={
        "id": ids,
        "document.id": ids,
        "id_": ids,
        "doc_id": ids,
        "content": short_text,
        "page_content": short_text,
        "text": short_text,
        "score": numeric,
        "relevance_score": numeric,
        "document.score": numeric,
        "distance": numeric,
        "document.distance": numeric,
        "db.query.result.distance": numeric,
        "metadata": st.one_of(metadata, metadata.map(json.dumps)),
    },
)
node_item = st.fixed_dictionaries({"node": doc_item}, optional={"score": numeric})
doc_list = st.lists(st.one_of(doc_item, node_item, short_text, json_values), max_size=4)
doc_payload = st.one_of(
    doc_list,
    doc_list.map(lambda docs: {"documents": docs}),
    st.tuples(doc_list).map(lambda t: {"nodes": t[0]}),
)
# Tool results: document lists under the wrappers agents use, MCP `CallToolResult`s, object reprs.
mcp_block = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.one_of(short_text, doc_list.map(json.dumps))),
    st.builds(
        lambda uri, t: {"type": "resource", "resource": {"uri": uri, "text": t}}, short_text, short_text
    ),
    st.fixed_dictionaries({"type": short_text}),
)
tool_payload = st.one_of(
    st.tuples(st.sampled_from(["results", "hits", "chunks", "matches", "data"]), doc_list).map(
        lambda t: {t[0]: t[1]}
    ),
    st.fixed_dictionaries(
        {"content": st.lists(mcp_block, max_size=3)},
        optional={"isError": st.booleans(), "structuredContent": doc_payload},
    ),
    doc_list.map(lambda docs: repr(docs).replace("{", "Document(**{")),  # not a readable repr
    st.lists(st.tuples(short_text, short_text), max_size=3).map(
        lambda pairs: "[" + ", ".join(f"Document(id={i!r}, page_content={t!r})" for i, t in pairs) + "]"
    ),
)
doc_values = st.one_of(
    doc_payload,
    doc_payload.map(json.dumps),
    doc_payload.map(repr),
    tool_payload,
    tool_payload.map(lambda v: v if isinstance(v, str) else json.dumps(v)),
    values,
)
token_values = st.one_of(st.integers(-1, 10**6), st.integers(0, 10**6).map(str), values)
usage_values = st.one_of(
    st.dictionaries(st.sampled_from(["input", "output", "total"]), token_values).map(json.dumps), values
)
TOKEN_KEYS = {k for k in PLAIN_KEYS if "tokens" in k or "token_count" in k}
DOCUMENT_KEYS = {
    "gen_ai.retrieval.documents",
    "gen_ai.tool.call.result",
    "output.value",
    "traceloop.entity.output",
    "gen_ai.task.output",
    "gen_ai.completion",
    "langfuse.observation.output",
}


def _value_for(key: str) -> st.SearchStrategy[Any]:
    if key in KIND_VALUES:
        return st.one_of(st.sampled_from(KIND_VALUES[key]), values)
    if key in TOKEN_KEYS:
        return token_values
    if key == "langfuse.observation.usage_details":
        return usage_values
    if key in DOCUMENT_KEYS:
        return doc_values
    if key.endswith(("score", "distance")):
        return st.one_of(numeric, values)
    if key.endswith("id"):
        return st.one_of(ids, values)
    return values


def _pair(key: str) -> st.SearchStrategy[tuple[str, Any]]:
    return st.tuples(st.just(key), _value_for(key))


digit_like = st.text(alphabet=st.characters(categories=["Nd", "No"]), min_size=1, max_size=2)
flat_keys = st.builds(
    lambda prefix, index, suffix: f"{prefix}{index}.{suffix}",
    st.sampled_from(FLAT_PREFIXES),
    st.one_of(st.integers(0, 4).map(str), digit_like, short_text),
    st.sampled_from(FLAT_SUFFIXES),
)
attr_keys = st.one_of(
    st.sampled_from([*KIND_VALUES, *PLAIN_KEYS]), flat_keys, short_text, st.sampled_from(["rag.x", "llm.x"])
)
random_attributes = st.lists(attr_keys.flatmap(_pair), max_size=6).map(dict)
flat_doc = st.fixed_dictionaries(
    {},
    optional={
        "document.id": ids,
        "document.score": numeric,
        "document.distance": numeric,
        "document.content": short_text,
        "document.metadata": metadata.map(json.dumps),
        "score": numeric,
    },
)


def _flattened(prefix: str) -> st.SearchStrategy[dict[str, Any]]:
    """OpenInference's `prefix.<i>.document.*` keys for a list of documents."""
    return st.lists(flat_doc, max_size=4).map(
        lambda docs: {f"{prefix}{i}.{k}": v for i, doc in enumerate(docs) for k, v in doc.items()}
    )


def _with(fixed: dict[str, Any], **drawn: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({**{k: st.just(v) for k, v in fixed.items()}, **drawn})


# Spans shaped like each convention's retrieval, rerank, LLM and tool spans (then mixed with random keys).
templates = st.one_of(
    _with(
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_docs"},
        **{"gen_ai.tool.call.result": doc_values, "gen_ai.tool.call.arguments": values},
    ),
    _with({"openinference.span.kind": "TOOL", "tool.name": "kb_lookup"}, **{"output.value": doc_values}),
    _with(
        {"traceloop.span.kind": "tool", "traceloop.entity.name": "query_kb"},
        **{"traceloop.entity.output": doc_values},
    ),
    _with({"gen_ai.operation.name": "retrieval"}, **{"gen_ai.retrieval.documents": doc_values}),
    st.tuples(_with({"openinference.span.kind": "RETRIEVER"}), _flattened("retrieval.documents.")),
    st.tuples(
        _with({"openinference.span.kind": "RERANKER"}),
        _flattened("reranker.input_documents."),
        _flattened("reranker.output_documents."),
    ),
    _with({"langsmith.span.kind": "retriever"}, **{"gen_ai.completion": doc_values}),
    _with({"db.system": "chroma", "db.operation": "query"}),
    _with(
        {"gen_ai.operation.name": "chat"},
        **{"gen_ai.usage.input_tokens": token_values, "gen_ai.usage.output_tokens": token_values},
    ),
    _with(
        {"openinference.span.kind": "LLM"},
        **{
            "llm.token_count.prompt": token_values,
            "llm.token_count.completion": token_values,
            "llm.token_count.total": token_values,
        },
    ),
    _with(
        {"langfuse.observation.type": "generation"}, **{"langfuse.observation.usage_details": usage_values}
    ),
)


def _merge(parts: Any) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for part in parts if isinstance(parts, tuple) else (parts,):
        merged.update(part)
    return merged


attributes = st.one_of(
    random_attributes,
    st.tuples(random_attributes, templates.map(_merge)).map(lambda t: {**t[0], **t[1]}),
)
result_event = st.builds(
    EventRecord,
    name=st.sampled_from(["db.query.result", "db.search.result"]),
    time_us=st.one_of(st.none(), st.integers(0, 2**62)),
    attributes=st.fixed_dictionaries(
        {},
        optional={
            "db.query.result.id": ids,
            "db.query.result.score": numeric,
            "db.query.result.distance": numeric,
            "db.query.result.document": short_text,
            "db.query.result.metadata": metadata.map(json.dumps),
            "db.search.result.id": ids,
            "db.search.result.distance": numeric,
        },
    ),
)
event_attributes = st.lists(
    st.one_of(st.sampled_from(EVENT_KEYS), short_text).flatmap(_pair), max_size=5
).map(dict)
events = st.one_of(
    st.builds(
        EventRecord,
        name=st.one_of(st.sampled_from(EVENT_NAMES), short_text),
        time_us=st.one_of(st.none(), st.integers(0, 2**62)),
        attributes=event_attributes,
    ),
    result_event,
)
times = st.one_of(st.none(), st.integers(0, 2**62))
spans = st.builds(
    SpanRecord,
    trace_id=st.just(TRACE_ID),
    span_id=st.sampled_from(SPAN_IDS),
    parent_span_id=st.one_of(st.none(), st.sampled_from([*SPAN_IDS, "missing", ""])),
    name=st.one_of(st.sampled_from(SPAN_NAMES), short_text),
    kind=st.sampled_from(["INTERNAL", "CLIENT", "SERVER"]),
    start_us=times,
    end_us=times,
    status_code=st.sampled_from(["UNSET", "OK", "ERROR"]),
    attributes=attributes,
    service_name=st.one_of(st.none(), short_text),
    events=st.lists(events, max_size=2),
)
traces = st.lists(spans, min_size=1, max_size=6)
