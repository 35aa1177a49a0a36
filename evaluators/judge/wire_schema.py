"""The JSON schema a verdict model is asked for on the wire: the shape OpenAI's strict structured
output accepts (every object closed and its properties required, definitions inlined, no titles,
defaults or value constraints; pydantic checks those on the reply)."""

from __future__ import annotations

from typing import Any, cast

from pydantic import BaseModel

# Schema keywords left out of the wire schema (see `strict_json_schema`). Only keywords are dropped,
# never a property or definition that happens to have one of these names.
_NOT_SENT = frozenset(
    {
        "default",
        "title",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)


def strict_json_schema(schema: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema in the shape OpenAI's strict structured output accepts.

    Strict mode wants every object closed (`additionalProperties: false`) with all its properties
    required and no `default`s; pydantic still applies its own defaults when it validates the reply.
    pydantic's `title` annotations are dropped: they tell the model nothing and cost prompt tokens on
    every call (a property named `title` or `default` keeps its schema). So are
    value constraints (`minLength`, `minimum`, ...): providers' strict modes accept different subsets
    of them and some reject a schema over one, while pydantic checks them all on the reply anyway
    (a violation is a schema error, retried like any other). The wire schema keeps the shape only.
    """

    def fix(node: Any, named: bool = False) -> Any:
        # `named`: the keys of this dict are property or definition names, not keywords.
        if isinstance(node, dict) and named:
            return {name: fix(value) for name, value in node.items()}
        if isinstance(node, dict):
            node = {
                key: fix(value, named=key in ("properties", "$defs"))
                for key, value in node.items()
                if key not in _NOT_SENT
            }
            if node.get("type") == "object" and "properties" in node:
                node["additionalProperties"] = False
                node["required"] = list(node["properties"])
            return node
        if isinstance(node, list):
            return [fix(item) for item in node]
        return node

    return cast(dict[str, Any], _inline_definitions(_type_lists(fix(schema.model_json_schema()))))


def _type_lists(node: Any) -> Any:
    """`{"anyOf": [{"type": "string"}, {"type": "null"}]}` as `{"type": ["string", "null"]}`: the same
    constraint, which strict structured output accepts, in fewer tokens."""
    if isinstance(node, dict):
        members = node.get("anyOf")
        if members and all(set(m) == {"type"} and isinstance(m["type"], str) for m in members):
            node = {key: value for key, value in node.items() if key != "anyOf"}
            node["type"] = [m["type"] for m in members]
        return {key: _type_lists(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_type_lists(item) for item in node]
    return node


def _inline_definitions(root: dict[str, Any]) -> dict[str, Any]:
    """`root` with every `{"$ref": "#/$defs/X"}` replaced by X itself and `$defs` dropped: the same
    schema in fewer characters (verdict models are not recursive; a recursive one keeps `$defs`)."""
    definitions = root.get("$defs", {})

    def resolve(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            # A reference, alone or (at the root of a recursive model) beside the definitions.
            if ref.startswith("#/$defs/") and set(node) <= {"$ref", "$defs"}:
                name = ref.removeprefix("#/$defs/")
                if name in seen:
                    raise RecursionError(name)
                return resolve(definitions[name], (*seen, name))
            return {key: resolve(value, seen) for key, value in node.items() if key != "$defs"}
        if isinstance(node, list):
            return [resolve(item, seen) for item in node]
        return node

    try:
        return cast(dict[str, Any], resolve(root, ()))
    except RecursionError:
        return root
