"""A trace's spans as a tree of classified nodes: parents, children, depth, and the groups of nested
same-kind spans that make one step (docs/conventions.md, "Nested spans"). Pure logic, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field

from semconv.models import Document, SpanRecord

# Kinds whose nested spans of the same kind are one step (LlamaIndex `.predict` ⊃ `.chat` ⊃ client span).
COLLAPSING_KINDS = frozenset({"llm", "retrieval", "rerank", "embedding"})


@dataclass(eq=False)
class Node:
    span: SpanRecord
    kind: str
    convention: str
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    depth: int = 0
    group: Node | None = None  # the top span of the collapsed step this span belongs to
    members: list[Node] = field(default_factory=list)  # on group tops: the group, top first
    tool: str | None = None  # the tool a tool call (or a retrieval made by one) calls
    tool_documents: list[Document] | None = None  # a retrieval tool's documents, read from its result


def unique_spans(spans: list[SpanRecord]) -> list[SpanRecord]:
    """The spans, a span sent twice counting once (its last copy)."""
    unique: dict[str, SpanRecord] = {}
    for span in spans:
        unique[span.span_id] = span
    return list(unique.values())


def build_tree(classified: list[Node]) -> tuple[list[Node], list[Node]]:
    """Link classified nodes (one per span id) into a tree: (all nodes in start order, roots). A span
    whose parent is missing is a root."""
    nodes = {node.span.span_id: node for node in classified}
    roots = []
    for node in nodes.values():
        parent = nodes.get(node.span.parent_span_id or "")
        if parent is not None and parent is not node:
            node.parent = parent
            parent.children.append(node)
        else:
            roots.append(node)
    ordered: list[Node] = []
    stack = sorted(roots, key=start_key, reverse=True)
    seen: set[int] = set()
    while stack:  # iterative: traces can be deep; cycles in bad input are cut by `seen`
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        ordered.append(node)
        for child in sorted(node.children, key=start_key, reverse=True):
            child.depth = node.depth + 1
            stack.append(child)
    for node in nodes.values():  # members of a parent cycle, unreachable from any root
        if id(node) not in seen:
            node.parent = None
            roots.append(node)
            ordered.append(node)
    return ordered, roots


def start_key(node: Node) -> tuple[int, str]:
    return (node.span.start_us or 0, node.span.span_id)


def group(ordered: list[Node]) -> list[Node]:
    """Collapse nested same-kind spans: a span joins the step of its nearest non-chain ancestor
    when that ancestor has the same kind. Returns the group tops in tree order."""
    tops = []
    for node in ordered:  # parents come before children in `ordered`
        ancestor = node.parent
        while ancestor is not None and ancestor.kind == "chain":
            ancestor = ancestor.parent
        if node.kind in COLLAPSING_KINDS and ancestor is not None and ancestor.kind == node.kind:
            top = ancestor.group or ancestor
            node.group = top
            top.members.append(node)
        else:
            node.group = node
            node.members = [node]
            tops.append(node)
    return tops


def is_leaf(node: Node, members: list[Node]) -> bool:
    return not any(other.parent is node for other in members)


def unlink(nodes: list[Node]) -> None:
    """Break the tree's parent/child cycles, so its nodes are freed by reference counting as soon
    as the trace is mapped, not by a later pass of the cyclic garbage collector (which, over a batch
    of traces, costs as much as mapping one)."""
    for node in nodes:
        node.parent = node.group = None
        node.children = node.members = []
