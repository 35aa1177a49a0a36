"""SQL conditions the reads share: a string literal, a time window, a scope of scores."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from collector.schema.scope import Scope, check_dimension
from collector.schema.windows import Window

# Who gave a score (`scores.evaluator`), as SQL lists: ragpulse's own evaluators, and those from
# outside (users' feedback and apps' own evaluation events; docs/feedback.md).
OUR_EVALUATORS = "('deterministic', 'judge')"
OUTSIDE_EVALUATORS = "('human', 'external')"


def sql_string(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def sql_strings(values: Iterable[str]) -> str:
    """A comma-separated list of string literals, for `IN (...)` (`NULL` when empty: `IN (NULL)`
    matches nothing)."""
    return ", ".join(sql_string(v) for v in values) or "NULL"


def timestamp_sql(moment: datetime) -> str:
    """A SQL TIMESTAMP literal of a naive UTC time."""
    return f"TIMESTAMP '{moment.isoformat(sep=' ')}'"


def window_sql(window: Window, column: str = "bucket") -> str:
    """A predicate selecting the window on a TIMESTAMP column."""
    return f"({column} >= {timestamp_sql(window.start)} AND {column} < {timestamp_sql(window.end)})"


def scope_sql(scope: Scope, alias: str = "") -> str:
    """The scope as a SQL condition over `scores` or `score_aggregates` rows."""
    prefix = f"{alias}." if alias else ""
    clauses = [
        f"{prefix}probe IS NULL" if scope.probe is None else f"{prefix}probe = {sql_string(scope.probe)}"
    ]
    if scope.service is not None:
        clauses.append(f"{prefix}service_name = {sql_string(scope.service)}")
    for dimension, value in scope.slices:
        column = f'{prefix}"{check_dimension(dimension)}"'
        clauses.append(f"{column} IS NULL" if value is None else f"{column} = {sql_string(value)}")
    return " AND ".join(clauses)
