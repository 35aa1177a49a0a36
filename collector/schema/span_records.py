"""Stored span rows (Arrow tables of the `spans` / `span_events` shape) as `semconv.SpanRecord`s,
and the rows' copies: each span and event once, as the `spans` and `span_events` views show them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from collector.schema.tables import EVENT_KEY, SPAN_KEY
from semconv import EventRecord, SpanRecord

SPAN_COLUMNS = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "kind",
    "service_name",
    "start_time",
    "end_time",
    "status_code",
    "status_message",
    "attributes",
    "scope_name",
)
EVENT_COLUMNS = ("trace_id", "span_id", "time", "name", "attributes")


def _micros(column: pa.ChunkedArray | pa.Array) -> list[int | None]:
    """Timestamps of any unit as integer microseconds since the epoch."""
    return pc.cast(pc.cast(column, pa.timestamp("us"), safe=False), pa.int64()).to_pylist()


def _json_object(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def span_records(spans: pa.Table, events: pa.Table | None = None) -> list[SpanRecord]:
    """Records of every span row, with each span's events attached in time order."""
    by_span: dict[tuple[str, str], list[EventRecord]] = defaultdict(list)
    if events is not None and events.num_rows:
        times = _micros(events["time"])
        for trace_id, span_id, time_us, name, attrs in zip(
            events["trace_id"].to_pylist(),
            events["span_id"].to_pylist(),
            times,
            events["name"].to_pylist(),
            events["attributes"].to_pylist(),
            strict=True,
        ):
            by_span[(trace_id, span_id)].append(EventRecord(name or "", time_us, _json_object(attrs)))
    columns = {
        name: spans[name].to_pylist() for name in SPAN_COLUMNS if name not in ("start_time", "end_time")
    }
    starts = _micros(spans["start_time"])
    ends = _micros(spans["end_time"])
    records = []
    for i in range(spans.num_rows):
        trace_id = columns["trace_id"][i]
        span_id = columns["span_id"][i]
        span_events = by_span.get((trace_id, span_id), [])
        span_events.sort(key=lambda e: e.time_us or 0)
        records.append(
            SpanRecord(
                trace_id=trace_id,
                span_id=span_id,
                parent_span_id=columns["parent_span_id"][i] or None,
                name=columns["name"][i] or "",
                kind=columns["kind"][i] or "INTERNAL",
                start_us=starts[i],
                end_us=ends[i],
                status_code=columns["status_code"][i] or "UNSET",
                status_message=columns["status_message"][i] or None,
                attributes=_json_object(columns["attributes"][i]),
                service_name=columns["service_name"][i],
                scope_name=columns["scope_name"][i],
                events=span_events,
            )
        )
    return records


def records_by_trace(records: list[SpanRecord]) -> dict[str, list[SpanRecord]]:
    grouped: dict[str, list[SpanRecord]] = defaultdict(list)
    for record in records:
        grouped[record.trace_id].append(record)
    return grouped


def last_received(spans: pa.Table, events: pa.Table | None = None) -> dict[str, int]:
    """The latest `received_at` (µs) per trace of a spans table and, when given, its events (those
    sent as logs arrive on their own; events stored before the column existed have none)."""
    parts = [spans.select(["trace_id", "received_at"])]
    if events is not None and events.num_rows and "received_at" in events.column_names:
        times = pc.cast(events["received_at"], spans.schema.field("received_at").type, safe=False)
        parts.append(pa.table({"trace_id": events["trace_id"], "received_at": times}))
    table = pa.concat_tables(parts, promote_options="permissive")
    if not table.num_rows:
        return {}
    grouped = table.group_by("trace_id").aggregate([("received_at", "max")])
    return {
        trace_id: received
        for trace_id, received in zip(
            grouped["trace_id"].to_pylist(), _micros(grouped["received_at_max"]), strict=True
        )
        if received is not None
    }


def first_copies(rows: pa.Table, key: Sequence[str]) -> pa.Table:
    """`rows` (in the order they were committed) without the rows whose `key` came before: the first
    copy of each span (`SPAN_KEY`) or event (`EVENT_KEY`), as the store's views keep the first
    stored. Rows that repeat no key, nearly always, come back as they are after one grouping."""
    if rows.num_rows < 2:
        return rows
    keys = rows.select(list(key))
    if keys.group_by(list(key), use_threads=False).aggregate([]).num_rows == rows.num_rows:
        return rows
    numbered = keys.append_column("_row", pa.array(range(rows.num_rows), pa.int64()))
    first = numbered.group_by(list(key), use_threads=False).aggregate([("_row", "min")])["_row_min"]
    return rows.take(pc.take(first, pc.sort_indices(first)))


def _keyed(rows: pa.Table, key: Sequence[str], received: str) -> pa.Table:
    """The key columns of `rows` and their receive time as `received`, in types that compare across
    the writer's rows and the store's: times as integer microseconds (the store keeps no more)."""

    def comparable(column: pa.ChunkedArray) -> pa.ChunkedArray:
        if pa.types.is_timestamp(column.type):
            return pc.cast(pc.cast(column, pa.timestamp("us"), safe=False), pa.int64())
        return pc.cast(column, pa.string()) if pa.types.is_large_string(column.type) else column

    columns = {name: comparable(rows[name]) for name in key}
    columns[received] = comparable(rows["received_at"])
    return pa.table(columns)


def _repeats(late: pa.Table, first: pa.Table | None, key: Sequence[str]) -> pa.Table:
    """(trace_id, repeat) for each late row: whether it repeats a row stored before it, i.e. the
    first copy of its key (in `first`) is another row, one received at another time."""
    if first is None or not first.num_rows:
        return pa.table({"trace_id": late["trace_id"], "repeat": pa.repeat(False, late.num_rows)})
    joined = _keyed(late, key, "at").join(
        _keyed(first, key, "first_at"), keys=list(key), join_type="left outer", use_threads=False
    )
    repeat = pc.fill_null(pc.not_equal(joined["first_at"], joined["at"]), False)
    return pa.table({"trace_id": joined["trace_id"], "repeat": repeat})


def repeats_only(late: tuple[pa.Table, pa.Table | None], first: tuple[pa.Table, pa.Table | None]) -> set[str]:
    """The traces whose late rows (spans, events) all repeat rows stored before them: `first` holds
    the first copies of their spans and events (`Store.read_spans`). A late row that is itself a
    first copy (the same receive time) is new, and so is one whose key has no first copy there; a
    trace with no late row is not among them."""
    parts = [_repeats(late[0], first[0], SPAN_KEY)]
    if late[1] is not None and late[1].num_rows:
        parts.append(_repeats(late[1], first[1], EVENT_KEY))
    rows = pa.concat_tables(parts)
    if not rows.num_rows:
        return set()
    grouped = rows.group_by("trace_id", use_threads=False).aggregate([("repeat", "all")])
    return set(pc.filter(grouped["trace_id"], grouped["repeat_all"]).to_pylist())
