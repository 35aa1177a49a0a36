"""Slices: the values that cut a trace's scores apart (`monitoring.dimensions`), and probe marks.

Pure logic, no I/O:
- `trace_slices` reads, for one trace, each dimension's value (a span attribute, the root span's
  first, or a resource attribute) and the probe that sent it (`rag.probe`, `rag.probe.run`);
- `DimensionCap` keeps a dimension to its `max_values` most frequent values: the rest become
  `other`, so a dimension with unbounded values (a user id by mistake) cannot blow up the aggregates.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from collector.schema.trace_rows import OTHER, TraceSlices
from semconv import SpanRecord, names

if TYPE_CHECKING:
    from collector.store.base import SliceColumns

# A value longer than this is cut: a slice is a label, not a payload.
MAX_VALUE_CHARS = 200
# Distinct values counted between two rankings; past it, new values wait for the next interval.
_MAX_COUNTED = 10_000


@dataclass(frozen=True)
class Dimension:
    """What the mapping job needs of a `monitoring.dimensions` entry."""

    name: str
    attribute: str | None = None
    resource: str | None = None


def trace_slices(
    root_span_id: str | None,
    spans: Sequence[SpanRecord],
    dimensions: Sequence[Dimension],
    resources: Mapping[str, Mapping[str, Any]] | None = None,
) -> TraceSlices:
    """The trace's slices from its spans (root first, then in order) and, for resource dimensions,
    `resources`: each span's resource attributes by span id."""
    ordered = sorted(spans, key=lambda s: s.span_id != root_span_id)
    found = TraceSlices(
        probe=_label(_first_value(ordered, names.RAG_PROBE)),
        probe_run=_label(_first_value(ordered, names.RAG_PROBE_RUN)),
    )
    for dimension in dimensions:
        if dimension.attribute is not None:
            value = _first_value(ordered, dimension.attribute)
        else:
            key = dimension.resource or ""
            value = next(
                (
                    resource[key]
                    for s in ordered
                    if (resource := (resources or {}).get(s.span_id)) is not None and key in resource
                ),
                None,
            )
        found.values[dimension.name] = _label(value)
    return found


def _first_value(spans: Sequence[SpanRecord], key: str) -> Any:
    return next((s.attributes[key] for s in spans if key in s.attributes), None)


def _label(value: Any) -> str | None:
    """An attribute value as a slice label: text, cut to MAX_VALUE_CHARS; empty is no value."""
    if value is None or isinstance(value, dict):
        return None
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, list | tuple):
        text = ",".join(str(v) for v in value)
    else:
        text = str(value)
    return text[:MAX_VALUE_CHARS] or None


def span_resources(spans: pa.Table, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each span's resource attributes (only `keys`), by span id. A resource is the same JSON text
    for every span of a service, so each distinct text is parsed once."""
    wanted = set(keys)
    if not wanted or "resource_attributes" not in spans.column_names:
        return {}
    parsed: dict[str | None, dict[str, Any]] = {None: {}}
    found: dict[str, dict[str, Any]] = {}
    for span_id, text in zip(
        spans["span_id"].to_pylist(), spans["resource_attributes"].to_pylist(), strict=True
    ):
        if text not in parsed:
            try:
                loaded = orjson.loads(text)
            except orjson.JSONDecodeError:
                loaded = {}
            parsed[text] = (
                {k: v for k, v in loaded.items() if k in wanted} if isinstance(loaded, dict) else {}
            )
        if parsed[text]:
            found[span_id] = parsed[text]
    return found


class DimensionCap:
    """Keeps one dimension to `max_values` values: values are admitted as they come while there is
    room, the rest are `other`; every `rerank_every` seconds the kept values become the most
    frequent ones of the traffic seen since the last ranking (ties: the values kept before). The
    clock is passed in, so the cap is pure and testable."""

    def __init__(self, max_values: int, rerank_every: float, now: float, kept: Iterable[str] = ()) -> None:
        self.max_values = max_values
        self.rerank_every = rerank_every
        self.kept: set[str] = set(list(dict.fromkeys(kept))[:max_values])
        self._seen: Counter[str] = Counter()
        self._ranked_at = now

    def apply(self, values: pa.Array | pa.ChunkedArray, now: float) -> pa.Array:
        """The values with those not kept replaced by `other` (nulls stay null); counts the traffic."""
        if now - self._ranked_at >= self.rerank_every:
            self._rerank(now)
        counts = pc.value_counts(values)
        mapping: dict[str, str] = {}
        for item in counts.to_pylist():
            value, n = item["values"], item["counts"]
            if value is None:
                continue
            if value in self._seen or len(self._seen) < _MAX_COUNTED:
                self._seen[value] += n
            if value not in self.kept and value != OTHER and len(self.kept) < self.max_values:
                self.kept.add(value)
            if value not in self.kept:
                mapping[value] = OTHER
        array = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        if not mapping:
            return array
        replaced = [mapping.get(v, v) if v is not None else None for v in array.to_pylist()]
        return pa.array(replaced, pa.string())

    def _rerank(self, now: float) -> None:
        self._ranked_at = now
        if not self._seen:
            return
        top = heapq.nlargest(
            self.max_values, self._seen.items(), key=lambda item: (item[1], item[0] in self.kept)
        )
        ranked = [value for value, _ in top if value != OTHER]
        # Fewer values seen than room: the ones kept before fill the rest.
        ranked += [v for v in sorted(self.kept) if v not in ranked][: self.max_values - len(ranked)]
        self.kept = set(ranked)
        self._seen.clear()


class SliceCaps:
    """The caps of every declared dimension, applied to the `traces` rows of an assembly round."""

    def __init__(self, caps: Mapping[str, DimensionCap]) -> None:
        self.caps = dict(caps)

    def apply(self, traces: pa.Table, now: float) -> pa.Table:
        for name, cap in self.caps.items():
            if name in traces.column_names:
                index = traces.schema.get_field_index(name)
                traces = traces.set_column(index, name, cap.apply(traces[name], now))
        return traces


class DimensionEntry(Protocol):
    """A `monitoring.dimensions` entry, as `slicing` reads it."""

    name: str
    attribute: str | None
    resource: str | None
    max_values: int


def slicing(
    store: SliceColumns, entries: Sequence[DimensionEntry], rerank_every: float, now: float
) -> tuple[tuple[Dimension, ...], SliceCaps | None]:
    """The slice dimensions of `monitoring.dimensions` (`entries`), their columns added to the store,
    and the caps on their values (ranked again every `rerank_every` seconds), starting from the
    values most frequent in the store over the last week."""
    store.add_dimensions([e.name for e in entries])
    dimensions = tuple(Dimension(e.name, e.attribute, e.resource) for e in entries)
    if not dimensions:
        return (), None
    caps = {
        e.name: DimensionCap(
            e.max_values,
            rerank_every,
            now,
            store.top_dimension_values(e.name, e.max_values),
        )
        for e in entries
    }
    return dimensions, SliceCaps(caps)
