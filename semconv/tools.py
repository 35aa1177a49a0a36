"""Tool calls: which tool a span calls, with which arguments and result, and when the call is a
retrieval (docs/conventions.md, "Agents and tools").

Retrieval through tools is how most agents find their documents: the OpenAI Agents SDK's function and
file-search tools, LangGraph and LlamaIndex agents with retriever or query-engine tools, DSPy and
smolagents tools, MCP servers. A tool call is a retrieval when the configuration names the tool
(`mapping.retrieval_tools`), or when its name or description says it searches and its result reads
as documents (`mapping.detect_retrieval_tools`). The result is read strictly for the detector (a
weather report, a number or an error message is not a document list) and leniently for a tool the
configuration names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Any

from semconv.documents import document, documents
from semconv.mappers.text_fields import question_text
from semconv.models import Document, SpanRecord
from semconv.options import MappingOptions
from semconv.reprs import parse_repr
from semconv.values import Attributes, as_list, first_key, lower, parse_structured, text, unflatten

NAME_KEYS = ("gen_ai.tool.name", "tool.name", "tool_call.function.name")
DESCRIPTION_KEYS = ("gen_ai.tool.description", "tool.description")
# Where each convention puts a call's arguments and its result (first present wins).
ARGUMENT_KEYS = (
    "gen_ai.tool.call.arguments",
    "input.value",
    "traceloop.entity.input",
    "gen_ai.task.input",
    "langfuse.observation.input",
    "tool_call.function.arguments",
)
RESULT_KEYS = (
    "gen_ai.tool.call.result",
    "output.value",
    "traceloop.entity.output",
    "gen_ai.task.output",
    "langfuse.observation.output",
)
# A tool whose name or description holds one of these searches for something.
RETRIEVAL_HINT = re.compile(r"search|retriev|look_?up|look up|query|knowledge", re.IGNORECASE)
# Objects that hold a document list under one key (`{"results": [...]}`, OpenAI's vector-store
# search `{"data": [...]}`, Elasticsearch `{"hits": {"hits": [...]}}`, Pinecone `{"matches": [...]}`,
# LlamaIndex's `ToolOutput` with the function's own return value in `raw_output`).
LIST_KEYS = (
    "raw_output",
    "results",
    "documents",
    "hits",
    "chunks",
    "matches",
    "nodes",
    "source_nodes",
    "data",
    "items",
)
# A result object that says the call failed (MCP `isError`, LlamaIndex `is_error`) holds no documents.
ERROR_FLAGS = ("isError", "is_error")
_EXECUTE_TOOL = re.compile(r"^execute_tool\s+(\S.*)$")
# A span named for the method that ran the tool (DSPy: `search_docs.__call__`, `search_docs.acall`).
_METHOD_SUFFIX = re.compile(r"\.(?:__call__|a?call|a?run|a?invoke|a?forward)$")


def tool_name(span: SpanRecord) -> str | None:
    """The tool a span calls: `gen_ai.tool.name`, OpenInference's `tool.name`, else the name in
    `execute_tool <name>`, else Traceloop's entity name on its tool spans, else the span name
    without the method that ran it (`search_docs.__call__` -> `search_docs`)."""
    attrs = span.attributes
    for key in NAME_KEYS:
        found = text(attrs.get(key))
        if found:
            return found
    matched = _EXECUTE_TOOL.match(span.name or "")
    if matched:
        return matched.group(1).strip()
    return text(attrs.get("traceloop.entity.name")) or (_METHOD_SUFFIX.sub("", span.name) or None)


def is_tool_call(attrs: Mapping[str, Any]) -> bool:
    """Whether a span says it is a tool call, in any convention (for a span typed otherwise by
    `rag.step`)."""
    if any(key in attrs for key in NAME_KEYS):
        return True
    return (
        lower(attrs.get("gen_ai.operation.name")) == "execute_tool"
        or lower(attrs.get("openinference.span.kind")) == "tool"
        or lower(attrs.get("traceloop.span.kind")) == "tool"
        or lower(attrs.get("langfuse.observation.type")) == "tool"
        or lower(attrs.get("langsmith.span.kind")) == "tool"
    )


TOOL_CALL_FINISH = frozenset({"tool_calls", "tool_call", "function_call"})
# Flattened output messages (prefix) whose items hold tool calls under `marker`.
_TOOL_CALL_KEYS = (("llm.output_messages.", "message.tool_calls."), ("gen_ai.completion.", "tool_calls."))


def requests_tool_call(attrs: Mapping[str, Any]) -> bool:
    """Whether an LLM span's output asks for a tool call (its text, if any, is then not the final
    answer): a `tool_call` part in `gen_ai.output.messages`, OpenInference's
    `llm.output_messages.<i>.message.tool_calls.*`, OpenLLMetry's `gen_ai.completion.<i>.tool_calls.*`,
    or a `tool_calls` finish reason."""
    for message in as_list(attrs.get("gen_ai.output.messages")) or []:
        parts = message.get("parts") if isinstance(message, Mapping) else None
        if isinstance(parts, list) and any(
            isinstance(p, Mapping) and p.get("type") in ("tool_call", "function_call") for p in parts
        ):
            return True
    if isinstance(attrs, Attributes):
        for prefix, marker in _TOOL_CALL_KEYS:
            # The last output message: a hosted tool's call comes before its result and the answer.
            items = attrs.flattened(prefix) or {}
            if items and any(suffix.startswith(marker) for suffix in items[max(items)]):
                return True
    reasons = attrs.get("gen_ai.response.finish_reasons")
    listed = reasons if isinstance(reasons, list) else as_list(reasons) or ([reasons] if reasons else [])
    listed = [*listed, attrs.get("llm.finish_reason")]  # OpenInference (LlamaIndex)
    return any(lower(r) in TOOL_CALL_FINISH for r in listed)


def tool_description(attrs: Mapping[str, Any]) -> str | None:
    for key in DESCRIPTION_KEYS:
        found = text(attrs.get(key))
        if found:
            return found
    return None


def arguments(attrs: Mapping[str, Any]) -> Any:
    """The call's arguments as recorded (JSON text or a structure)."""
    return first_key(attrs, ARGUMENT_KEYS)


def result(attrs: Mapping[str, Any]) -> Any:
    """The call's result as recorded (JSON text, a repr, plain text or a structure)."""
    found = first_key(attrs, RESULT_KEYS)
    if found is None and lower(attrs.get("langsmith.span.kind")) == "tool":
        found = attrs.get("gen_ai.completion")
    return found


def query(arguments_value: Any) -> str | None:
    """The retrieval query in a tool's arguments (`{"query": ...}`, `{"q": ...}`, the only
    argument, a list of queries joined by newlines, or plain text)."""
    parsed = parse_structured(arguments_value)
    if isinstance(parsed, Mapping) and isinstance(parsed.get("kwargs"), Mapping) and parsed["kwargs"]:
        parsed = parsed["kwargs"]  # a Python call recorded as `{"args": [...], "kwargs": {...}}`
    if isinstance(parsed, Mapping):
        for key in ("queries", "search_queries"):
            listed = parsed.get(key)
            if isinstance(listed, list) and listed and all(isinstance(q, str) for q in listed):
                return "\n".join(listed)
    return text(question_text(parsed))


def is_named_retrieval(name: str | None, options: MappingOptions) -> bool:
    """Whether `mapping.retrieval_tools` names this tool (names or globs, case-sensitive)."""
    return name is not None and any(fnmatchcase(name, pattern) for pattern in options.retrieval_tools)


def says_retrieval(name: str | None, description: str | None) -> bool:
    """The detector's first half: the tool's name or description says it searches."""
    return bool(
        (name and RETRIEVAL_HINT.search(name)) or (description and RETRIEVAL_HINT.search(description))
    )


def result_documents(value: Any, strict: bool = True) -> list[Document] | None:
    """The documents in a tool's result, in the result's order; None when it is not a document list.

    Strict (the detector): a list (or an object wrapping one under `results`, `documents`, `hits`,
    `chunks`, `matches`, ... or an MCP `CallToolResult`) whose every item is a text or an object
    with a document's text, at least one non-empty. Lenient (a tool the configuration names): any
    document list the retrieval readers accept, and plain text as one document."""
    parsed = _parsed(value)
    found = _document_list(parsed, strict, depth=0)
    if found is not None or strict:
        return found
    if isinstance(parsed, str) and parsed.strip():
        return [Document(rank=1, content=parsed)]
    return documents(parsed) or None


def _parsed(value: Any) -> Any:
    parsed = parse_structured(value)
    if isinstance(parsed, str):
        objects = parse_repr(parsed)  # `[Document(id='x', page_content='...')]`
        if objects is not None:
            return objects
    return parsed


def _document_list(value: Any, strict: bool, depth: int) -> list[Document] | None:
    if depth > 3:
        return None
    if isinstance(value, Mapping):
        if any(value.get(flag) is True for flag in ERROR_FLAGS):
            return None
        message = _tool_message(value)
        if message is not None:
            return _tool_message_documents(message, strict, depth)
        if _is_mcp_result(value):
            return _mcp_documents(value, strict, depth)
        for key in LIST_KEYS:
            if key in value:
                return _document_list(_parsed(value[key]), strict, depth + 1)
        return None
    if not isinstance(value, list | tuple) or not value:
        return None
    docs: list[Document] = []
    for item in value:
        doc = document(item, len(docs) + 1)
        if doc is None or (strict and not _has_text(doc)):
            if strict:
                return None
            continue
        docs.append(doc)
    if not docs or not any(_has_text(d) for d in docs):
        return None
    return docs


def _has_text(doc: Document) -> bool:
    return doc.content is not None and bool(doc.content.strip())


# -- LangChain's ToolMessage ------------------------------------------------------------------------


def _tool_message(value: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The fields of a serialized LangChain `ToolMessage` (what OpenInference records as a LangChain
    tool's output): `{"type": "tool", "data": {...}}`, or `{"lc": 1, "id": [..., "ToolMessage"],
    "kwargs": {...}}`; None for anything else."""
    data = value.get("data")
    if value.get("type") == "tool" and isinstance(data, Mapping):
        return data
    kwargs, ids = value.get("kwargs"), value.get("id")
    if isinstance(kwargs, Mapping) and isinstance(ids, list) and ids and ids[-1] == "ToolMessage":
        return kwargs
    return None


def _tool_message_documents(message: Mapping[str, Any], strict: bool, depth: int) -> list[Document] | None:
    """A tool message's documents: its `artifact` (a retriever tool's documents, with their ids),
    else its `content` (the tool's return value as JSON text or a repr). A failed call has none."""
    if message.get("status") == "error":
        return None
    for field in ("artifact", "content"):
        found = _document_list(_parsed(message.get(field)), strict, depth + 1)
        if found is not None:
            return found
    return None


# -- MCP ---------------------------------------------------------------------------------------------


def _is_mcp_result(value: Mapping[str, Any]) -> bool:
    """An MCP `CallToolResult`: `content` is a list of typed blocks."""
    content = value.get("content")
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(b, Mapping) and isinstance(b.get("type"), str) for b in content)
    )


def _mcp_documents(value: Mapping[str, Any], strict: bool, depth: int) -> list[Document] | None:
    """Documents of an MCP tool result: its `structuredContent` when that is a document list, else
    one document per content block (a text block whose text is itself a document list gives that
    list; a resource block gives its text with its URI as the id)."""
    structured = value.get("structuredContent")
    if structured is not None:
        found = _document_list(_parsed(structured), strict, depth + 1)
        if found is not None:
            return found
    docs: list[Document] = []
    for block in value["content"]:
        kind = block.get("type")
        if kind == "text":
            inner = _document_list(_parsed(block.get("text")), strict, depth + 1)
            if inner is not None:
                docs.extend(inner)
            elif text(block.get("text")):
                docs.append(Document(rank=1, content=text(block.get("text"))))
        elif kind == "resource" and isinstance(block.get("resource"), Mapping):
            resource = block["resource"]
            content = text(resource.get("text"))
            if content:
                docs.append(Document(rank=1, id=text(resource.get("uri")), content=content))
    for rank, doc in enumerate(docs, start=1):
        doc.rank = rank
    return docs or None


# -- hosted tools ----------------------------------------------------------------------------------


HostedCall = tuple[str | None, Any, Any]  # (tool name, arguments, result)


def hosted_calls(attrs: Mapping[str, Any]) -> list[HostedCall]:
    """Tool calls the model ran itself (hosted tools: OpenAI's file search) inside one LLM span's
    output, each paired with its result by call id: OpenInference's output messages (an assistant
    message's `tool_calls`, then a `tool` message with its `tool_call_id`), or GenAI output parts
    (`server_tool_call` / `tool_call` with a `*_response` part of the same id)."""
    # Most LLM spans have one output message and no result part: one look each, no copies.
    indexed = attrs.flattened("llm.output_messages.") if isinstance(attrs, Attributes) else None
    if indexed is not None and len(indexed) > 1:  # a call and its result are two messages at least
        return _openinference_hosted(unflatten(attrs, "llm.output_messages."))
    raw = attrs.get("gen_ai.output.messages")
    if raw is None or (isinstance(raw, str) and "_response" not in raw):
        return []
    return _genai_hosted(raw)


def _openinference_hosted(messages: list[dict[str, Any]]) -> list[HostedCall]:
    calls: dict[str, tuple[str | None, Any]] = {}
    found: list[HostedCall] = []
    for message in messages:
        for call in unflatten(message, "message.tool_calls."):
            call_id = text(call.get("tool_call.id"))
            if call_id:
                calls[call_id] = (
                    text(call.get("tool_call.function.name")),
                    call.get("tool_call.function.arguments"),
                )
        call_id = text(message.get("message.tool_call_id"))
        if lower(message.get("message.role")) == "tool" and call_id in calls:
            name, arguments = calls[call_id]
            found.append((name, arguments, message.get("message.content")))
    return found


_RESPONSE_PARTS = {
    "tool_call_response": ("response", "result"),
    "server_tool_call_response": ("server_tool_call_response",),
}


def _genai_hosted(raw: Any) -> list[HostedCall]:
    calls: dict[str, tuple[str | None, Any]] = {}
    found: list[HostedCall] = []
    for message in as_list(raw) or []:
        parts = message.get("parts") if isinstance(message, Mapping) else None
        for part in parts if isinstance(parts, list) else []:
            if not isinstance(part, Mapping):
                continue
            kind, call_id = part.get("type"), text(part.get("id"))
            if kind in ("tool_call", "server_tool_call") and call_id:
                calls[call_id] = (text(part.get("name")), part.get("arguments", part.get("server_tool_call")))
            elif kind in _RESPONSE_PARTS and call_id in calls:
                result = next((part[k] for k in _RESPONSE_PARTS[kind] if k in part), None)
                found.append((*calls[call_id], result))
    return found
