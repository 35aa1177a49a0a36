"""What a stored table is: its columns (name, DuckDB type, constraint, the schema version that added
each), the Arrow schema its rows are built in, and rows given column-wise or as dicts in that schema.
The tables themselves are defined in `collector/schema/tables.py`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

TimeUnit = Literal["us", "ns"]


@dataclass(frozen=True)
class Column:
    """One column: its name, DuckDB type, constraint (e.g. `NOT NULL`) and the schema version that
    added it (a migration creating the table at version N creates the columns of version <= N)."""

    name: str
    sql_type: str
    constraint: str = ""
    since: int = 1

    def arrow_type(self, time_unit: TimeUnit) -> pa.DataType:
        """The Arrow type rows of this column are built with before an insert."""
        return _ARROW_TYPES[self.sql_type](time_unit)


_ARROW_TYPES: dict[str, Any] = {
    "VARCHAR": lambda unit: pa.string(),
    # JSON columns travel as text; DuckDB parses them on insert.
    "JSON": lambda unit: pa.string(),
    "DOUBLE": lambda unit: pa.float64(),
    "BIGINT": lambda unit: pa.int64(),
    "INTEGER": lambda unit: pa.int32(),
    "BOOLEAN": lambda unit: pa.bool_(),
    "TIMESTAMP": lambda unit: pa.timestamp(unit),
    "VARCHAR[]": lambda unit: pa.list_(pa.string()),
    "MAP(VARCHAR, DOUBLE)": lambda unit: pa.map_(pa.string(), pa.float64()),
    "MAP(VARCHAR, BIGINT)": lambda unit: pa.map_(pa.string(), pa.int64()),
}


@dataclass(frozen=True)
class Table:
    """A stored table. `time_unit` is the unit its Arrow rows carry timestamps in: the span decoder
    keeps OTLP's nanoseconds (no conversion on the hot path), the rest use DuckDB's microseconds."""

    name: str
    columns: tuple[Column, ...]
    time_unit: TimeUnit = "us"

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"{self.name} has no column {name}")

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([(c.name, c.arrow_type(self.time_unit)) for c in self.columns])

    def arrow_table(self, columns: Mapping[str, Sequence[Any]], num_rows: int) -> pa.Table:
        """Rows given column-wise as Arrow, in this table's schema; columns not given are null.

        A name that is not a column raises KeyError, so a typo cannot drop data silently."""
        unknown = set(columns) - set(self.column_names)
        if unknown:
            raise KeyError(f"{self.name} has no column(s) {sorted(unknown)}")
        schema = self.arrow_schema()
        arrays = [
            pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(num_rows, f.type)
            for f in schema
        ]
        return pa.Table.from_arrays(arrays, schema=schema)

    def rows_table(self, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
        """Rows given as dicts, in this table's schema; a column no row names is null, a key that
        is no column is left out."""
        named = {key for row in rows for key in row}
        columns = {name: [row.get(name) for row in rows] for name in self.column_names if name in named}
        return self.arrow_table(columns, len(rows))


def columns_of(*specs: tuple[Any, ...]) -> tuple[Column, ...]:
    return tuple(Column(*spec) for spec in specs)
