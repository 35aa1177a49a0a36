"""How the store inserts Arrow rows: every row, in order, and planned as a direct append; and how
it keeps `score_aggregates` in step with the score rows it inserts.

With two or more threads DuckDB plans `INSERT ... SELECT * FROM <arrow>` as a batch insert, which
copies the rows twice; `insert_sql` joins them positionally with an empty relation so that the plan
is a direct append (docs/architecture.md, "The store interface"). These tests hold both halves of
that: the rows are exactly the source's, and the plan is the direct one, on a real DuckDB file."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from collector.otlp.batch import concat_batches
from collector.store.config import StoreConfig
from collector.store.duckdb_rows import insert_sql
from collector.store.duckdb_store import DuckDBStore
from tests.support.helpers import named_spans_batch, seed_scores


@pytest.fixture
def store_config() -> StoreConfig:
    """`store` (conftest.py) on two threads: the case `insert_sql` is for."""
    return StoreConfig(threads=2)


def stored_names(store: DuckDBStore) -> list[str]:
    # The table the span writer appends to (`spans` is a view of it, without a row id).
    result = store.query("SELECT name FROM received_spans ORDER BY rowid", 20_000, 30)
    return [row["name"] for row in result.records()]


@pytest.mark.parametrize("sizes", [[1], [3], [2500, 1, 4000], [700] * 6])
def test_every_span_of_a_group_commit_is_stored_in_order(store: DuckDBStore, sizes: list[int]) -> None:
    """A group commit concatenates exports: a table of several Arrow chunks, some larger than
    DuckDB's 2,048-row vectors. Each row arrives once, in the order sent."""
    batches, start = [], 0
    for size in sizes:
        batches.append(named_spans_batch(f"span-{start + i:06d}" for i in range(size)))
        start += size
    batch = concat_batches(batches)
    assert batch.spans.num_rows == sum(sizes)
    store.append_spans(batch.spans, batch.events)
    assert stored_names(store) == [f"span-{i:06d}" for i in range(sum(sizes))]


def test_an_empty_table_inserts_nothing(tmp_path: Path) -> None:
    """The empty relation joined positionally adds no row, even to an empty source (a positional
    join pads the shorter side, so a one-row relation would have added a row of NULLs)."""
    with duckdb.connect(str(tmp_path / "empty.duckdb")) as con:
        con.execute("CREATE TABLE t (a BIGINT, b VARCHAR)")
        con.register("_rows", pa.table({"a": pa.array([], pa.int64()), "b": pa.array([], pa.string())}))
        con.execute(insert_sql("t", "_rows"))
        assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)


def plan_of(con: duckdb.DuckDBPyConnection, sql: str) -> str:
    return str(con.execute(f"EXPLAIN {sql}").fetchall()[0][1])


def test_an_arrow_insert_is_a_direct_append_with_two_threads(store: DuckDBStore) -> None:
    """The plain statement is a batch insert with two threads (why `insert_sql` exists); the
    store's is a direct append. Should DuckDB stop planning either way, this says so."""
    rows = named_spans_batch(str(i) for i in range(3000)).spans
    con = store._con.cursor()
    try:
        assert con.execute("SELECT current_setting('threads')").fetchone() == (2,)
        con.register("_rows", rows)
        assert "BATCH_INSERT" in plan_of(con, "INSERT INTO received_spans BY NAME SELECT * FROM _rows")
        direct = plan_of(con, insert_sql("received_spans", "_rows"))
        assert "BATCH_INSERT" not in direct
        assert "INSERT" in direct
    finally:
        con.close()


def test_aggregates_add_each_write_to_the_rows_of_its_keys(store: DuckDBStore) -> None:
    """Each write of scores is added into `score_aggregates`: to the row of a (minute, service,
    name, probe) key that has one, as a new row for a key that has none. After three writes the
    aggregates equal those computed from every score row."""
    minute, later = datetime(2026, 12, 5, 10, 1), datetime(2026, 12, 5, 10, 2)
    seed_scores(store, [minute, minute], ["faithfulness", "recall"], [0.9, 0.2])
    seed_scores(
        store,
        [minute, minute, later],
        ["faithfulness", "faithfulness", "faithfulness"],
        [0.4, None, 0.7],
        trace_ids=["a" * 32, "b" * 32, "c" * 32],
    )
    seed_scores(
        store,
        [minute],
        ["recall"],
        [None],
        statuses=["skipped"],
        services="other-bot",
        trace_ids=["d" * 32],
    )
    kept, computed = aggregates_kept_and_computed(store)
    assert len(kept) == 4  # faithfulness and recall at 10:01, faithfulness at 10:02, other-bot
    assert_same_aggregates(kept, computed)


def test_late_scores_reach_their_own_minute_behind_a_long_history(store: DuckDBStore) -> None:
    """An upsert reads `score_aggregates` only from the earliest minute it writes to (so a long
    history costs it nothing): a late trace's score, many minutes behind the newest, still lands in
    its own minute's row, and a re-assembled trace's old minute is recomputed, not duplicated."""
    minutes = [datetime(2026, 12, 5, 9, 0) + timedelta(minutes=i) for i in range(40)]
    for i, minute in enumerate(minutes):
        seed_scores(store, [minute], ["faithfulness"], [0.8], trace_ids=[f"{i:032x}"])
    newest = minutes[-1] + timedelta(minutes=1)
    seed_scores(store, [minutes[0], newest], ["faithfulness"] * 2, [0.2, 0.6], trace_ids=["a" * 32, "b" * 32])
    seed_scores(store, [minutes[3]], ["faithfulness"], [0.1], trace_ids=[f"{3:032x}"], replace=[f"{3:032x}"])
    kept, computed = aggregates_kept_and_computed(store)
    assert len(kept) == 41  # one row per minute, the late score's included
    assert_same_aggregates(kept, computed)
    first, fourth = kept[0], kept[3]
    assert (first[4], first[5], first[6]) == (2, 1, 1)  # 0.8 and the late 0.2
    assert (fourth[4], fourth[6]) == (1, 1)  # 0.8 replaced by 0.1


AGGREGATE_COLUMNS = (
    "bucket, service_name, name, probe, n, n_pass, n_fail, n_error, n_skipped, sum, sum_sq, min, max"
)


def aggregates_kept_and_computed(store: DuckDBStore) -> tuple[list[tuple], list[tuple]]:
    """`score_aggregates` as kept, and as computed from every score row, in the same order."""
    kept = store.query(f"SELECT {AGGREGATE_COLUMNS} FROM score_aggregates ORDER BY ALL", 100, 10).rows
    computed = store.query(
        "SELECT bucket, service_name, name, probe, count(*), count(*) FILTER (status = 'pass'), "
        "count(*) FILTER (status = 'fail'), count(*) FILTER (status = 'error'), "
        "count(*) FILTER (status = 'skipped'), sum(value), sum(value * value), min(value), max(value) "
        "FROM scores GROUP BY ALL ORDER BY ALL",
        100,
        10,
    ).rows
    return kept, computed


def assert_same_aggregates(kept: list[tuple], computed: list[tuple]) -> None:
    assert [row[:9] for row in kept] == [row[:9] for row in computed]
    for row, expected in zip(kept, computed, strict=True):
        assert row[9:] == pytest.approx(expected[9:], nan_ok=True)
