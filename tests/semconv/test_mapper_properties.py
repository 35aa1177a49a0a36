"""Properties of `semconv.map_trace` on arbitrary input: it never fails, and its output keeps its promises.

Attribute keys are drawn from the keys the mappers really read (plus flattened `prefix.<i>.suffix`
keys and random ones); values are any JSON value, JSON text (valid, truncated, double-encoded),
Python reprs, huge and non-finite numbers and deeply nested lists. Span trees are arbitrary: parent
cycles, self-parents, duplicate span ids and missing parents. Inputs found to break the mapper are
kept below as plain regression cases.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from semconv import STEP_KINDS, EventRecord, RagTrace, SpanRecord, Step, map_trace
from tests.support.span_strategies import TRACE_ID, traces

CONVENTIONS = {"openinference", "genai", "openllmetry", "langsmith", "langfuse", "ragpulse", "unknown"}

# --------------------------------------------------------------------------- what the input holds

_NOTHING = object()


def _parse(text: str) -> Any:
    """JSON or a Python literal inside a string, as any reader might find it; _NOTHING if neither."""
    stripped = text.strip()
    if not stripped or not (stripped[0] in "[{\"'(" or stripped[0].isalpha()):
        return _NOTHING
    for parse in (json.loads, ast.literal_eval, _repr_constants):
        try:
            return parse(stripped)
        except Exception:  # any failure means 'not this format'; RecursionError included
            continue
    return _NOTHING


def _repr_constants(text: str) -> list[Any]:
    """Every literal in an object repr (`[Document(id='a', ...)]`), found by Python's own parser."""
    tree = ast.parse(text, mode="eval")
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        result = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return result if math.isfinite(result) else None


class _Found:
    """Every string and number in the input (walking into JSON / repr text), and every number
    recorded under a key that names a score."""

    def __init__(self) -> None:
        self.atoms: set[str] = set()
        self.scores: set[float] = set()

    def walk(self, value: Any, depth: int = 0) -> None:
        if depth > 200:
            return
        if isinstance(value, str):
            self.atoms.add(value)
            parsed = _parse(value)
            if parsed is not _NOTHING:
                self.walk(parsed, depth + 1)
        elif isinstance(value, bool | int | float):
            self.atoms.add(str(value))
        elif isinstance(value, Mapping):
            for key, item in value.items():
                if isinstance(key, str) and key.endswith("score"):
                    score = _number(item)
                    if score is not None:
                        self.scores.add(score)
                self.walk(item, depth + 1)
        elif isinstance(value, list | tuple | set | frozenset):
            for item in value:
                self.walk(item, depth + 1)


def _found(trace_spans: list[SpanRecord]) -> _Found:
    found = _Found()
    for span in trace_spans:
        found.walk(span.attributes)
        for event in span.events:
            found.walk(event.attributes)
    return found


def _map(trace_spans: list[SpanRecord]) -> RagTrace:
    trace = map_trace(trace_spans)
    assert isinstance(trace, RagTrace)
    return trace


# --------------------------------------------------------------------------- properties

PROPERTY_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


def _one(attributes: dict[str, Any], **fields: Any) -> list[SpanRecord]:
    return [SpanRecord(trace_id=TRACE_ID, span_id="a1", attributes=attributes, **fields)]


@PROPERTY_SETTINGS
@given(traces)
@example(_one({"gen_ai.retrieval.documents": "[" * 3000 + "]" * 3000}))
@example(_one({"gen_ai.operation.name": "chat", "gen_ai.output.messages": [{"parts": 5}]}))
@example(_one({"retrieval.documents.\u00b2.document.id": "a"}))
@example(_one({"langfuse.observation.usage_details": '{"input": 1' + "0" * 400 + "}"}))
@example(_one({"gen_ai.retrieval.documents": "[{'id': 'a', 'metadata': {1: 'x'}}]"}))
@example(_one({"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": "[{0: None}]"}))
def test_map_trace_never_fails(trace_spans: list[SpanRecord]) -> None:
    trace = _map(trace_spans)
    assert trace.mapping_error is None


@PROPERTY_SETTINGS
@given(traces)
@example(_one({"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": '[{"id": {"x": 1}}]'}))
@example(_one({"retrieval.documents.0.document.distance": 0.25, "retrieval.documents.0.document.id": "d"}))
def test_mapped_trace_keeps_its_invariants(trace_spans: list[SpanRecord]) -> None:
    trace = _map(trace_spans)
    assume(trace.mapping_error is None)  # failures to map are test_map_trace_never_fails' business
    input_ids = {s.span_id for s in trace_spans}
    found = _found(trace_spans)

    assert trace.trace_id == TRACE_ID
    assert trace.span_count == len(input_ids)
    assert trace.root_span_id in input_ids
    assert trace.convention in CONVENTIONS
    assert [s.position for s in trace.steps] == list(range(len(trace.steps)))
    assert [(s.start_us or 0, s.span_id) for s in trace.steps] == sorted(
        (s.start_us or 0, s.span_id) for s in trace.steps
    )

    # A search the model ran itself (a hosted tool) is a retrieval step sharing its LLM step's span,
    # just before it; no other span is in two steps.
    llm_spans = {s.span_id for s in trace.steps if s.kind == "llm"}
    hosted = [s for s in trace.steps if s.kind == "retrieval" and s.tool_name and s.span_id in llm_spans]
    for step in hosted:
        following = trace.steps[step.position + 1 :]
        assert any(s.kind == "llm" and s.span_id == step.span_id for s in following)
    step_spans = [span_id for s in trace.steps if s not in hosted for span_id in s.span_ids]
    assert len(step_spans) == len(set(step_spans)), "a span is in two steps"
    assert set(step_spans) <= input_ids
    for step in trace.steps:
        assert step.kind in STEP_KINDS
        assert step.span_id in step.span_ids
        # Steps and documents are built without validation: each must be what validation makes of it.
        validated = Step.model_validate(step.model_dump())
        assert validated == step
        assert {k: type(v) for k, v in validated} == {k: type(v) for k, v in step}
        for docs in (step.documents, step.input_documents):
            assert [d.rank for d in docs] == list(range(1, len(docs) + 1))
            for doc in docs:
                assert doc.id is None or doc.id in found.atoms, f"document id {doc.id!r} is not in the input"
                assert doc.score is None or doc.score in found.scores, (
                    f"score {doc.score} not from a score key"
                )
        if step.kind not in ("llm", "embedding"):
            assert (step.input_tokens, step.output_tokens, step.total_tokens) == (None, None, None)

    llms = trace.steps_of("llm")
    for field in ("input_tokens", "output_tokens"):
        counts = [getattr(s, field) for s in llms if getattr(s, field) is not None]
        assert getattr(trace, field) == (sum(counts) if counts else None)
    if not any(s.kind in ("retrieval", "rerank", "llm", "embedding") for s in trace.steps):
        assert trace.convention == "unknown"
    # The agent counts are counts of the steps they name.
    assert trace.tool_calls == sum(1 for s in trace.steps if s.tool_name is not None)
    assert trace.retrieval_rounds == len(trace.steps_of("retrieval"))
    called = [s for s in llms if s.output or s.input_tokens is not None or s.output_tokens is not None]
    assert trace.llm_calls == len(called)
    for step in trace.steps:
        assert step.tool_name is None or step.kind in ("tool", "retrieval")
        assert step.result_size is None or step.result_size >= 0


# --------------------------------------------------------------------------- regressions

# Inputs the properties above found to break the mapper, kept as plain cases so each one fails
# (or passes) on its own. Every one is reachable from the wire: string attributes carry JSON text.
REGRESSIONS = [
    pytest.param(
        {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": "[" * 3000 + "]" * 3000},
        id="json-text-nested-3000-deep",
    ),
    pytest.param(
        {"gen_ai.operation.name": "chat", "gen_ai.output.messages": '[{"role": "assistant", "parts": 5}]'},
        id="message-parts-not-a-list",
    ),
    pytest.param(
        {"openinference.span.kind": "RETRIEVER", "retrieval.documents.\u00b2.document.id": "a"},
        id="flattened-index-superscript-digit",
    ),
    pytest.param(
        {
            "langfuse.observation.type": "generation",
            "langfuse.observation.usage_details": '{"input": 1' + "0" * 400 + "}",
        },
        id="usage-integer-beyond-float-range",
    ),
    pytest.param(
        {
            "gen_ai.operation.name": "retrieval",
            "gen_ai.retrieval.documents": '[{"id": "a", "score": 1' + "0" * 400 + "}]",
        },
        id="document-score-integer-beyond-float-range",
    ),
    pytest.param(
        {
            "gen_ai.operation.name": "retrieval",
            "gen_ai.retrieval.documents": "[{'id': 'a', 'metadata': {1: 'x'}}]",
        },
        id="repr-metadata-with-integer-keys",
    ),
]


@pytest.mark.parametrize("attributes", REGRESSIONS)
def test_mapper_survives(attributes: dict[str, Any]) -> None:
    trace = _map(_one(attributes, name="step", start_us=1, end_us=2))
    assert trace.mapping_error is None
    assert trace.span_count == 1 and len(trace.steps) == 1


def test_structured_document_id_is_not_turned_into_an_id() -> None:
    # `{"id": {...}}` is not an id: its JSON text must not become one.
    trace = _map(
        _one(
            {
                "gen_ai.operation.name": "retrieval",
                "gen_ai.retrieval.documents": '[{"id": {"x": 1}, "content": "c"}]',
            }
        )
    )
    (doc,) = trace.steps[0].documents
    assert doc.content == "c"
    assert doc.id is None


# --------------------------------------------------------------------------- ids from a vector database below

_CHUNK_TEXTS = st.sampled_from(["alpha", "beta", "gamma", "delta", "epsilon"])


@settings(max_examples=300, deadline=None)
@given(
    hits=st.lists(
        st.tuples(st.sampled_from([f"db-{i}" for i in range(8)]), _CHUNK_TEXTS),
        max_size=8,
        unique_by=lambda hit: hit[0],
    ),
    returned=st.lists(_CHUNK_TEXTS, min_size=1, max_size=6),
)
def test_database_ids_are_taken_by_text_whatever_the_order(
    hits: list[tuple[str, str]], returned: list[str]
) -> None:
    """A retriever's documents without ids (OpenLLMetry's LangChain output) take the ids of the
    vector-database results below them with the same text, whatever the order and count of either
    list. A text returned under several ids hands them out in the database's order, the last one
    repeating; a text the database did not return keeps the metadata `source` fallback."""
    output = {"documents": [{"page_content": text, "metadata": {"source": "file.md"}} for text in returned]}
    retriever = SpanRecord(
        trace_id=TRACE_ID,
        span_id="r",
        name="vector_db_retrieve VectorStoreRetriever",
        start_us=1,
        end_us=10,
        attributes={
            "gen_ai.operation.name": "vector_db_retrieve",
            "traceloop.entity.output": json.dumps(output),
        },
    )
    results = [
        EventRecord("db.query.result", 3, {"db.query.result.id": hit_id, "db.query.result.document": text})
        for hit_id, text in hits
    ]
    database = SpanRecord(
        trace_id=TRACE_ID,
        span_id="c",
        parent_span_id="r",
        name="chroma.query",
        start_us=2,
        end_us=9,
        attributes={"db.system": "chroma", "db.operation": "query"},
        events=results,
    )
    (step,) = _map([retriever, database]).steps
    assert [d.content for d in step.documents] == returned
    ids_of: dict[str, list[str]] = {}
    for hit_id, text in hits:
        ids_of.setdefault(text, []).append(hit_id)
    for text in set(returned):
        given_ids = [d.id for d in step.documents if d.content == text]
        ids = ids_of.get(text) or ["file.md"]
        assert given_ids == (ids + [ids[-1]] * len(given_ids))[: len(given_ids)], text


# --------------------------------------------------------------------------- the flattened-list index

_SEGMENTS = st.sampled_from(["a", "b", "llm", "0", "1", "01", "12", "²", "", "x.y"])
_KEYS = st.lists(_SEGMENTS, min_size=1, max_size=5).map(".".join)


@settings(max_examples=300, deadline=None)
@given(
    attributes=st.dictionaries(_KEYS, st.integers(), max_size=12),
    prefix=st.lists(_SEGMENTS, min_size=1, max_size=3).map(lambda parts: ".".join(parts) + "."),
)
def test_the_indexed_unflatten_equals_the_scanning_one(attributes: dict[str, int], prefix: str) -> None:
    """`Attributes` (what span records hold) answers `unflatten` from an index built once; it must
    give exactly what scanning a plain dict gives, for every prefix, including the keys' own."""
    from semconv.values import Attributes, unflatten

    indexed = Attributes(attributes)
    prefixes = {prefix} | {key[: i + 1] for key in attributes for i, c in enumerate(key) if c == "."}
    for candidate in prefixes:
        assert unflatten(indexed, candidate) == unflatten(dict(attributes), candidate), candidate
