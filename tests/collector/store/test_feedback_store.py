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
