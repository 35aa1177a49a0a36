"""The columns of a user's query made safe for JSON: which DuckDB types pass to Python as they are,
which are cast to text inside DuckDB (integers past 64 bits, times, bits, geometry), how each
value is converted once in Python, and the SQL that adds up a row's bytes so that a result past
`sql.max_bytes` fails inside DuckDB, before it reaches Arrow (`collector.store.sql` runs the query)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from duckdb.sqltypes import DuckDBPyType

# The error a result past `sql.max_bytes` raises inside DuckDB (`size_check`), told apart by its text.
SIZE_MARKER = "ragpulse: result larger than sql.max_bytes"

# Types Arrow carries to Python faithfully and fast: passed through as they are.
_PASSED = {
    "boolean", "tinyint", "smallint", "integer", "bigint", "utinyint", "usmallint", "uinteger",
    "ubigint", "float", "double", "decimal", "varchar", "blob", "uuid", "interval", "enum",
}  # fmt: skip
# Integers wider than 64 bits: Arrow would carry them as 38-digit decimals, which a UHUGEINT
# overflows (silently: 2^128 - 1 arrives as -1). As text, then Python's int.
_WIDE_INTEGERS = {"hugeint", "uhugeint", "bignum", "varint"}
# Times as DuckDB's text, parsed back in Python: Arrow's conversion fails on values outside
# Python's range (infinity, year 294000), drops a TIME WITH TIME ZONE's offset and refuses
# nanoseconds, and is four times slower than parsing the text.
_TEMPORAL: dict[str, Callable[[str], Any]] = {
    "date": dt.date.fromisoformat,
    "timestamp": dt.datetime.fromisoformat,
    "timestamp_s": dt.datetime.fromisoformat,
    "timestamp_ms": dt.datetime.fromisoformat,
    "timestamp_ns": dt.datetime.fromisoformat,
    "timestamp with time zone": dt.datetime.fromisoformat,
    "time": dt.time.fromisoformat,
    "time_ns": dt.time.fromisoformat,
    "time with time zone": dt.time.fromisoformat,
}
_Convert = Callable[[Any], Any]


@dataclass
class Column:
    """One result column: its name and DuckDB type, the type it is cast to before Arrow (None: as
    it is) and the conversion of its Arrow values to Python (None: as they come)."""

    name: str
    type: str
    cast: str | None
    convert: _Convert | None


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _members(t: DuckDBPyType) -> list[tuple[str, DuckDBPyType]]:
    """The child types of a nested type (a list's `child`, a struct's fields, a map's `key` and
    `value`, a union's members; not an array's `size` nor a union's tag)."""
    members = [(name, child) for name, child in t.children if isinstance(child, DuckDBPyType)]
    return members[1:] if t.id == "union" else members


def _child(t: DuckDBPyType, name: str) -> DuckDBPyType:
    return dict(_members(t))[name]


def plan(t: DuckDBPyType) -> tuple[str, bool, _Convert | None]:
    """For values of type `t`: the type to cast them to (SQL), whether it differs from `t`, and
    the conversion of their Arrow values to Python. Types not known to be safe become text."""
    kind = t.id
    if kind in _PASSED:
        # An enum inside a cast nested value is cast to its label: the same text Arrow gives.
        sql = "VARCHAR" if kind == "enum" else str(t)
        return sql, False, _interval if kind == "interval" else None
    if kind in _WIDE_INTEGERS:
        return "VARCHAR", True, int
    if kind in _TEMPORAL:
        return "VARCHAR", True, _parser(_TEMPORAL[kind])
    if kind in ("list", "array"):
        sql, changed, convert = plan(_child(t, "child"))
        suffix = "[]" if kind == "list" else f"[{dict(t.children)['size']}]"
        return sql + suffix, changed, _each(convert) if convert else None
    if kind == "struct":
        members = _members(t)
        # A struct of unnamed fields, ROW(1, 'a'): named by position for Arrow (which refuses the
        # same name twice), then a JSON array as before.
        unnamed = any(not name for name, _ in members)
        fields = [(name or f"f{i}", *plan(field)) for i, (name, field) in enumerate(members, 1)]
        sql = "STRUCT(" + ", ".join(f"{_quote(name)} {f_sql}" for name, f_sql, _, _ in fields) + ")"
        converts = {name: c for name, _, _, c in fields if c is not None}
        changed = unnamed or any(f[2] for f in fields)
        convert = _fields(converts) if converts else None
        return sql, changed, _values_of(convert) if unnamed else convert
    if kind == "map":
        key_sql, key_changed, key_convert = plan(_child(t, "key"))
        value_sql, value_changed, value_convert = plan(_child(t, "value"))
        sql = f"MAP({key_sql}, {value_sql})"
        return sql, key_changed or value_changed, _pairs(key_convert, value_convert)
    if kind == "union":
        plans = [plan(member) for _, member in _members(t)]
        if not any(changed or convert for _, changed, convert in plans):
            return str(t), False, None  # Arrow gives the value of the member that is set
    # Unions of members that need converting (Arrow gives the value, not which member it is),
    # BIT (Arrow: DuckDB's internal bytes), GEOMETRY, VARIANT and types to come: DuckDB's text.
    return "VARCHAR", True, None


def _parser(parse: Callable[[str], Any]) -> _Convert:
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError:  # 'infinity', a year beyond 9999: DuckDB's text says it best
            return text

    return convert


def _interval(value: Any) -> Any:
    """An Arrow interval (months, days, nanoseconds) as a timedelta; a month counts 30 days, as
    in DuckDB's own conversion. Seconds (a float) beyond what a timedelta holds."""
    days = value.months * 30 + value.days
    try:
        return dt.timedelta(days=days, microseconds=value.nanoseconds // 1000)
    except OverflowError:
        return days * 86400.0 + value.nanoseconds / 1e9


def _each(convert: _Convert) -> _Convert:
    return lambda values: [None if v is None else convert(v) for v in values]


def _fields(converts: dict[str, _Convert]) -> _Convert:
    def convert(struct: dict[str, Any]) -> dict[str, Any]:
        return {k: v if v is None or k not in converts else converts[k](v) for k, v in struct.items()}

    return convert


def _values_of(convert: _Convert | None) -> _Convert:
    return lambda struct: list((convert(struct) if convert else struct).values())


def _pairs(key_convert: _Convert | None, value_convert: _Convert | None) -> _Convert:
    """Arrow gives a map as (key, value) pairs: a dict of them (keys made hashable)."""

    def convert(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
        out = {}
        for key, value in pairs:
            if key_convert is not None and key is not None:
                key = key_convert(key)
            if value_convert is not None and value is not None:
                value = value_convert(value)
            out[_hashable(key)] = value
        return out

    return convert


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    if isinstance(key, dict):
        return tuple((k, _hashable(v)) for k, v in key.items())
    return key


# ---------------------------------------------------------------- the size check inside DuckDB


def _size(t: DuckDBPyType, expr: str, depth: int = 0) -> str | None:
    """SQL for a lower bound of the JSON bytes of `expr`, a value of type `t`: the bytes of its
    text and binary values. None for a value of about fixed size (counted as 1)."""
    kind = t.id
    if kind == "varchar":
        return f"strlen({expr})"
    if kind == "blob":
        return f"octet_length({expr})"
    if kind in _PASSED or kind in _WIDE_INTEGERS or kind in _TEMPORAL:
        return None
    if kind in ("list", "array"):
        return _elements_size(_child(t, "child"), expr, depth)
    if kind == "map":
        keys = _elements_size(_child(t, "key"), f"map_keys({expr})", depth)
        values = _elements_size(_child(t, "value"), f"map_values({expr})", depth)
        return f"coalesce({keys}, 0) + coalesce({values}, 0)"
    if kind == "struct":
        parts = [
            _size(f, f"struct_extract_at({expr}, {i})", depth) for i, (_, f) in enumerate(_members(t), 1)
        ]
        return _sum(parts)
    if kind == "union" and not plan(t)[1]:
        members = [_size(m, f"union_extract({expr}, {_literal(name)})", depth) for name, m in _members(t)]
        return _sum([p for p in members if p is not None]) if any(members) else None
    # What goes out as DuckDB's text (BIT, GEOMETRY, VARIANT, ...): the length of that text.
    return f"strlen(CAST({expr} AS VARCHAR))"


def _elements_size(element: DuckDBPyType, expr: str, depth: int) -> str:
    """A lower bound of the JSON bytes of the list `expr`: its elements', at least one each."""
    var = f"v{depth}"
    size = _size(element, var, depth + 1)
    if size is None:
        return f"len({expr})"
    return f"list_sum(list_transform({expr}, lambda {var}: coalesce({size}, 0) + 1))"


def _sum(parts: list[str | None]) -> str:
    return " + ".join(f"coalesce({p}, 0)" if p else "1" for p in parts) or "0"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def size_check(types: list[DuckDBPyType], max_bytes: int) -> str:
    """A column (SQL) that raises an error in DuckDB once the rows so far hold more than
    `max_bytes` of text and binary values: before they are copied to Arrow and Python.

    A running sum without ORDER BY or PARTITION BY runs as DuckDB's streaming window: rows in
    result order, nothing held back."""
    row = _sum([_size(t, f"#{i}") for i, t in enumerate(types, 1)])
    running = f"sum({row}) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
    return f"CASE WHEN {running} > {max_bytes} THEN error({_literal(SIZE_MARKER)}) END"
