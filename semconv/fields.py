"""The fields of one step read from its span, whatever the convention: model, provider, token
counts, the retrieval's query and documents, an LLM call's input and output, any span's input and
output (docs/conventions.md, "How fields are read"). Pure logic; the mapping (`mapping.py`)
composes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from semconv.documents import fill_ids
from semconv.mappers import genai, langfuse, langsmith, openinference, openllmetry
from semconv.models import Document, SpanRecord
from semconv.values import first_key, integer, is_absent, lower, text

T = TypeVar("T")

NOT_PROVIDERS = frozenset({"langchain", "langgraph"})  # framework names set on chain spans

MODEL_KEYS = (
    "gen_ai.response.model",
    "llm.response.model_name",
    "llm.model_name",
    "gen_ai.request.model",
    "llm.request.model_name",
    "langfuse.observation.model.name",
)
PROVIDER_KEYS = ("gen_ai.provider.name", "llm.provider", "gen_ai.system", "llm.system")
INPUT_TOKEN_KEYS = ("gen_ai.usage.input_tokens", "llm.token_count.prompt", "gen_ai.usage.prompt_tokens")
OUTPUT_TOKEN_KEYS = (
    "gen_ai.usage.output_tokens",
    "llm.token_count.completion",
    "gen_ai.usage.completion_tokens",
)
TOTAL_TOKEN_KEYS = ("llm.token_count.total", "gen_ai.usage.total_tokens", "llm.usage.total_tokens")
TOKEN_EVIDENCE = (*INPUT_TOKEN_KEYS, *OUTPUT_TOKEN_KEYS)


def _first(*candidates: Callable[[], Any]) -> Any:
    for candidate in candidates:
        value = candidate()
        if not is_absent(value) and value != []:
            return value
    return None


def first_of(items: Iterable[T], read: Callable[[T], Any]) -> Any:
    """The first non-empty value `read` gives over `items`, in order."""
    for item in items:
        value = read(item)
        if not is_absent(value) and value != []:
            return value
    return None


def model(attrs: dict[str, Any], kind: str) -> str | None:
    found = first_key(attrs, MODEL_KEYS)
    if found is None and kind == "embedding":
        found = attrs.get("embedding.model_name")
    if found is None and kind == "rerank":
        found = attrs.get("reranker.model_name")
    if found is None:
        params = openinference.invocation_parameters(attrs)
        found = params.get("model") if params else None
    return text(found)


def provider(attrs: dict[str, Any]) -> str | None:
    for key in PROVIDER_KEYS:
        value = lower(attrs.get(key))
        if value and value not in NOT_PROVIDERS:
            return value
    return None


MAX_TOKENS = 2**40  # larger (or negative) counts are garbage, and their sums would overflow BIGINT


def _token_count(value: Any) -> int | None:
    count = integer(value)
    return count if count is not None and 0 <= count < MAX_TOKENS else None


def tokens(attrs: dict[str, Any]) -> tuple[int | None, int | None, int | None]:
    """(input, output, total) tokens of one span."""
    input_tokens = _token_count(first_key(attrs, INPUT_TOKEN_KEYS))
    if input_tokens is None:
        input_tokens = _token_count(langfuse.usage(attrs, "input"))
    output_tokens = _token_count(first_key(attrs, OUTPUT_TOKEN_KEYS))
    if output_tokens is None:
        output_tokens = _token_count(langfuse.usage(attrs, "output"))
    total = _token_count(first_key(attrs, TOTAL_TOKEN_KEYS))
    if total is None:
        total = _token_count(langfuse.usage(attrs, "total"))
    if total is None and input_tokens is not None and output_tokens is not None:
        total = input_tokens + output_tokens
    return input_tokens, output_tokens, total


# The readers below try their sources in order with plain statements, not `_first(lambda ...)`:
# they run for every span, and a closure per source (built whether it is tried or not) and a call
# through it cost about a tenth of the mapping.


def retrieval_query(span: SpanRecord) -> str | None:
    a = span.attributes
    found = genai.retrieval_query(a)
    if is_absent(found):
        found = openinference.retrieval_query(a)
    if is_absent(found):
        found = openllmetry.retrieval_query(a)
    if is_absent(found):
        found = langsmith.retrieval_query(a)
    if is_absent(found):
        found = langfuse.retrieval_query(a)
    if is_absent(found):
        found = text(a.get("reranker.query"))
    if is_absent(found):
        found = text(a.get("db.marqo.search.query"))
    return text(found)


def retrieval_documents(span: SpanRecord, kind: str) -> tuple[list[Document], list[Document]]:
    """(documents in rank order, rerank input documents) of one span."""
    a = span.attributes
    input_docs: list[Document] = []
    if kind == "rerank":
        input_docs = openinference.reranker_documents(a, "input")
    found = genai.retrieval_documents(a)
    if not found:
        found = openinference.retrieval_documents(a)
    if not found and kind == "rerank":
        found = openinference.reranker_documents(a, "output")
    if not found:
        found = openllmetry.entity_documents(a)
    if not found:
        found = openllmetry.event_documents(span.events)
    if not found:
        found = langsmith.completion_documents(a)
    if not found:
        found = langfuse.output_documents(a)
    if not found:
        found = openinference.output_documents(a)
    if all(d.id is not None for d in found):
        return found, input_docs
    output_docs = openinference.output_documents(a) or langsmith.completion_documents(a)
    return fill_ids(found, output_docs), input_docs


def llm_output(span: SpanRecord) -> str | None:
    a = span.attributes
    found = genai.llm_output(a)
    if is_absent(found):
        found = openinference.llm_output(a)
    if is_absent(found):
        found = openllmetry.llm_output(a)
    if is_absent(found):
        found = genai.event_output(span.events)
    if is_absent(found) and langsmith.SPAN_KIND in a:
        found = langsmith.llm_output(a)
    if is_absent(found):
        found = langfuse.llm_output(a)
    if is_absent(found):
        found = openinference.llm_output_value(a)
    return text(found)


def llm_input(span: SpanRecord) -> str | None:
    a = span.attributes
    found = genai.llm_input(a)
    if is_absent(found):
        found = openinference.llm_input(a)
    if is_absent(found):
        found = openllmetry.llm_input(a)
    if is_absent(found):
        found = genai.event_input(span.events)
    if is_absent(found):
        found = langsmith.llm_input(a)
    if is_absent(found):
        found = langfuse.llm_input(a)
    if is_absent(found):
        found = text(a.get("input.value"))
    return text(found)


def first_user_message(span: SpanRecord) -> str | None:
    a = span.attributes
    return text(
        _first(
            lambda: genai.first_user_message(a),
            lambda: openinference.first_user_message(a),
            lambda: openllmetry.first_user_message(a),
            lambda: genai.event_first_user_message(span.events),
        )
    )


def generic_input(span: SpanRecord) -> str | None:
    a = span.attributes
    return text(
        _first(
            lambda: a.get("input.value"),
            lambda: openllmetry.entity_input(a),
            lambda: langfuse.observation_input(a),
            lambda: a.get("gen_ai.tool.call.arguments"),
            lambda: a.get("gen_ai.prompt") if langsmith.SPAN_KIND in a else None,
        )
    )


def generic_output(span: SpanRecord) -> str | None:
    a = span.attributes
    return text(
        _first(
            lambda: a.get("output.value"),
            lambda: openllmetry.entity_output(a),
            lambda: langfuse.observation_output(a),
            lambda: a.get("gen_ai.tool.call.result"),
            lambda: a.get("gen_ai.completion") if langsmith.SPAN_KIND in a else None,
        )
    )
