"""Reading people's labels back (collector/feedback/stored_traces.py, collector/store/reads/labels.py):
paged by the table's key, so that verdicts given while the pages are read shift none of them; and
the reviewers' comments redacted as the traces are, before they can reach the judge.

Real parts: an in-memory DuckDB `annotations` table, read through a `SqlRunner` with a row limit.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import duckdb

from collector.feedback.stored_traces import read_labels
from collector.processors.redaction import Redactor
from collector.schema.windows import Window
from collector.store.reads.labels import labels_sql

T0 = datetime(2026, 1, 1, 12, 0, 0)
WINDOW = Window.ending(datetime(2026, 1, 2), 86_400 * 7)  # naive UTC, as stored


def table() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE annotations (trace_id VARCHAR, name VARCHAR, author VARCHAR, human_status VARCHAR, "
        "comment VARCHAR, queue VARCHAR, score_status VARCHAR, score_evaluator VARCHAR, judge_model VARCHAR, "
        "prompt_version VARCHAR, service_name VARCHAR, created_at TIMESTAMP)"
    )
    return con


def label(
    con: duckdb.DuckDBPyConnection, trace_id: str, author: str, minutes: int, comment: str = ""
) -> None:
    """A verdict as `store_annotation` stores it: the author's earlier one on the score replaced."""
    con.execute("DELETE FROM annotations WHERE trace_id = ? AND name = 'faithfulness' AND author = ?",
                [trace_id, author])  # fmt: skip
    con.execute(
        "INSERT INTO annotations VALUES (?, 'faithfulness', ?, 'fail', ?, 'random', 'pass', 'judge', 'm', "
        "'faithfulness/4', 'shop-bot', ?)",
        [trace_id, author, comment or None, T0 + timedelta(minutes=minutes)],
    )


def runner(
    con: duckdb.DuckDBPyConnection, between_pages: Callable[[int], None]
) -> Callable[[str, int], tuple[list[dict[str, Any]], bool]]:
    """A `SqlRunner` on `con` that calls `between_pages(n)` after answering its n-th query: the
    service going on with its writes while the labels are read."""
    asked = [0]

    def run(query: str, max_rows: int) -> tuple[list[dict[str, Any]], bool]:
        cursor = con.execute(query)
        names = [d[0] for d in cursor.description or []]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchmany(max_rows + 1)]
        asked[0] += 1
        between_pages(asked[0])
        return rows[:max_rows], len(rows) > max_rows

    return run


def keys(labels: list[Any]) -> list[tuple[str, str]]:
    return [(x.trace_id, x.author) for x in labels]


def test_pages_follow_the_key_so_verdicts_given_meanwhile_shift_none() -> None:
    con = table()
    for i, trace_id in enumerate(["t1", "t2", "t3", "t4", "t5"]):
        label(con, trace_id, "ana", i)

    def meanwhile(page: int) -> None:
        if page == 1:
            label(con, "t0", "bob", 10)  # a verdict on a trace before the page read
            label(con, "t2", "ana", 11)  # a verdict replaced (deleted and stored again, later)
            label(con, "t3", "aaron", 12)  # a second author on a trace not read yet

    labels = read_labels(runner(con, meanwhile), 2, WINDOW)
    # Every verdict once: none read twice (an OFFSET would read t2 again after t0 was added), none
    # skipped; those given on a later page's traces are read, those before it are not.
    assert keys(labels) == [("t1", "ana"), ("t2", "ana"), ("t3", "aaron"), ("t3", "ana"), ("t4", "ana"),
                            ("t5", "ana")]  # fmt: skip


def test_a_page_starts_after_the_last_key_quoted() -> None:
    query = labels_sql(WINDOW, "shop'bot", "faithfulness", limit=3, after=("t'1", "faithfulness", "o'neil"))
    assert "(trace_id, name, author) > ('t''1', 'faithfulness', 'o''neil')" in query
    assert query.endswith("ORDER BY trace_id, name, author LIMIT 3") and "OFFSET" not in query
    assert "(trace_id, name, author) >" not in labels_sql(WINDOW, limit=3)


def test_comments_are_redacted_as_the_traces_are() -> None:
    con = table()
    label(con, "t1", "ana", 0, comment="invented fee; ask ana@example.com")
    label(con, "t2", "ana", 1)
    labels = read_labels(runner(con, lambda _: None), 100, WINDOW, redactor=Redactor(["email"]))
    assert [x.comment for x in labels] == ["invented fee; ask [EMAIL]", None]
    plain = read_labels(runner(con, lambda _: None), 100, WINDOW)
    assert plain[0].comment == "invented fee; ask ana@example.com"
