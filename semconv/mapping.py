"""A trace's spans -> one `RagTrace`, composing the per-convention mappers in the precedence that
docs/conventions.md documents: step kind ("How a step kind is decided"), fields ("How fields are
read", "Document ids"), tree rules ("Nested spans", "Parallel duplicate trees").

Pure logic, no I/O. `map_trace` never raises: a span it cannot read becomes a `chain` step, and a
trace with no retrieval / rerank / llm / embedding step keeps `convention = 'unknown'`.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from semconv import names, tools
from semconv.agent_steps import count_calls, final_llm_text, read_tools, tool_fields, with_hosted_retrievals
from semconv.construct import builder
from semconv.documents import fill_ids_by_content, fill_metadata_ids
from semconv.fields import (
    MODEL_KEYS,
    TOKEN_EVIDENCE,
    first_of,
    first_user_message,
    generic_input,
    generic_output,
    llm_input,
    llm_output,
    model,
    provider,
    retrieval_documents,
    retrieval_query,
    tokens,
)
from semconv.mappers import genai, langfuse, langsmith, openinference, openllmetry
from semconv.mappers.text_fields import plain_text, question_text
from semconv.models import RAG_STEP_KINDS, STEP_KINDS, RagTrace, SpanRecord, Step
from semconv.options import DEFAULT_OPTIONS, MappingOptions
from semconv.parallel_trees import merge_parallel_duplicates
from semconv.tree import Node, build_tree, group, is_leaf, start_key, unique_spans, unlink
from semconv.values import is_absent, lower, string_list, text

log = logging.getLogger(__name__)
SESSION_KEYS = (
    "session.id",
    "gen_ai.conversation.id",
    "langfuse.session.id",
    "traceloop.association.properties.session_id",
)
# The end user a trace served, first found wins: OTel's and OpenInference's `user.id`, older OTel's
# `enduser.id`, Langfuse's, OpenLLMetry's association property.
USER_KEYS = (
    "user.id",
    "enduser.id",
    "langfuse.user.id",
    "traceloop.association.properties.user_id",
)
NAME_HINTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^vector_db_retrieve\b|retriever|^retrieval\b|^retrieve\b", re.IGNORECASE), "retrieval"),
    (re.compile(r"rerank", re.IGNORECASE), "rerank"),
    (re.compile(r"^embeddings?\b|\.embeddings?$", re.IGNORECASE), "embedding"),
    (re.compile(r"^chat\b|\.chat$|^chatcompletion$|\.completion$", re.IGNORECASE), "llm"),
)
CONVENTION_ORDER = ("ragpulse", "openinference", "langfuse", "langsmith", "openllmetry", "genai", "unknown")


# --------------------------------------------------------------------------- step kind


def _own_convention(attrs: dict[str, Any]) -> str:
    if any(key.startswith("rag.") for key in attrs):
        return "ragpulse"
    return openllmetry.NAME if openllmetry.is_openllmetry(attrs) else genai.NAME


def classify(span: SpanRecord) -> tuple[str, str]:
    """(step kind, convention that said so) for one span; the first rule that yields a kind wins."""
    attrs = span.attributes
    explicit = lower(attrs.get(names.RAG_STEP))
    if explicit in STEP_KINDS:
        return explicit, "ragpulse"
    for mapper in (openinference, langfuse, langsmith):
        kind = mapper.explicit_kind(attrs)
        if kind:
            return kind, mapper.NAME
    kind = genai.operation_kind(attrs)
    if kind:
        return kind, _own_convention(attrs)
    kind = openllmetry.legacy_kind(attrs)
    if kind:
        return kind, openllmetry.NAME
    kind = openinference.evidence_kind(attrs)
    if kind:
        return kind, openinference.NAME
    kind = openllmetry.evidence_kind(attrs, span.events)
    if kind:
        return kind, openllmetry.NAME
    kind = genai.evidence_kind(attrs)
    if kind:
        return kind, _own_convention(attrs)
    if "tool.name" in attrs:
        return "tool", openinference.NAME
    if any(key in attrs for key in TOKEN_EVIDENCE):
        return "llm", _own_convention(attrs)
    return _weak_kind(span)


def _weak_kind(span: SpanRecord) -> tuple[str, str]:
    attrs = span.attributes
    hinted = lower(attrs.get("gen_ai.span.kind"))
    if hinted:
        kind = openinference.KINDS.get(hinted, "chain")
        return kind, "unknown"
    if any(not is_absent(attrs.get(key)) for key in MODEL_KEYS) or "model" in attrs:
        return "llm", _own_convention(attrs)
    for pattern, kind in NAME_HINTS:
        if pattern.search(span.name or ""):
            return kind, "unknown"
    return "chain", "unknown"


# --------------------------------------------------------------------------- tree rules


# `Step.model_construct(...)` of these fields, positionally (see `_step`). Named, not taken from
# `Step.model_fields`, so that a reordered model makes `builder` fall back instead of mixing fields.
# fmt: off
_STEP_FIELDS = (
    "span_id", "parent_span_id", "position", "kind", "name", "convention", "model", "provider", "input",
    "output", "query", "documents", "input_documents", "start_us", "end_us", "duration_ms", "input_tokens",
    "output_tokens", "total_tokens", "status", "span_ids", "tool_name", "result_size",
)
_SAMPLE_STEP: tuple[Any, ...] = (
    "s", None, 0, "llm", "chat", "genai", "m", "p", "q", "a", None, [], [], 1, 2, 0.001, 3, 4, 7, "OK", ["s"],
    None, None,
)
# fmt: on
_new_step = builder(Step, _STEP_FIELDS, _SAMPLE_STEP)


def _step(top: Node) -> Step:
    members = top.members
    kind = top.kind
    # LLM fields come from the innermost span that has them; retrieval from the outermost.
    order = sorted(members, key=lambda n: -n.depth) if kind == "llm" else members
    representative = top
    f: dict[str, Any] = {
        "documents": [],
        "input_documents": [],
        "query": None,
        "input": None,
        "output": None,
        "tool_name": None,
        "result_size": None,
    }
    if kind in ("retrieval", "rerank"):
        _retrieval_fields(top, order, f)
        representative = f.pop("representative")
    elif kind == "llm":
        for node in order:
            output = llm_output(node.span)
            if output:
                f["output"], representative = output, node
                break
        f["input"] = first_of(order, lambda n: llm_input(n.span))
    else:
        f["input"] = generic_input(top.span)
        f["output"] = generic_output(top.span)
    if top.tool is not None:
        tool_fields(top, f)
    rep = representative.span
    input_tokens, output_tokens, total_tokens = _tokens(kind, order, members)
    # Every value is already of its field's type (the readers above normalize them), so the step
    # is built without validation, in `Step`'s field order; validating cost about 8 % of the mapping.
    return _new_step(
        rep.span_id,
        top.span.parent_span_id,
        0,  # position, set once the steps are sorted
        kind,
        rep.name,
        representative.convention if representative.convention != "unknown" else top.convention,
        first_of(order, lambda n: model(n.span.attributes, kind)),
        first_of(order, lambda n: provider(n.span.attributes)),
        f["input"],
        f["output"],
        f["query"],
        f["documents"],
        f["input_documents"],
        top.span.start_us,
        top.span.end_us,
        top.span.duration_ms,
        input_tokens,
        output_tokens,
        total_tokens,
        "ERROR" if any(n.span.status_code == "ERROR" for n in members) else top.span.status_code,
        [n.span.span_id for n in members],
        f["tool_name"],
        f["result_size"],
    )


def _retrieval_fields(top: Node, order: list[Node], f: dict[str, Any]) -> None:
    """Documents, query and input of a retrieval or rerank step (and the span that gave them)."""
    kind, members = top.kind, top.members
    f["representative"] = top
    if top.tool_documents is not None:  # a retrieval tool, read from its result
        f["documents"] = top.tool_documents
    else:
        for node in order:
            docs, input_docs = retrieval_documents(node.span, kind)
            if docs:
                f["documents"], f["input_documents"], f["representative"] = docs, input_docs, node
                break
        if not f["documents"] and top.tool is not None:  # `rag.step = retrieval` on a tool span
            f["documents"] = tools.result_documents(tools.result(top.span.attributes), strict=False) or []
    if any(d.id is None for d in f["documents"]):
        # OpenLLMetry: `vector_db_retrieve` holds the LangChain documents without ids; the
        # vector database's span below it (`chroma.query`) has them in its result events.
        results = [d for node in members for d in openllmetry.event_documents(node.span.events)]
        fill_ids_by_content(f["documents"], results)
    fill_metadata_ids(f["documents"])
    fill_metadata_ids(f["input_documents"])
    query = first_of(order, lambda n: retrieval_query(n.span))
    if query is None and top.tool is not None:
        query = tools.query(tools.arguments(top.span.attributes))
    f["query"] = f["input"] = query


def _tokens(kind: str, order: list[Node], members: list[Node]) -> tuple[int | None, int | None, int | None]:
    """Sum tokens over the leaf spans of the step only: inner client spans repeat the outer counts.
    When no leaf reports usage, the innermost span that does is used."""
    if kind not in ("llm", "embedding"):
        return None, None, None
    counted = [tokens(n.span.attributes) for n in members if is_leaf(n, members)]
    if not any(_has_tokens(c) for c in counted):
        counted = [c for c in (tokens(n.span.attributes) for n in order) if _has_tokens(c)][:1]
    sums: list[int | None] = []
    for i in range(3):
        values: list[int] = [c[i] for c in counted if c[i] is not None]  # type: ignore[misc]
        sums.append(sum(values) if values else None)
    return sums[0], sums[1], sums[2]


def _has_tokens(counts: tuple[int | None, int | None, int | None]) -> bool:
    return any(t is not None for t in counts)


# --------------------------------------------------------------------------- the trace


def _trace_convention(steps: list[Step], nodes: list[Node]) -> str:
    votes = Counter(s.convention for s in steps if s.kind in RAG_STEP_KINDS)
    votes.pop("unknown", None)
    if not votes:
        return "unknown"
    best = max(votes.values())
    winner = next(c for c in CONVENTION_ORDER if votes.get(c) == best)
    if winner == genai.NAME and any(k.startswith("rag.") for n in nodes for k in n.span.attributes):
        return "ragpulse"  # the ragpulse convention is GenAI plus rag.* keys
    return winner


def _any_attr(nodes: list[Node], key: str) -> Any:
    for node in nodes:
        value = node.span.attributes.get(key)
        if not is_absent(value):
            return value
    return None


def _question(root: Node, nodes: list[Node], steps: list[Step]) -> str | None:
    a = root.span.attributes
    root_is_step = root.kind in ("llm", "retrieval", "rerank")
    found = text(_any_attr(nodes, names.RAG_QUESTION))
    if is_absent(found) and root.kind != "llm":
        found = openinference.trace_question(a)
    if is_absent(found) and not root_is_step:
        # An agent's or a pipeline's root with the user's messages (`invoke_agent`, AGENT spans).
        found = first_user_message(root.span)
    if is_absent(found):
        found = langfuse.trace_question(a) or first_of(
            nodes, lambda n: langfuse.trace_question(n.span.attributes)
        )
    if is_absent(found) and not root_is_step:
        found = langfuse.root_question(a)
    if is_absent(found):
        found = openllmetry.trace_question(a)
    if is_absent(found) and not root_is_step:
        found = langsmith.trace_question(a)
    if is_absent(found):
        # The first LLM call with a user message (a framework's span that only prepares the
        # request, LlamaIndex's `_prepare_chat_with_tools`, has none).
        found = first_of((n for n in nodes if n.kind == "llm"), lambda n: first_user_message(n.span))
    if is_absent(found):
        # A tool's arguments are the agent's words, not the user's: never the question.
        found = _first_retrieval_query(nodes, steps)
    if is_absent(found):
        llms = [s for s in steps if s.kind == "llm"]
        found = question_text(llms[0].input) if llms else None
    return text(found)


def _first_retrieval_query(nodes: list[Node], steps: list[Step]) -> str | None:
    """The query of the first retrieval that is not a tool call nor inside one."""
    by_id = {n.span.span_id: n for n in nodes}
    for step in steps:
        if step.kind != "retrieval" or not step.query or step.tool_name:
            continue
        node = by_id.get(step.span_id)
        while node is not None and node.tool is None and node.kind != "tool":
            node = node.parent
        if node is None:
            return step.query
    return None


def _answer(root: Node, nodes: list[Node], steps: list[Step]) -> str | None:
    """The final answer: `rag.answer`, else the root's output when it is plain text (a JSON wrapper or
    a framework object's repr is not an answer), else the last LLM step's text that asks for no tool."""
    a = root.span.attributes
    root_is_step = root.kind in ("llm", "retrieval", "rerank")
    found = text(_any_attr(nodes, names.RAG_ANSWER))
    if is_absent(found) and not root_is_step:
        found = _prose(openinference.trace_answer(a))
    if is_absent(found) and not root_is_step:
        found = _prose(genai.llm_output(a))  # an `invoke_agent` span's own output
    if is_absent(found):
        found = _prose(
            langfuse.trace_answer(a) or first_of(nodes, lambda n: langfuse.trace_answer(n.span.attributes))
        )
    if is_absent(found) and not root_is_step:
        found = _prose(langfuse.root_answer(a))
    if is_absent(found) and root.kind != "llm":
        found = _prose(openllmetry.trace_answer(a))
    if is_absent(found) and not root_is_step:
        found = _prose(langsmith.trace_answer(a))
    if is_absent(found):
        found = final_llm_text(nodes, steps)
    return text(found)


def _prose(value: str | None) -> str | None:
    """`plain_text`, with its common case (no bracket at all) decided here."""
    if value is None or ("(" not in value and value.lstrip()[:1] not in ("{", "[")):
        return value
    return plain_text(value)


def _sum(values: Iterable[float | int | None]) -> Any:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def map_trace(spans: list[SpanRecord], options: MappingOptions | None = None) -> RagTrace:
    """Read one trace's spans as a RAG request. Never raises; see the module docstring."""
    if not spans:
        return RagTrace(trace_id="")
    try:
        return _map(spans, options or DEFAULT_OPTIONS)
    except Exception as exc:  # a mapper bug must not lose the trace: keep the row, say why
        log.exception("could not map trace %s", spans[0].trace_id)
        trace = RagTrace(trace_id=spans[0].trace_id, span_count=len(spans))
        trace.mapping_error = f"{type(exc).__name__}: {exc}"
        return trace


def _classified(spans: list[SpanRecord]) -> list[Node]:
    """A node per span (a span sent twice counts once), with its step kind and convention."""
    nodes = []
    for span in unique_spans(spans):
        kind, convention = classify(span)
        nodes.append(Node(span, kind, convention))
    return nodes


def _map(spans: list[SpanRecord], options: MappingOptions) -> RagTrace:
    nodes, roots = build_tree(_classified(spans))
    try:
        if any(n.kind == "tool" or (n.kind == "retrieval" and n.convention == "ragpulse") for n in nodes):
            read_tools(nodes, options)
        return _map_tree(nodes, roots, options)
    finally:
        unlink(nodes)


def _map_tree(nodes: list[Node], roots: list[Node], options: MappingOptions) -> RagTrace:
    root = min((r for r in roots if not r.span.parent_span_id), key=start_key, default=None) or min(
        roots, key=start_key
    )
    tops = group(nodes)
    steps = sorted((_step(t) for t in tops), key=lambda s: (s.start_us or 0, s.span_id))
    steps = merge_parallel_duplicates(steps, CONVENTION_ORDER)  # two libraries, one call
    steps = with_hosted_retrievals(steps, nodes, options)
    for position, step in enumerate(steps):
        step.position = position
    tool_calls, tool_errors, rounds, llm_calls = count_calls(steps)
    starts = [n.span.start_us for n in nodes if n.span.start_us is not None]
    ends = [n.span.end_us for n in nodes if n.span.end_us is not None]
    trace = RagTrace(
        trace_id=root.span.trace_id,
        service_name=root.span.service_name
        or next((n.span.service_name for n in nodes if n.span.service_name), None),
        root_span_id=root.span.span_id,
        start_us=min(starts) if starts else None,
        end_us=max(ends) if ends else None,
        question=_question(root, nodes, steps),
        answer=_answer(root, nodes, steps),
        convention=_trace_convention(steps, nodes),
        status="error" if any(n.span.status_code == "ERROR" for n in nodes) else "ok",
        steps=steps,
        case_id=text(_any_attr(nodes, names.RAG_CASE_ID)),
        expected_documents=string_list(_any_attr(nodes, names.RAG_EXPECTED_DOCUMENTS)),
        expected_answer=text(_any_attr(nodes, names.RAG_EXPECTED_ANSWER)),
        session_id=text(first_of(SESSION_KEYS, lambda key: _any_attr(nodes, key))),
        user_id=text(first_of(USER_KEYS, lambda key: _any_attr(nodes, key))),
        retrieval_ms=_sum(s.duration_ms for s in steps if s.kind in ("retrieval", "rerank")),
        generation_ms=_sum(s.duration_ms for s in steps if s.kind == "llm"),
        input_tokens=_sum(s.input_tokens for s in steps if s.kind == "llm"),
        output_tokens=_sum(s.output_tokens for s in steps if s.kind == "llm"),
        span_count=len(nodes),
        tool_calls=tool_calls,
        tool_errors=tool_errors,
        retrieval_rounds=rounds,
        llm_calls=llm_calls,
    )
    if trace.start_us is not None and trace.end_us is not None:
        trace.duration_ms = (trace.end_us - trace.start_us) / 1000.0
    return trace
