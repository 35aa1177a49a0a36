"""The house's rules that a reader relies on, checked on the source (docs/architecture.md): every SQL
statement lives in `collector/store/`, and no package imports one above it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# A string that is a SQL statement (as ragpulse writes them: keywords in capitals).
STATEMENT = re.compile(r"^\s*(SELECT|WITH|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|COPY|ATTACH)\s")


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _statements(path: Path) -> list[str]:
    """The string constants (f-strings' literal parts included) of a module that start a statement."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.JoinedStr):
            first = node.values[0] if node.values else None
            text = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if STATEMENT.match(text):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text.strip()[:60]!r}")
    return found


def test_every_sql_statement_lives_in_the_store() -> None:
    outside = [
        hit
        for package in ("collector", "evaluators", "semconv")
        for path in _modules(package)
        if not path.is_relative_to(ROOT / "collector" / "store")
        for hit in _statements(path)
    ]
    assert outside == []
    # The rule finds what it is for: the store's own modules hold statements.
    assert _statements(ROOT / "collector" / "store" / "reads" / "dashboard.py")


def test_the_store_reads_arrow_in_batches_it_sizes() -> None:
    # DuckDB's `to_arrow_table()` reserves a million rows per column for every read (69 MiB for a
    # 50-row result): the store reads through `duckdb_rows.arrow_table` (ARROW_BATCH_ROWS).
    unsized = [
        f"{path.relative_to(ROOT)}:{number}"
        for package in ("collector", "evaluators", "semconv")
        for path in _modules(package)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\.(to_arrow_table|fetch_arrow_table|arrow)\(\s*\)", line)
    ]
    assert unsized == []


def _imports(path: Path) -> set[str]:
    """Every module a file imports (also under TYPE_CHECKING and inside functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


# Each package, and what of ours it may import (a prefix); the lower a package, the less it sees.
LAYERS = {
    "semconv": ("semconv",),
    "evaluators": ("evaluators", "semconv"),
    "collector/schema": ("collector.schema", "semconv"),
    "collector/store": (
        "collector.store",
        "collector.schema",
        "collector.background",
        "collector.lifecycle",
        "collector.config_base",
        "collector.telemetry",
        "collector.otlp",
        "semconv",
    ),
    "collector/otlp": ("collector.otlp", "collector.schema", "semconv"),
}


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_no_package_imports_one_above_it(package: str) -> None:
    allowed = LAYERS[package]
    ours = ("collector", "evaluators", "semconv")
    upward = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in _modules(package)
        for name in _imports(path)
        if name.split(".")[0] in ours and not any(name == a or name.startswith(a + ".") for a in allowed)
    )
    assert upward == []
