"""The schema sent as `response_format` (strict structured output): every verdict model's schema is
closed, needs every key, has no `$ref` left to resolve, and writes optional plain types as type
lists; it says the same as pydantic's own schema, in fewer characters."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from evaluators import metrics
from evaluators.judge import asking, strict_json_schema
from evaluators.judge.asking import ClaimVerdict
from evaluators.metrics.context_relevance import ContextRelevanceVerdict

# Every verdict schema: the shared claims schema and each metric module's own.
_MODULES = [
    asking,
    *(
        importlib.import_module(f"{metrics.__name__}.{m.name}")
        for m in pkgutil.iter_modules(metrics.__path__)
    ),
]
VERDICT_MODELS = sorted(
    {
        model
        for module in _MODULES
        for name, model in vars(module).items()
        if name.endswith("Verdict") and isinstance(model, type)
    },
    key=lambda model: model.__name__,
)


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
    """Apart from the strict-mode edits (closed objects, no titles or defaults), the two rewritings
    and the value constraints left to pydantic, each property has the same types and enums as in
    pydantic's schema."""
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
        assert theirs.get("enum") == mine.get("enum")
        for key in ("minLength", "maxLength", "minimum", "maximum", "pattern", "minItems"):
            assert key not in mine, key
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
    claim = strict_json_schema(ClaimVerdict)
    assert claim["properties"]["doc_id"]["type"] == ["string", "null"]
    assert claim["properties"]["quote"]["type"] == ["string", "null"]
    assert claim["properties"]["claim"] == {"type": "string"}


def test_value_constraints_are_not_sent_but_still_checked_on_the_reply() -> None:
    """`minLength` / `minimum` stay out of the wire schema (providers' strict modes differ on them);
    pydantic still rejects a reply that breaks them."""
    relevance = strict_json_schema(ContextRelevanceVerdict)
    assert relevance["properties"]["documents"]["items"]["properties"]["rank"] == {"type": "integer"}
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        ContextRelevanceVerdict.model_validate({"documents": [{"rank": 0, "relevant": True}]})
    with pytest.raises(ValueError, match="at least 1 character"):
        ClaimVerdict.model_validate({"claim": "", "verdict": "supported"})


class Bounds(BaseModel):
    model_config = ConfigDict(extra="forbid")
    minimum: int
    title: str
    default: str = "x"


def test_properties_named_like_keywords_keep_their_schema() -> None:
    schema = strict_json_schema(Bounds)
    assert schema["properties"] == {
        "minimum": {"type": "integer"},
        "title": {"type": "string"},
        "default": {"type": "string"},
    }
    assert schema["required"] == ["minimum", "title", "default"]
