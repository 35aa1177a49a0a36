"""Printing results: rows as a table, CSV or JSON, and score tables with rich."""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Sequence
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table


def cell(value: Any) -> str:
    """One value as table or CSV text (JSON for lists and objects, empty for null)."""
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    return str(value)


def print_records(
    records: list[dict[str, Any]], output_format: str, columns: Sequence[str] | None = None
) -> None:
    """Rows (column name -> value) on stdout as `table`, `csv` or `json` (one JSON array); `columns`:
    the header when there is no row to read it from."""
    if output_format == "json":
        sys.stdout.write(orjson.dumps(records).decode() + "\n")
        return
    columns = list(records[0]) if records else list(columns or [])
    if output_format == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([cell(r[c]) for c in columns] for r in records)
        sys.stdout.write(buffer.getvalue())
        return
    table = Table(show_lines=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for record in records:
        table.add_row(*(cell(record[c]) for c in columns))
    console = Console()
    console.print(table)
    console.print(f"{len(records)} row(s)", style="dim")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None) -> None:
    """A plain table of text cells (reports such as calibration's)."""
    table = Table(*headers)
    for row in rows:
        table.add_row(*row)
    Console(width=width).print(table)
