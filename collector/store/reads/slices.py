"""The values a slice dimension took: the choices `check --by`, gates, alerts and the dashboard split
a figure by."""

from __future__ import annotations

from collector.schema.scope import Scope, check_dimension
from collector.schema.windows import Window
from collector.store.reads import Query
from collector.store.reads.predicates import scope_sql, window_sql


def slice_values_sql(window: Window, scope: Scope, dimension: str) -> str:
    """The values a dimension took in the window's aggregates within the scope, most scores first."""
    column = f'"{check_dimension(dimension)}"'
    return (
        f"SELECT {column} AS value, sum(n) AS n FROM score_aggregates "
        f"WHERE {window_sql(window)} AND {scope_sql(scope)} GROUP BY ALL ORDER BY n DESC, value NULLS LAST"
    )


def slice_values(query: Query, window: Window, scope: Scope, dimension: str) -> list[str | None]:
    """Each value of the dimension in the window (None: scores of traces without one)."""
    return [row["value"] for row in query(slice_values_sql(window, scope, dimension))]
