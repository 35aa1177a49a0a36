"""Which scores a figure counts: one service or every service, the app's own traffic or one probe's,
and values of slice dimensions (`monitoring.dimensions`). Gates, regressions, alerts and the
dashboard all cut `scores` and `score_aggregates` through a `Scope`, so they agree on what a slice is.

Probe traffic (the golden questions `probes:` sends) is kept apart by default: a figure of the app's
own traffic never mixes in a probe's, and a probe's figures are asked for by its name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from collector.monitoring.windows import Window, sql_string

# The label of a slice whose traces had no value for the dimension.
NO_VALUE = "(none)"
_DIMENSION = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


@dataclass(frozen=True)
class Scope:
    service: str | None = None  # None: every service together
    probe: str | None = None  # None: the app's own traffic; a name: that probe's traffic
    # (dimension, value) pairs every counted score has; a None value: scores without one.
    slices: tuple[tuple[str, str | None], ...] = ()

    @classmethod
    def of(
        cls,
        service: str | None = None,
        probe: str | None = None,
        where: Mapping[str, str | None] | None = None,
    ) -> Scope:
        return cls(service, probe, tuple(sorted((where or {}).items())))

    def with_slice(self, dimension: str, value: str | None) -> Scope:
        return replace(self, slices=(*self.slices, (check_dimension(dimension), value)))

    def sql(self, alias: str = "") -> str:
        """The scope as a SQL condition over `scores` or `score_aggregates` rows."""
        prefix = f"{alias}." if alias else ""
        clauses = [
            f"{prefix}probe IS NULL" if self.probe is None else f"{prefix}probe = {sql_string(self.probe)}"
        ]
        if self.service is not None:
            clauses.append(f"{prefix}service_name = {sql_string(self.service)}")
        for dimension, value in self.slices:
            column = f'{prefix}"{check_dimension(dimension)}"'
            clauses.append(f"{column} IS NULL" if value is None else f"{column} = {sql_string(value)}")
        return " AND ".join(clauses)

    @property
    def slice_label(self) -> str | None:
        """`category=refunds, version=1.4` (None: no slice)."""
        if not self.slices:
            return None
        return ", ".join(f"{d}={NO_VALUE if v is None else v}" for d, v in self.slices)

    def describe(self) -> str:
        parts = [f"service {self.service}" if self.service else "every service"]
        if self.probe is not None:
            parts.append(f"probe {self.probe}")
        if self.slices:
            parts.append(self.slice_label or "")
        return ", ".join(parts)


def check_dimension(name: str) -> str:
    """A dimension name safe to put in SQL as a quoted column (ValueError otherwise)."""
    if not _DIMENSION.match(name):
        raise ValueError(f"not a dimension name: {name!r}")
    return name


def parse_slices(texts: Iterable[str]) -> dict[str, str | None]:
    """`category=refunds` options as a mapping (`category=(none)`: the traces without a value)."""
    found: dict[str, str | None] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"expected DIMENSION=VALUE, got {text!r}")
        found[check_dimension(name.strip())] = None if value == NO_VALUE else value
    return found


def slice_values_sql(window: Window, scope: Scope, dimension: str) -> str:
    """The values a dimension took in the window's aggregates within the scope, most scores first."""
    column = f'"{check_dimension(dimension)}"'
    return (
        f"SELECT {column} AS value, sum(n) AS n FROM score_aggregates "
        f"WHERE {window.sql('bucket')} AND {scope.sql()} GROUP BY ALL ORDER BY n DESC, value NULLS LAST"
    )


def slice_values(
    query: Callable[[str], list[dict[str, Any]]], window: Window, scope: Scope, dimension: str
) -> list[str | None]:
    """Each value of the dimension in the window (None: scores of traces without one)."""
    return [row["value"] for row in query(slice_values_sql(window, scope, dimension))]
