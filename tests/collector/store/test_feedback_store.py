"""The store's feedback rows on a real DuckDB file: attached to traces however they were assembled."""

from __future__ import annotations

from pathlib import Path

from collector.feedback.items import FeedbackItem, feedback_table
from collector.schema.tables import DOCUMENTS, STEPS, TRACES
from collector.schema.trace_rows import TraceTables
from collector.store.duckdb_store import DuckDBStore


def test_feedback_on_a_trace_without_a_root_span_is_attached_under_no_span(tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "s.duckdb") as store:
        row = {"trace_id": ["a" * 32], "service_name": ["bot"], "assembly_count": [1]}
        empty = STEPS.arrow_schema().empty_table(), DOCUMENTS.arrow_schema().empty_table()
        store.write_traces(TraceTables(TRACES.arrow_table(row, 1), *empty), [])
        item = FeedbackItem(trace_id="a" * 32, name="thumbs", label="up")

        assert store.write_feedback(feedback_table([item], 1_765_000_000_000_000)) == 1

        rows = store.query("SELECT span_id, status, evaluator, service_name FROM scores", 10, 10).rows
        assert rows == [("", "pass", "human", "bot")]


def test_feedback_one_item_at_a_time_is_checkpointed_every_hundred_writes(tmp_path: Path) -> None:
    """Aggregate updates of old minutes, kept beside the table until a checkpoint, slow every later
    scan (bench/README.md, "People in the loop"); the store folds them in every 100 feedback writes."""
    db = tmp_path / "s.duckdb"
    wal = db.with_name(db.name + ".wal")
    with DuckDBStore(db) as store:
        row = {"trace_id": ["b" * 32], "service_name": ["bot"], "assembly_count": [1]}
        empty = STEPS.arrow_schema().empty_table(), DOCUMENTS.arrow_schema().empty_table()
        store.write_traces(TraceTables(TRACES.arrow_table(row, 1), *empty), [])
        store.checkpoint()
        logged = []
        for i in range(100):
            item = FeedbackItem(trace_id="b" * 32, name="thumbs", value=i % 2, feedback_id=f"f{i}")
            store.write_feedback(feedback_table([item], 1_765_000_000_000_000 + i))
            logged.append(wal.stat().st_size if wal.exists() else 0)
        assert logged[0] > 0 and logged[98] > logged[0]  # the log grew write by write...
        assert logged[99] == 0  # ...until the 100th folded it into the file
        n = store.query("SELECT count(*) FROM scores WHERE name = 'thumbs'", 10, 10).rows
        assert n == [(100,)]
