"""The schema sent as `response_format` (strict structured output): every verdict model's schema is
closed, needs every key, has no `$ref` left to resolve, and writes optional plain types as type
lists; it says the same as pydantic's own schema, in fewer characters."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from evaluators.judge import prompts, strict_json_schema

VERDICT_MODELS = [
    getattr(prompts, name)
    for name in dir(prompts)
    if name.endswith("Verdict") and isinstance(getattr(prompts, name), type)
]


def walk(node: Any) -> list[dict[str, Any]]:
    """Every dict in a JSON schema, depth first."""
    if isinstance(node, dict):
        return [node, *(found for value in node.values() for found in walk(value))]
    if isinstance(node, list):
        return [found for item in node for found in walk(item)]
    return []


def resolve(node: Any, definitions: dict[str, Any]) -> Any:
    """pydantic's schema with its `$ref`s replaced by what they name (the reference reading)."""
    if isinstance(node, dict):
        if "$ref" in node:
            return resolve(definitions[node["$ref"].removeprefix("#/$defs/")], definitions)
        return {key: resolve(value, definitions) for key, value in node.items() if key != "$defs"}
    if isinstance(node, list):
        return [resolve(item, definitions) for item in node]
    return node


def test_there_are_verdict_models_to_check() -> None:
    assert len(VERDICT_MODELS) >= 6


@pytest.mark.parametrize("model", VERDICT_MODELS, ids=lambda m: m.__name__)
def test_strict_schema_is_closed_and_inlined(model: type[BaseModel]) -> None:
    schema = strict_json_schema(model)
    nodes = walk(schema)
    assert not any("$ref" in node or "$defs" in node for node in nodes)
    assert not any("anyOf" in node and all(set(m) == {"type"} for m in node["anyOf"]) for node in nodes)
    objects = [node for node in nodes if node.get("type") == "object"]
    assert objects
    for node in objects:
        assert node["additionalProperties"] is False
        assert node["required"] == list(node["properties"])


@pytest.mark.parametrize("model", VERDICT_MODELS, ids=lambda m: m.__name__)
def test_strict_schema_says_what_pydantic_says(model: type[BaseModel]) -> None:
    """Apart from the strict-mode edits (closed objects, no titles or defaults) and the two
    rewritings, each property has the same types, enums and bounds as in pydantic's schema."""
    reference = pydantic_schema = model.model_json_schema()
    reference = resolve(pydantic_schema, pydantic_schema.get("$defs", {}))
    ours = strict_json_schema(model)

    def types(node: dict[str, Any]) -> set[str]:
        if "anyOf" in node:
            return {t for member in node["anyOf"] for t in types(member)}
        kind = node.get("type")
        return set(kind) if isinstance(kind, list) else {kind} if kind else set()

    def compare(theirs: dict[str, Any], mine: dict[str, Any]) -> None:
        assert types(theirs) == types(mine)
        for key in ("enum", "minLength", "maxLength", "minimum", "maximum"):
            assert theirs.get(key) == mine.get(key), key
        assert set(theirs.get("properties", {})) == set(mine.get("properties", {}))
        for name, sub in theirs.get("properties", {}).items():
            compare(sub, mine["properties"][name])
        if "items" in theirs:
            compare(theirs["items"], mine["items"])

    compare(reference, ours)


class Node(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str
    children: list[Node]


def test_a_recursive_model_keeps_its_definitions() -> None:
    schema = strict_json_schema(Node)
    assert "$defs" in schema
    refs = [node["$ref"] for node in walk(schema) if "$ref" in node]
    assert refs and all(ref.removeprefix("#/$defs/") in schema["$defs"] for ref in refs)


def test_optional_plain_types_become_type_lists() -> None:
    claim = strict_json_schema(prompts.ClaimVerdict)
    assert claim["properties"]["doc_id"]["type"] == ["string", "null"]
    assert claim["properties"]["quote"]["type"] == ["string", "null"]
    assert claim["properties"]["claim"] == {"minLength": 1, "type": "string"}
