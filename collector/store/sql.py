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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import duckdb
import orjson
import pyarrow as pa
from pydantic import Field, field_validator

from collector.config_base import Section
from collector.store.sql_columns import SIZE_MARKER, Column, plan, size_check

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
# Whether that user asked for Arrow (`Accept: application/vnd.apache.arrow.stream`) instead of JSON.
_USER_ARROW: contextvars.ContextVar[bool] = contextvars.ContextVar("user_sql_arrow", default=False)
ARROW_STREAM = "application/vnd.apache.arrow.stream"


@contextlib.contextmanager
def user_sql(config: SqlConfig, arrow: bool = False) -> Iterator[None]:
    """Queries run inside this block (on this thread) are a user's: `run_query` holds them to
    `sql.max_bytes` and `sql.memory_limit` and encodes their rows to JSON while streaming, or, with
    `arrow`, keeps them as Arrow record batches in DuckDB's own types (`QueryResult.arrow`)."""
    limits, as_arrow = _USER_LIMITS.set(config), _USER_ARROW.set(arrow)
    try:
        yield
    finally:
        _USER_LIMITS.reset(limits)
        _USER_ARROW.reset(as_arrow)


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
    arrow: pa.Table | None = None

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
            if limits is not None and _USER_ARROW.get():
                return _stream_arrow(relation, max_rows, limits, watchdog)
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
    if SIZE_MARKER in message and limits is not None:
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
        cast, changed, convert = plan(t)
        columns.append(Column(name, str(t), cast if changed else None, convert))
    outputs = [f"CAST(#{i} AS {c.cast})" if c.cast else f"#{i}" for i, c in enumerate(columns, 1)]
    if limits is not None:
        outputs.append(size_check(relation.types, limits.max_bytes))
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


def _stream_arrow(
    relation: duckdb.DuckDBPyRelation, max_rows: int, limits: SqlConfig, watchdog: _Watchdog
) -> QueryResult:
    """A user's rows as Arrow, in the types DuckDB exports (no text in place of times or wide
    integers: a client reads them as they are), held to the same row cap and `sql.max_bytes`."""
    names = list(relation.columns)
    types = [str(t) for t in relation.types]
    outputs = [f"#{i}" for i in range(1, len(names) + 1)]
    outputs.append(size_check(relation.types, limits.max_bytes))
    relation = relation.limit(max_rows + 1).project(", ".join(outputs))
    reader = relation.to_arrow_reader(BATCH_ROWS)
    batches: list[pa.RecordBatch] = []
    count, truncated = 0, False
    for batch in reader:
        if watchdog.tripped:
            raise duckdb.InterruptException("interrupted")
        if count + batch.num_rows > max_rows:
            batch, truncated = batch.slice(0, max_rows - count), True
        count += batch.num_rows
        batches.append(batch)
        if truncated:
            break
    # Without the size check's column, under the query's own column names.
    table = pa.Table.from_batches(batches, reader.schema).drop_columns([reader.schema.names[-1]])
    return QueryResult(names, types, [], truncated, arrow=table.rename_columns(names))


def _values(array: pa.Array | pa.ChunkedArray, column: Column) -> list[Any]:
    values = array.to_pylist()
    if column.convert is None:
        return values
    convert = column.convert
    return [None if v is None else convert(v) for v in values]
