"""The read-only SQL surface shared by `ragpulse sql` and `POST /api/sql`.

Two locks keep it read-only: every connection ragpulse opens has DuckDB's external access disabled
(no files, network, extensions, ATTACH or COPY; it cannot be re-enabled while running), and only a
single SELECT (or EXPLAIN) statement is let through, so DDL, DML, SET and PRAGMA never run.
Results are capped in rows and the statement is interrupted past its time limit.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import re
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import duckdb
import orjson
from pydantic import Field

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


class SqlConfig(Section):
    """The `sql:` config section: limits of `ragpulse sql` and `POST /api/sql`."""

    max_rows: int = Field(10_000, gt=0)
    timeout: float = Field(30.0, gt=0)


class QueryError(ValueError):
    """A query that is refused or fails; the message is meant for the user."""


@dataclass
class QueryResult:
    columns: list[str]
    types: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool

    def records(self) -> list[dict[str, Any]]:
        """Rows as JSON-ready objects (JSON columns parsed, times as ISO 8601 text)."""
        json_columns = {i for i, t in enumerate(self.types) if t == "JSON"}
        return [
            {
                name: _json_value(value, i in json_columns)
                for i, (name, value) in enumerate(zip(self.columns, row, strict=True))
            }
            for row in self.rows
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
    """A DuckDB result value as plain JSON data."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return str(value)


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


def run_query(cursor: duckdb.DuckDBPyConnection, query: str, max_rows: int, timeout: float) -> QueryResult:
    """Run one read-only query on `cursor`, at most `max_rows` rows, interrupted after `timeout` s."""
    check_read_only(query)
    timer = threading.Timer(timeout, cursor.interrupt)
    timer.start()
    try:
        cursor.execute(query)
        description = cursor.description or []
        rows = cursor.fetchmany(max_rows + 1)
    except duckdb.InterruptException:
        raise QueryError(f"query exceeded the {timeout:g} s time limit") from None
    except duckdb.Error as exc:
        raise QueryError(str(exc).strip()) from None
    finally:
        timer.cancel()
    return QueryResult(
        columns=[d[0] for d in description],
        types=[str(d[1]) for d in description],
        rows=rows[:max_rows],
        truncated=len(rows) > max_rows,
    )
