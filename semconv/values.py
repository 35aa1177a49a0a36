"""Lenient value parsing: attribute values come as JSON in strings, Python reprs, or redacted."""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "__REDACTED__"


def is_absent(value: Any) -> bool:
    """None, empty text and OpenInference's `__REDACTED__` all mean 'not recorded'."""
    return value is None or value == "" or value == REDACTED


def text(value: Any) -> str | None:
    """A value as text: strings as they are, structures as JSON, absent as None."""
    if is_absent(value):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def scalar_text(value: Any) -> str | None:
    """A string or number as text; structures, booleans and absent values as None (ids)."""
    if is_absent(value) or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return None


def parse_structured(value: Any) -> Any:
    """JSON (or Python-repr) text as data; other values unchanged. Double-encoded JSON is unwrapped."""
    for _ in range(3):
        if not isinstance(value, str):
            return value
        stripped = value.strip()
        if not stripped or stripped[0] not in '[{"':
            return value
        try:
            value = json.loads(stripped)
            continue
        except (ValueError, RecursionError):  # deeply nested JSON text hits the recursion limit
            pass
        try:
            # Pinecone metadata and OpenInference's examples are Python reprs ({'a': 1}).
            return ast.literal_eval(stripped) if len(stripped) < 100_000 else value
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return value
    return value


def first_key(attrs: Mapping[str, Any], keys: Iterable[str]) -> Any:
    """The value of the first of `keys` present (not absent) in `attrs`, else None."""
    for key in keys:
        value = attrs.get(key)
        if not is_absent(value):
            return value
    return None


def as_mapping(value: Any) -> dict[str, Any] | None:
    """A mapping from a dict or JSON / Python-repr text, with its keys as text ({1: 'x'} has int keys)."""
    parsed = parse_structured(value)
    if not isinstance(parsed, dict):
        return None
    return {k if isinstance(k, str) else str(k): v for k, v in parsed.items()}


def as_list(value: Any) -> list[Any] | None:
    parsed = parse_structured(value)
    if isinstance(parsed, list | tuple):
        return list(parsed)
    return None


def number(value: Any) -> float | None:
    """A finite float from a number or numeric text (Milvus sends distances as strings)."""
    if isinstance(value, bool) or is_absent(value):
        return None
    try:
        result = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return result if math.isfinite(result) else None


def integer(value: Any) -> int | None:
    result = number(value)
    if result is None or not result.is_integer() or abs(result) > 2**63:
        return None
    return int(result)


def string_list(value: Any) -> list[str] | None:
    """A list of ids from an array, a JSON array text or comma-joined text."""
    if is_absent(value):
        return None
    parsed = parse_structured(value)
    if isinstance(parsed, list | tuple):
        items = [text(v) for v in parsed]
        return [i for i in items if i is not None]
    if isinstance(parsed, str):
        return [part.strip() for part in parsed.split(",") if part.strip()]
    return None


def lower(value: Any) -> str | None:
    result = text(value)
    return result.strip().lower() if result else None


class Attributes(dict[str, Any]):
    """Span attributes: a dict that also indexes its flattened lists once, for `unflatten`.

    OpenInference and OpenLLMetry flatten lists into `prefix.<i>.<suffix>` keys, and the mappers
    look for several prefixes per span; scanning every key for each prefix was a large part of the
    mapping cost. The index is built on first use; the attributes must not change after that.
    """

    __slots__ = ("_lists",)
    _lists: dict[str, dict[int, dict[str, Any]]]

    def flattened(self, prefix: str) -> dict[int, dict[str, Any]] | None:
        """`{index: {suffix: value}}` of the keys `prefix<index>.<suffix>` (prefix ends with '.')."""
        try:
            lists = self._lists
        except AttributeError:
            lists = self._lists = _index_lists(self)
        return lists.get(prefix)


# A '.'-delimited all-ASCII-digit segment; the lookahead lets `a.1.2.b` yield both `.1.` and `.2.`.
_INDEX_SEGMENT = re.compile(r"\.(?=([0-9]+)\.)")


def _index_lists(attributes: Mapping[str, Any]) -> dict[str, dict[int, dict[str, Any]]]:
    # Every '.'-ending prefix of every key that is followed by a numeric segment and a suffix:
    # exactly the (prefix, index, suffix) triples the scanning `unflatten` would find, in key order.
    lists: dict[str, dict[int, dict[str, Any]]] = {}
    known = _KEY_PARTS.get
    for key, value in attributes.items():
        parts = known(key)
        if parts is None:
            parts = _key_parts(key)
        for prefix, index, suffix in parts:
            entry = lists.get(prefix)
            if entry is None:
                entry = lists[prefix] = {}
            item = entry.get(index)
            if item is None:
                item = entry[index] = {}
            item[suffix] = value
    return lists


# key -> its (prefix, index, suffix) triples. Spans of one app repeat the same keys trace after
# trace (`retrieval.documents.0.document.id`, ...), so each key is parsed once. Bounded: cleared
# when full, as keys come from the traffic.
_KEY_PARTS: dict[str, tuple[tuple[str, int, str], ...]] = {}
_KEY_PARTS_LIMIT = 100_000


def _key_parts(key: str) -> tuple[tuple[str, int, str], ...]:
    parts = tuple(
        (key[: match.start() + 1], int(match.group(1)), suffix)
        for match in _INDEX_SEGMENT.finditer(key)
        if (suffix := key[match.end(1) + 1 :])
    )
    if len(_KEY_PARTS) >= _KEY_PARTS_LIMIT:
        _KEY_PARTS.clear()
    _KEY_PARTS[key] = parts
    return parts


def unflatten(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Rebuild a flattened list: `prefix.<i>.<suffix>` keys as one dict of suffixes per index, in
    index order. Suffixes keep their dots (`document.content`): keys are matched, not split."""
    if isinstance(attributes, Attributes) and prefix.endswith("."):
        indexed = attributes.flattened(prefix)
        return [dict(indexed[i]) for i in sorted(indexed)] if indexed else []
    items: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if not key.startswith(prefix):
            continue
        index, _, suffix = key[len(prefix) :].partition(".")
        if not (index.isascii() and index.isdigit()) or not suffix:  # not '²': int() refuses it
            continue
        items.setdefault(int(index), {})[suffix] = value
    return [items[i] for i in sorted(items)]
