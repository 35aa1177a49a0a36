"""The span writer on a real DuckDB file: a batch whose export was abandoned while it waited in the
queue (its future cancelled) is committed all the same, and the writer goes on serving."""

from __future__ import annotations

from collector.store.duckdb_store import DuckDBStore
from collector.store.writer import SpanWriter
from collector.telemetry import Metrics
from tests.support.helpers import named_spans_batch


def stored_names(store: DuckDBStore) -> list[str]:
    return [row["name"] for row in store.query("SELECT name FROM spans ORDER BY name", 100, 10).records()]


def test_a_batch_whose_future_was_cancelled_in_the_queue_is_committed_and_the_writer_goes_on(
    store: DuckDBStore,
) -> None:
    writer = SpanWriter(store, Metrics(), max_queue_spans=1_000, max_commit_spans=1_000)
    abandoned = writer.submit(named_spans_batch(["abandoned"]))
    assert abandoned.cancel()  # what asyncio does to it when the export's handler is cancelled
    writer.start()
    try:
        later = writer.submit(named_spans_batch(["later"]))
        assert later.result(timeout=20) is None
    finally:
        writer.stop()
    assert stored_names(store) == ["abandoned", "later"]
    assert abandoned.cancelled()
