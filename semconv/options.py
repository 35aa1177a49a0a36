"""What a deployment tells the mapping: which tool calls are retrievals (`mapping:` in the config)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MappingOptions:
    """`mapping.retrieval_tools`: tool names or globs (`search_*`) whose calls are retrieval steps;
    `mapping.detect_retrieval_tools`: also take a tool for a retrieval when its name or description
    says so and its result reads as documents (docs/conventions.md, "Agents and tools")."""

    retrieval_tools: tuple[str, ...] = ()
    detect_retrieval_tools: bool = True


DEFAULT_OPTIONS = MappingOptions()
