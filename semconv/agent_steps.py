"""Agents' steps: tool calls named and made retrievals when they are (`read_tools`), a tool call's
fields (`tool_fields`), searches a model ran itself (`with_hosted_retrievals`), the final answer's
LLM step (`final_llm_text`) and the trace's agent counts (`count_calls`). docs/conventions.md,
"Agents and tools". Pure logic, no I/O; `semconv.mapping` composes it.
"""

from __future__ import annotations

from typing import Any

from semconv import tools
from semconv.documents import fill_metadata_ids
from semconv.models import Step
from semconv.options import MappingOptions
from semconv.tree import Node
from semconv.values import text


def read_tools(ordered: list[Node], options: MappingOptions) -> None:
    """Name every tool call, and make a retrieval of each one that is (docs/conventions.md, "Agents
    and tools"): a tool `mapping.retrieval_tools` names, or, with `detect_retrieval_tools`, one whose
    name or description says it searches and whose result reads as documents. A tool with a
    retrieval span below it stays a tool: that span holds the documents (a retriever called inside a
    LangChain tool). Children are read before their parents, so an agent run as a tool over a
    search tool is not a second retrieval of the same documents."""
    covered: set[int] = set()  # nodes with a retrieval below them
    for node in reversed(ordered):  # `ordered` lists parents before children
        attrs = node.span.attributes
        if node.kind == "tool":
            node.tool = tools.tool_name(node.span)
            if id(node) not in covered:
                _read_retrieval_tool(node, options)
        elif node.kind == "retrieval" and tools.is_tool_call(attrs):
            node.tool = tools.tool_name(node.span)  # `rag.step = retrieval` on a tool span
        if (node.kind in ("retrieval", "rerank") or id(node) in covered) and node.parent is not None:
            covered.add(id(node.parent))


def _read_retrieval_tool(node: Node, options: MappingOptions) -> None:
    attrs = node.span.attributes
    named = tools.is_named_retrieval(node.tool, options)
    if not named and not (
        options.detect_retrieval_tools and tools.says_retrieval(node.tool, tools.tool_description(attrs))
    ):
        return
    found = tools.result_documents(tools.result(attrs), strict=not named)
    if found is not None or named:
        node.kind = "retrieval"
        node.tool_documents = found or []


def tool_fields(top: Node, f: dict[str, Any]) -> None:
    """A tool call's fields: arguments as input, its result as output (a retrieval's documents are
    its output), the tool's name and the result's size in characters."""
    attrs = top.span.attributes
    result = text(tools.result(attrs))
    f["tool_name"] = top.tool
    f["result_size"] = len(result) if result is not None else None
    if top.kind == "tool":
        f["input"] = text(tools.arguments(attrs))
        f["output"] = result


def with_hosted_retrievals(steps: list[Step], nodes: list[Node], options: MappingOptions) -> list[Step]:
    """`steps` with a retrieval step before each LLM step for each search the model ran itself
    (a hosted tool, OpenAI's file search: its call and results are in the LLM span's output, with
    no span of their own). The retrieval step shares the LLM step's span."""
    hosted: dict[str, list[tools.HostedCall]] = {}
    for node in nodes:
        if node.kind == "llm":
            calls = tools.hosted_calls(node.span.attributes)
            if calls:
                hosted[node.span.span_id] = calls
    if not hosted:
        return steps
    result: list[Step] = []
    for step in steps:
        if step.kind == "llm" and step.span_id in hosted:
            result.extend(_hosted_retrievals(step, hosted[step.span_id], options))
        result.append(step)
    return result


def _hosted_retrievals(llm: Step, calls: list[tools.HostedCall], options: MappingOptions) -> list[Step]:
    found = []
    for name, arguments, result in calls:
        named = tools.is_named_retrieval(name, options)
        if not named and not (options.detect_retrieval_tools and tools.says_retrieval(name, None)):
            continue
        docs = tools.result_documents(result, strict=not named)
        if docs is None and not named:
            continue
        query = tools.query(arguments)
        recorded = text(result)
        found.append(
            Step(
                span_id=llm.span_id,
                parent_span_id=llm.parent_span_id,
                kind="retrieval",
                name=name or llm.name,
                convention=llm.convention,
                input=query,
                query=query,
                documents=fill_metadata_ids(docs or []),
                start_us=llm.start_us,
                end_us=llm.end_us,
                status=llm.status,
                span_ids=[llm.span_id],
                tool_name=name,
                result_size=len(recorded) if recorded is not None else None,
            )
        )
    return found


def final_llm_text(nodes: list[Node], steps: list[Step]) -> str | None:
    """The output of the last LLM step that has text and asks for no tool call (an agent's turns
    before its answer call tools; their text, if any, is thinking aloud)."""
    llms = [s for s in steps if s.kind == "llm" and s.output]
    if not llms:
        return None
    spans = {n.span.span_id: n.span for n in nodes}
    for step in reversed(llms):
        if not any(tools.requests_tool_call(spans[i].attributes) for i in step.span_ids if i in spans):
            return step.output
    return None


def count_calls(steps: list[Step]) -> tuple[int, int, int, int]:
    """The agent counts: tool calls, failed tool calls, retrieval rounds, LLM calls."""
    tool_calls = tool_errors = rounds = llm_calls = 0
    for step in steps:
        if step.tool_name is not None:
            tool_calls += 1
            tool_errors += step.status == "ERROR"
        if step.kind == "retrieval":
            rounds += 1
        elif step.kind == "llm" and _called_a_model(step):
            llm_calls += 1
    return tool_calls, tool_errors, rounds, llm_calls


def _called_a_model(step: Step) -> bool:
    """An LLM step with an output or token counts: a model was called (a framework's span that
    only prepares a request, LlamaIndex's `_prepare_chat_with_tools`, has neither)."""
    return bool(step.output) or step.input_tokens is not None or step.output_tokens is not None
