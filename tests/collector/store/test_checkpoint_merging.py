"""Checkpoints and row groups: automatic checkpoints (the ones commits trigger) write what was
appended and merge no row groups; explicit ones (retention rounds, shutdown) merge them.

After a checkpoint DuckDB appends to a new row group, and by default every checkpoint merges the
partial row groups back, rewriting rows it had already written: work that grows with the tables
(docs/architecture.md, "Checkpoints"). These tests hold the split on a real DuckDB file. (A
checkpoint runs only when the write-ahead log holds something: an explicit one right after an
automatic one has nothing to write, and merges nothing either.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.store.config import StoreConfig
from collector.store.duckdb_store import DuckDBStore
from tests.support.helpers import named_spans_batch

COMMITS = 4
SPANS_PER_COMMIT = 6_000  # several MiB of write-ahead log: past the 1 MiB threshold below


@pytest.fixture
def store_config() -> StoreConfig:
    """`store` (conftest.py) with a checkpoint threshold of 1 MiB, on one thread."""
    return StoreConfig(checkpoint_threshold_mb=1, threads=1)


def row_groups(store: DuckDBStore, table: str) -> int:
    rows = store.query(
        f"SELECT count(DISTINCT row_group_id) AS n FROM pragma_storage_info('{table}')", 10, 30
    ).records()
    return int(rows[0]["n"])


def vacuum_tasks(store: DuckDBStore) -> int:
    rows = store.query("SELECT current_setting('max_vacuum_tasks') AS n", 1, 30).records()
    return int(rows[0]["n"])


def append_commits(store: DuckDBStore) -> None:
    for commit in range(COMMITS):
        names = (f"span-{commit}-{i:05d}" for i in range(SPANS_PER_COMMIT))
        batch = named_spans_batch(names)
        store.append_spans(batch.spans, batch.events)
        # The commit crossed the threshold and checkpointed: the log starts over.
        assert store.storage_size().wal_bytes < 1 << 20


def append_a_few(store: DuckDBStore) -> None:
    """Rows left in the write-ahead log (below the threshold), for the next checkpoint to write."""
    batch = named_spans_batch(f"tail-{i:02d}" for i in range(10))
    store.append_spans(batch.spans, batch.events)
    assert store.storage_size().wal_bytes > 0


def test_automatic_checkpoints_merge_no_row_groups(store: DuckDBStore) -> None:
    """Each commit's checkpoint leaves its rows in a row group of their own (DuckDB's default would
    have merged them into one: 24,000 rows fit in a 122,880-row group)."""
    assert vacuum_tasks(store) == 0
    append_commits(store)
    assert row_groups(store, "received_spans") == COMMITS
    stored = store.query("SELECT count(*) AS n FROM spans", 1, 30).records()[0]["n"]
    assert stored == COMMITS * SPANS_PER_COMMIT


def test_an_explicit_checkpoint_merges_them_and_automatic_ones_stay_without(store: DuckDBStore) -> None:
    append_commits(store)
    append_a_few(store)
    store.checkpoint()
    assert row_groups(store, "received_spans") == 1
    assert vacuum_tasks(store) == 0  # back to no merging for the automatic checkpoints after it
    total = COMMITS * SPANS_PER_COMMIT + 10
    # The table the writer appends to (`spans` is a view of it, without a row id).
    names = store.query("SELECT name FROM received_spans ORDER BY rowid", total, 30).records()
    expected = [f"span-{c}-{i:05d}" for c in range(COMMITS) for i in range(SPANS_PER_COMMIT)]
    assert [r["name"] for r in names] == expected + [f"tail-{i:02d}" for i in range(10)]
    append_commits(store)  # the automatic checkpoints after it merge nothing again
    assert row_groups(store, "received_spans") == 1 + COMMITS


def test_closing_merges_too(tmp_path: Path) -> None:
    path = tmp_path / "closed.duckdb"
    store = DuckDBStore(path, StoreConfig(checkpoint_threshold_mb=1, threads=1))
    append_commits(store)
    append_a_few(store)
    store.close()
    reopened = DuckDBStore(path, StoreConfig(threads=1))
    try:
        assert row_groups(reopened, "received_spans") == 1
    finally:
        reopened.close()
