"""The read-only SQL surface shared by `ragpulse sql`, `POST /api/sql` and the dashboard.

Two locks keep it read-only: every connection ragpulse opens has DuckDB's external access disabled
(no files, network, extensions, ATTACH or COPY; it cannot be re-enabled while running), and only a
single SELECT (or EXPLAIN) statement is let through, so DDL, DML, SET and PRAGMA never run.

Results are capped in rows, the statement is interrupted past its time limit, and values are
streamed as Arrow record batches and turned into JSON-safe Python values (`to_jsonable`). A user's
query (inside `user_sql`) is also held to `sql.max_bytes` and `sql.memory_limit`: see
docs/security.md#the-sql-surface for what that bounds and what it cannot.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import datetime as dt
import decimal
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import duckdb
import orjson
import pyarrow as pa
from duckdb.sqltypes import DuckDBPyType
from pydantic import Field, field_validator

from collector.config_base import Section

# The answer header of `POST /api/sql` that says the row limit cut the result.
TRUNCATED_HEADER = "X-Ragpulse-Truncated"

# EXPLAIN ANALYZE runs its statement, so EXPLAIN is let through only in front of a query. The prefix
# (leading comments, EXPLAIN, ANALYZE/ANALYSE, an option list) is cut to find the explained statement.
_EXPLAIN_PREFIX = re.compile(
    r"""^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*      # whitespace and comments
        explain\s*
        (?:analy[sz]e\b\s*)?
        (?:\([^)]*\)\s*)?                     # EXPLAIN (ANALYZE, FORMAT json)
    """,
    re.IGNORECASE | re.DOTALL | re.VERBOSE,
)

ALLOWED_STATEMENTS = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}

# Rows per Arrow record batch. The byte limit is enforced inside DuckDB before a batch is built
# (see `_size_check`), so a batch never holds much more than `max_bytes`; large batches keep the
# per-batch cost of the conversion low.
BATCH_ROWS = 2048
# How often the watchdog looks at the clock and the process's memory while a user query runs.
_POLL_SECONDS = 0.01
# The message of the DuckDB error() the size check raises; recognised to answer `_too_large`.
_SIZE_MARKER = "ragpulse: result larger than sql.max_bytes"
# The largest integers JSON parsers commonly hold exactly (orjson writes no wider ones).
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
# Significant digits a double holds exactly both ways: decimals with more are written as text.
_FLOAT_DIGITS = 15
_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4}
_UNITS.update({"kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4})
_SIZE_TEXT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_bytes(value: int | str) -> int:
    """`512MB`, `1GiB`, `1000000` (bytes): a size as a number of bytes; ValueError otherwise."""
    if isinstance(value, int):
        return value
    match = _SIZE_TEXT.match(value)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"{value!r} is not a size (e.g. 512MB, 1GiB or a number of bytes)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


class SqlConfig(Section):
    """The `sql:` config section: limits of `ragpulse sql` and `POST /api/sql`."""

    max_rows: int = Field(10_000, gt=0)
    timeout: float = Field(30.0, gt=0)
    # The largest JSON answer, in bytes; a larger one is refused (400) before it is built.
    max_bytes: int = Field(64 * 2**20, gt=0)
    # How much the service's resident memory may grow while one user query runs; null: unwatched.
    memory_limit: int | str | None = "512MB"
    # User queries running at once through `POST /api/sql`; more wait for a turn.
    max_concurrent: int = Field(2, gt=0)

    @field_validator("memory_limit")
    @classmethod
    def _valid_size(cls, value: int | str | None) -> int | str | None:
        if value is not None and parse_bytes(value) <= 0:
            raise ValueError("must be positive")
        return value

    @property
    def memory_limit_bytes(self) -> int | None:
        """`memory_limit` in bytes (None: not watched)."""
        return None if self.memory_limit is None else parse_bytes(self.memory_limit)


# The limits of the user query being run on this thread (None: one of ragpulse's own queries).
_USER_LIMITS: contextvars.ContextVar[SqlConfig | None] = contextvars.ContextVar("user_sql", default=None)


@contextlib.contextmanager
def user_sql(config: SqlConfig) -> Iterator[None]:
    """Queries run inside this block (on this thread) are a user's: `run_query` holds them to
    `sql.max_bytes` and `sql.memory_limit` and encodes their rows to JSON while streaming."""
    token = _USER_LIMITS.set(config)
    try:
        yield
    finally:
        _USER_LIMITS.reset(token)


class QueryError(ValueError):
    """A query that is refused or fails; the message is meant for the user."""


@dataclass
class QueryResult:
    """A query's columns and DuckDB types, its rows (Python values), and whether `max_rows` cut
    them. A user query's rows are encoded while streaming: `body` holds the JSON array of row
    objects and `rows` is empty."""

    columns: list[str]
    types: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool
    body: bytes | bytearray | None = None

    def records(self) -> list[dict[str, Any]]:
        """Rows as JSON-ready objects (JSON columns parsed, times as ISO 8601 text)."""
        if self.body is not None:
            return list(orjson.loads(self.body))
        return _records(self.columns, self.types, self.rows)

    def to_json(self) -> bytes | bytearray:
        """The JSON array of row objects, as `POST /api/sql` answers it."""
        return self.body if self.body is not None else orjson.dumps(self.records())


def _records(columns: list[str], types: list[str], rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    json_columns = {i for i, t in enumerate(types) if t == "JSON"}
    return [
        {
            name: _json_value(value, i in json_columns)
            for i, (name, value) in enumerate(zip(columns, row, strict=True))
        }
        for row in rows
    ]


def _json_value(value: Any, is_json: bool) -> Any:
    if value is None:
        return None
    if is_json and isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return to_jsonable(value)


def to_jsonable(value: Any) -> Any:
    """A DuckDB result value as plain JSON data: integers beyond 64 bits and decimals with more
    than 15 significant digits as their exact decimal text, intervals in seconds, times as ISO
    8601 text, UUIDs as text, bytes in base64, map keys as text."""
    if value is None or isinstance(value, str | bool | float):
        return value
    if isinstance(value, int):
        return value if _INT_MIN <= value <= _INT_MAX else str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and len(value.as_tuple().digits) <= _FLOAT_DIGITS:
            return float(value)
        return format(value, "f")
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {_key_text(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return str(value)


def _key_text(key: Any) -> str:
    """A map key as a JSON object key: text as it is, anything else as its JSON text."""
    value = to_jsonable(key)
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def check_read_only(query: str) -> str:
    """Return the one statement of `query` when it is a read-only query; raise QueryError otherwise."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryError(f"invalid SQL: {exc}") from None
    if not statements:
        raise QueryError("empty query")
    if len(statements) > 1:
        raise QueryError("only one statement per query")
    statement = statements[0]
    _refuse_unless_allowed(statement.type)
    if statement.type == duckdb.StatementType.EXPLAIN:
        _check_explained(statement.query)
    return query


def _refuse_unless_allowed(kind: duckdb.StatementType) -> None:
    if kind not in ALLOWED_STATEMENTS:
        name = kind.name.replace("_STATEMENT", "")
        raise QueryError(f"only read-only queries (SELECT, EXPLAIN) are allowed, not {name}")


def _check_explained(explain: str) -> None:
    """Refuse EXPLAIN [ANALYZE] of anything but a query: ANALYZE would execute a write."""
    prefix = _EXPLAIN_PREFIX.match(explain)
    try:
        inner = duckdb.extract_statements(explain[prefix.end() :]) if prefix else []
    except duckdb.Error:
        inner = []
    if len(inner) != 1:
        raise QueryError("only read-only queries are allowed: EXPLAIN only in front of a single SELECT")
    if inner[0].type != duckdb.StatementType.SELECT:
        name = inner[0].type.name.replace("_STATEMENT", "")
        raise QueryError(f"only read-only queries (SELECT, EXPLAIN SELECT) are allowed, not EXPLAIN {name}")


# ---------------------------------------------------------------- columns: JSON-safe casts


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
class _Column:
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


def _plan(t: DuckDBPyType) -> tuple[str, bool, _Convert | None]:
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
        sql, changed, convert = _plan(_child(t, "child"))
        suffix = "[]" if kind == "list" else f"[{dict(t.children)['size']}]"
        return sql + suffix, changed, _each(convert) if convert else None
    if kind == "struct":
        members = _members(t)
        # A struct of unnamed fields, ROW(1, 'a'): named by position for Arrow (which refuses the
        # same name twice), then a JSON array as before.
        unnamed = any(not name for name, _ in members)
        fields = [(name or f"f{i}", *_plan(field)) for i, (name, field) in enumerate(members, 1)]
        sql = "STRUCT(" + ", ".join(f"{_quote(name)} {f_sql}" for name, f_sql, _, _ in fields) + ")"
        converts = {name: c for name, _, _, c in fields if c is not None}
        changed = unnamed or any(f[2] for f in fields)
        convert = _fields(converts) if converts else None
        return sql, changed, _values_of(convert) if unnamed else convert
    if kind == "map":
        key_sql, key_changed, key_convert = _plan(_child(t, "key"))
        value_sql, value_changed, value_convert = _plan(_child(t, "value"))
        sql = f"MAP({key_sql}, {value_sql})"
        return sql, key_changed or value_changed, _pairs(key_convert, value_convert)
    if kind == "union":
        plans = [_plan(member) for _, member in _members(t)]
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
    if kind == "union" and not _plan(t)[1]:
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


def _size_check(types: list[DuckDBPyType], max_bytes: int) -> str:
    """A column (SQL) that raises an error in DuckDB once the rows so far hold more than
    `max_bytes` of text and binary values: before they are copied to Arrow and Python.

    A running sum without ORDER BY or PARTITION BY runs as DuckDB's streaming window: rows in
    result order, nothing held back."""
    row = _sum([_size(t, f"#{i}") for i, t in enumerate(types, 1)])
    running = f"sum({row}) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
    return f"CASE WHEN {running} > {max_bytes} THEN error({_literal(_SIZE_MARKER)}) END"


def _too_large(max_bytes: int) -> QueryError:
    return QueryError(
        f"the result is larger than sql.max_bytes ({max_bytes} bytes); select fewer rows or columns"
    )


# ---------------------------------------------------------------- the watchdog


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss_bytes() -> int | None:
    """This process's resident memory (Linux); None where /proc is not there."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


class _Watchdog:
    """Interrupts the cursor's query past `timeout`, or once the process's resident memory has
    grown by more than `memory_limit` bytes since the query started. DuckDB notices an interrupt
    between vectors and between planning steps; the conversion to Python checks `tripped` between
    batches."""

    def __init__(self, cursor: duckdb.DuckDBPyConnection, timeout: float, memory_limit: int | None) -> None:
        self.tripped: str | None = None  # "time" or "memory"
        self._cursor = cursor
        self._timeout = timeout
        self._memory_limit = memory_limit
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="ragpulse-sql-watchdog", daemon=True)

    def __enter__(self) -> _Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        deadline = time.monotonic() + self._timeout
        start = _rss_bytes() if self._memory_limit is not None else None
        # Without a memory watch: one sleep until the deadline, as a plain timer would.
        step = _POLL_SECONDS if start is not None else self._timeout
        while not self._done.wait(max(0.0, min(step, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                self.tripped = "time"
            elif start is not None and (_rss_bytes() or start) - start > (self._memory_limit or 0):
                self.tripped = "memory"
            else:
                continue
            self._cursor.interrupt()
            return


# ---------------------------------------------------------------- running a query


def run_query(cursor: duckdb.DuckDBPyConnection, query: str, max_rows: int, timeout: float) -> QueryResult:
    """Run one read-only query on `cursor`, at most `max_rows` rows, interrupted after `timeout` s.

    Inside `user_sql` the query is a user's: held to `sql.max_bytes` and `sql.memory_limit`, and
    its rows are encoded to JSON (`QueryResult.body`) batch by batch as they stream."""
    check_read_only(query)
    limits = _USER_LIMITS.get()
    memory_limit = limits.memory_limit_bytes if limits else None
    with _Watchdog(cursor, timeout, memory_limit) as watchdog:
        try:
            # Bound, not run (EXPLAIN ANALYZE runs here, under the watchdog). What follows builds on
            # the bound relation, never on the query's text: nothing is spliced around check_read_only.
            relation = cursor.sql(query)
        except duckdb.Error as exc:
            raise _failure(str(exc).strip(), watchdog, timeout, limits) from None
        if relation is None:
            return QueryResult([], [], [], False)
        try:
            if watchdog.tripped:  # while binding: do not bind it again for the projection
                raise duckdb.InterruptException("interrupted")
            return _stream(relation, max_rows, limits, watchdog)
        except (duckdb.Error, pa.ArrowException) as exc:
            # Errors past the first batch come through Arrow's stream interface (OSError). A LINE
            # context would quote the projection around the statement, not the user's text: cut.
            message = str(exc).split("\n\nLINE ")[0].strip()
            raise _failure(message, watchdog, timeout, limits) from None


def _failure(message: str, watchdog: _Watchdog, timeout: float, limits: SqlConfig | None) -> QueryError:
    if watchdog.tripped == "time":
        return QueryError(f"query exceeded the {timeout:g} s time limit")
    if watchdog.tripped == "memory" and limits is not None:
        return QueryError(
            f"the query used more than sql.memory_limit ({limits.memory_limit}): the service's memory "
            "grew by more than that while it ran; select less, or aggregate in the query"
        )
    if _SIZE_MARKER in message and limits is not None:
        return _too_large(limits.max_bytes)
    if message.startswith("Out of Memory Error"):
        # Without DuckDB's "Possible solutions" (SET threads, SET memory_limit): SET is refused here.
        return QueryError(
            message.split("\n\n")[0] + " (store.memory_limit); select less, or aggregate in the query"
        )
    return QueryError(message)


def _stream(
    relation: duckdb.DuckDBPyRelation, max_rows: int, limits: SqlConfig | None, watchdog: _Watchdog
) -> QueryResult:
    columns = []
    for name, t in zip(relation.columns, relation.types, strict=True):
        cast, changed, convert = _plan(t)
        columns.append(_Column(name, str(t), cast if changed else None, convert))
    outputs = [f"CAST(#{i} AS {c.cast})" if c.cast else f"#{i}" for i, c in enumerate(columns, 1)]
    if limits is not None:
        outputs.append(_size_check(relation.types, limits.max_bytes))
    # LIMIT first: rows past max_rows + 1 are never computed. One projection on top, since each
    # relation built on the statement binds it again (and DuckDB folds its constants each time).
    relation = relation.limit(max_rows + 1).project(", ".join(outputs))
    names = [c.name for c in columns]
    types = [c.type for c in columns]
    rows: list[tuple[Any, ...]] = []
    # A user's answer grows here batch by batch (no list of pieces to join: one copy at most).
    body = bytearray(b"[") if limits is not None else None
    max_bytes = limits.max_bytes if limits is not None else 0
    count = 0
    truncated = False
    for batch in relation.to_arrow_reader(BATCH_ROWS):
        if watchdog.tripped:  # memory grew while converting: stop before the next batch
            raise duckdb.InterruptException("interrupted")
        if count + batch.num_rows > max_rows:
            batch, truncated = batch.slice(0, max_rows - count), True
        count += batch.num_rows
        try:
            batch_rows = list(zip(*(_values(batch.column(i), c) for i, c in enumerate(columns)), strict=True))
            piece = orjson.dumps(_records(names, types, batch_rows)) if body is not None else b""
        except (ValueError, OverflowError, TypeError) as exc:  # a type this module mishandles
            raise QueryError(f"cannot turn the result into JSON: {exc}") from None
        if body is None:
            rows.extend(batch_rows)
        elif len(piece) > 2:  # not an empty "[]"
            # The answer with this batch: what is there, a comma, the batch's rows, the closing "]".
            if len(body) + (len(body) > 1) + len(piece) - 1 > max_bytes:
                raise _too_large(max_bytes)
            if len(body) > 1:
                body += b","
            body += memoryview(piece)[1:-1]
        if truncated:
            break
    if body is not None:
        body += b"]"
    return QueryResult(names, types, rows, truncated, body)


def _values(array: pa.Array | pa.ChunkedArray, column: _Column) -> list[Any]:
    values = array.to_pylist()
    if column.convert is None:
        return values
    convert = column.convert
    return [None if v is None else convert(v) for v in values]
