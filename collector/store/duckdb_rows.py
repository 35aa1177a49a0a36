"""How rows go into a DuckDB database: bulk inserts of Arrow tables, appended directly, and the score
aggregates kept in step with the scores inserted (shared by the file and the lake backends)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator, Sequence

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

NOW = "now()::TIMESTAMP"

# Rows per record batch when the store reads a result into Arrow (`arrow_table`). DuckDB's default
# batch, 1,000,000 rows, reserves that capacity for every column of every read whatever the
# result's size: 69 MiB for a 50-row, 4-column result, let go at once and kept by the allocators in
# pieces. 10,000 rows reserve about 1 MiB, and a 500,000-row read is as fast (bench/arrow_reserve.py;
# bench/README.md, "Soak").
ARROW_BATCH_ROWS = 10_000

# score_aggregates: the aggregates of a set of score rows `s` (after its key columns).
AGGREGATES = (
    "count(*) AS n, count(*) FILTER (s.status = 'pass') AS n_pass, "
    "count(*) FILTER (s.status = 'fail') AS n_fail, count(*) FILTER (s.status = 'error') AS n_error, "
    "count(*) FILTER (s.status = 'skipped') AS n_skipped, sum(s.value) AS sum, "
    "sum(s.value * s.value) AS sum_sq, min(s.value) AS min, max(s.value) AS max"
)


def arrow_table(result: duckdb.DuckDBPyConnection) -> pa.Table:
    """The rows of an executed query (`con.execute(...)`) as an Arrow table, read `ARROW_BATCH_ROWS`
    at a time: how the store reads every result it keeps as Arrow."""
    return result.to_arrow_table(ARROW_BATCH_ROWS)


def quoted(names: Iterable[str], prefix: str = "") -> str:
    """Column names quoted (a dimension may be named like a keyword), joined by commas."""
    return ", ".join(f'{prefix}"{name}"' for name in names)


def key_match(key: Sequence[str], left: str, right: str) -> str:
    """Equality of two rows on the aggregates' key (nulls equal: a key column may be null)."""
    return " AND ".join(f'{left}."{k}" IS NOT DISTINCT FROM {right}."{k}"' for k in key)


def buckets_from(keys: pa.Table, alias: str) -> str:
    """A condition on `alias.bucket`: between the earliest and the latest bucket of `keys`
    (aggregate keys).

    The rows to update are in those buckets; as constants, the bounds let DuckDB skip the row
    groups of other minutes by their min/max, so an upsert reads the recent part of
    `score_aggregates` and `scores`, not all of their history (after a month of aggregates, the
    trace writes cost a fifth to a quarter more without it: bench/README.md). The upper bound
    matters to feedback on an old trace: its one minute is read, not every minute since (single
    feedback items slowed from 32 to 142 ms a write over 800 of them without it)."""
    bounds = pc.min_max(keys["bucket"])
    earliest, latest = bounds["min"].as_py(), bounds["max"].as_py()
    if earliest is None:
        return "TRUE"
    return (
        f"{alias}.bucket BETWEEN TIMESTAMP '{earliest.isoformat(sep=' ')}' "
        f"AND TIMESTAMP '{latest.isoformat(sep=' ')}'"
    )


def with_slices(scores: pa.Table, slices: pa.Table) -> pa.Table:
    """Score rows with their trace's probe and dimension values (`slices`: trace_id first, then a
    column per value), so scores and their aggregates are cut like the trace."""
    index = pc.index_in(scores["trace_id"], value_set=slices["trace_id"])
    for name in slices.column_names[1:]:
        column = pc.take(slices[name], index)
        if name in scores.column_names:
            scores = scores.set_column(scores.schema.get_field_index(name), name, column)
        else:
            scores = scores.append_column(name, column)
    return scores


# With two or more threads, DuckDB plans an INSERT from a source it can split (an Arrow scan) as a
# batch insert, which gathers the rows per batch and then copies them into the transaction's
# storage: for the few thousand rows the service writes at a time, that doubled the insert's CPU
# (bench/store_writes.py). Joined positionally with an empty relation, the rows are the same, in
# the same order, but the plan has a source that cannot be split, so DuckDB appends them directly,
# as it does on one thread, while queries keep every thread. (A planner that no longer does so
# costs CPU, not correctness: tests/collector/store/test_store_inserts.py checks the plan.)
_APPEND_DIRECTLY = "POSITIONAL JOIN (SELECT 1 LIMIT 0)"


def insert_sql(table: str, source: str) -> str:
    """`INSERT` of every row of `source` (a registered Arrow table) into `table`, by column name,
    in order, appended directly (see `_APPEND_DIRECTLY`)."""
    return f"INSERT INTO {table} BY NAME SELECT r.* FROM {source} r {_APPEND_DIRECTLY}"


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: pa.Table | None) -> None:
    """Insert every row of an Arrow table (None or empty: nothing) into `table`, by column name."""
    if rows is not None and rows.num_rows:
        with registered(con, "_rows", rows):
            con.execute(insert_sql(table, "_rows"))


def rows_of(table: pa.Table, trace_ids: pa.Array) -> pa.Table:
    """The rows of these traces."""
    return table.filter(pc.is_in(table["trace_id"], value_set=trace_ids))


def ids_table(trace_ids: Iterable[str]) -> pa.Table:
    """Trace ids as a one-column Arrow table, to register and join with."""
    return pa.table({"trace_id": pa.array(list(trace_ids), pa.string())})


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> Iterator[None]:
    """`table` visible to SQL on `con` as `name`, for the block."""
    con.register(name, table)
    try:
        yield
    finally:
        con.unregister(name)


def insert_scores(
    con: duckdb.DuckDBPyConnection,
    scores: pa.Table | None,
    affected: pa.Table | None,
    slices: pa.Table,
    key: Sequence[str],
    aggregates_table: str,
    in_place: bool,
) -> None:
    """Insert score rows (with their trace's `slices`), and keep the aggregates (`aggregates_table`,
    grouped by `key`) in step: the `affected` groups (of replaced scores) are recomputed from
    `scores`, the others get the new rows added: in place (a file), or as a row of partial sums per
    key that readers sum (`in_place` false: a lake, where an UPDATE rewrites files)."""
    match = functools.partial(key_match, key)
    aggregates = f"{quoted(key, 's.')}, {AGGREGATES}"
    if scores is not None and scores.num_rows:
        scores = with_slices(scores, slices)
    insert_rows(con, "scores", scores)
    if affected is not None and affected.num_rows:
        with registered(con, "_affected", affected):
            con.execute(
                f"DELETE FROM {aggregates_table} a WHERE {buckets_from(affected, 'a')} "
                f"AND EXISTS (SELECT 1 FROM _affected k WHERE {match('a', 'k')})"
            )
            con.execute(
                f"INSERT INTO {aggregates_table} BY NAME SELECT {aggregates}, {NOW} AS updated_at "
                f"FROM scores s SEMI JOIN _affected k ON {match('s', 'k')} "
                f"WHERE {buckets_from(affected, 's')} GROUP BY ALL"
            )
    if scores is None or not scores.num_rows:
        return
    skip = ""
    with registered(con, "_new_scores", scores):
        if affected is not None and affected.num_rows:
            con.register("_affected", affected)
            skip = f"ANTI JOIN _affected k ON {match('s', 'k')}"
        added_sql = f"SELECT {aggregates} FROM _new_scores s {skip} GROUP BY ALL"
        if not in_place:  # a row of partial sums per key, summed by readers
            con.execute(
                f"INSERT INTO {aggregates_table} BY NAME SELECT *, {NOW} AS updated_at FROM ({added_sql})"
            )
        else:
            added = arrow_table(con.execute(added_sql))
        if skip:
            con.unregister("_affected")
    if not in_place:
        return
    recent = buckets_from(added, "a")
    with registered(con, "_added", added):
        con.execute(
            """
            UPDATE score_aggregates a SET
                n = a.n + g.n, n_pass = a.n_pass + g.n_pass, n_fail = a.n_fail + g.n_fail,
                n_error = a.n_error + g.n_error, n_skipped = a.n_skipped + g.n_skipped,
                sum = coalesce(a.sum, 0) + coalesce(g.sum, 0),
                sum_sq = coalesce(a.sum_sq, 0) + coalesce(g.sum_sq, 0),
                min = least(a.min, g.min), max = greatest(a.max, g.max),
                updated_at = now()::TIMESTAMP
            FROM _added g WHERE """
            + f"{recent} AND {match('a', 'g')}"
        )
        con.execute(
            f"INSERT INTO score_aggregates BY NAME SELECT g.*, {NOW} AS updated_at FROM _added g "
            f"ANTI JOIN (SELECT * FROM score_aggregates a WHERE {recent}) a "
            f"ON {match('a', 'g')}"
        )
