"""The DuckDB connection under both DuckDB backends (`DuckDBStore` on a file, `DuckLakeStore` on a
lake): one writer connection taking the span writer's group commits, a cursor per other operation (a
DuckDB cursor is a connection to the same database), the locks that make writes take turns, the
slice dimensions and the aggregates' key, writes and checkpoints, and what happens when a write fails.
`DuckDBStore` adds the store's interfaces on top.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa

from collector.schema.tables import SCORE_AGGREGATE_KEY, SCORE_AGGREGATES
from collector.schema.trace_rows import OTHER
from collector.store import duckdb_sessions as sessions
from collector.store.base import ReadOnlyStore, Store, StoreError
from collector.store.config import StoreConfig
from collector.store.disk import file_identity, probe_directory, probe_log
from collector.store.duckdb_connection import (
    checkpoint_merging,
    connect,
    migrate,
    transaction,
)
from collector.store.duckdb_feedback import has_feedback
from collector.store.duckdb_rows import insert_scores
from collector.store.health import StoreHealth
from collector.store.quiet_gate import QuietGate
from collector.store.schema_sql import sessions_view

_T = TypeVar("_T")
log = logging.getLogger(__name__)
# How long a checkpoint waits for open transactions to end before running beside them.
_QUIET_WAIT_SECONDS = 1.0


class DuckDBBase(Store):
    """A ragpulse database file: one writer connection, a cursor per operation for the rest.

    `read_only=True` opens an existing file for queries only (no migration; writes raise
    `ReadOnlyStore`); it fails with `StoreLocked` while a writer holds the file."""

    # Aggregates are kept one row per key, updated in place. A store several replicas write adds a
    # row per write instead (partial sums that readers add up, folded now and then): concurrent
    # updates of one row would fail all but one writer.
    aggregates_in_place = True
    # The table new aggregate rows go to (a lake: its partial rows, which `score_aggregates` sums).
    aggregates_table = "score_aggregates"

    def __init__(self, path: str | Path, config: StoreConfig | None = None, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        # The replica stamped on the traces it assembles and the events it exports (null here).
        self.replica: str | None = None
        self._config = config
        self._con = self._connect(config, read_only)
        # The file's identity at open: a file removed or replaced under the service is told apart
        # from one that is merely full (see `assert_writable`).
        self._identity = file_identity(self.path)
        self.health = StoreHealth(str(self.path))
        # Slice dimensions (`monitoring.dimensions`): columns of traces, scores and aggregates.
        self.dimensions: tuple[str, ...] = ()
        self._feedback_stored = False
        self._feedback_writes = 0  # since the last checkpoint they asked for (see write_feedback)
        # Sessions whose turns a committed write changed: `refresh_sessions` computes them again.
        self._touched = sessions.TouchedSessions()
        self._write_lock = threading.Lock()
        # Everything but span appends: assembled rows, scores and their aggregates, the outbox.
        # Their transactions update shared rows (score_aggregates), so they take turns instead
        # of failing on DuckDB's write-write conflicts.
        self._derived_lock = threading.Lock()
        # Alerts, notifications, canary runs and cases: rows of their own, no lock shared with the above.
        self._monitoring_lock = threading.Lock()
        # The sessions refresher's rows (`session_rollups`): written by it alone.
        self._sessions_lock = threading.Lock()
        # Every cursor's transaction, so that a checkpoint can run with none open (see checkpoint).
        self._transactions = QuietGate()
        if read_only:
            return
        try:
            self._migrate()
            self.dimensions = self._dimension_columns()
            # Until some is stored, an assembly looks for no feedback to attach.
            self._feedback_stored = has_feedback(self._con)
        except Exception:
            self._con.close()
            raise

    def _connect(self, config: StoreConfig | None, read_only: bool) -> duckdb.DuckDBPyConnection:
        return connect(self.path, config, read_only=read_only)

    def _migrate(self) -> None:
        migrate(self._con)

    @property
    def aggregate_key(self) -> tuple[str, ...]:
        """The key of `score_aggregates`: minute, service, score name, probe, and each dimension."""
        return (*SCORE_AGGREGATE_KEY, *self.dimensions)

    def _dimension_columns(self) -> tuple[str, ...]:
        with self._cursor() as con:
            rows = con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                "ORDER BY ordinal_position",
                [self.aggregates_table],
            ).fetchall()
        return tuple(r[0] for r in rows if r[0] not in SCORE_AGGREGATES.column_names)

    def add_dimensions(self, names: Sequence[str]) -> None:
        new = [n for n in names if n not in self.dimensions]
        if not new:
            return

        def body(con: duckdb.DuckDBPyConnection) -> None:
            for table in ("traces", "scores", self.aggregates_table):
                for name in new:
                    con.execute(f'ALTER TABLE {table} ADD COLUMN IF NOT EXISTS "{name}" VARCHAR')
            self._after_new_dimensions(con, (*self.dimensions, *new))

        self._write(body)
        self.dimensions = self._dimension_columns()

    def define_sessions_view(self, idle_timeout: float) -> None:
        sql = sessions_view(idle_timeout)
        self._write(lambda con: con.execute(sql), self._monitoring_lock)

    def _after_new_dimensions(self, con: duckdb.DuckDBPyConnection, dimensions: Sequence[str]) -> None:
        """What a backend does once dimension columns were added (the lake: its aggregates view)."""

    def top_dimension_values(self, name: str, limit: int, days: int = 7) -> list[str]:
        if name not in self.dimensions:
            return []
        with self._cursor() as con:
            rows = con.execute(
                f'SELECT "{name}" FROM score_aggregates WHERE "{name}" IS NOT NULL AND "{name}" <> ? '
                f"AND bucket > now()::TIMESTAMP - INTERVAL {int(days)} DAY "
                "GROUP BY ALL ORDER BY sum(n) DESC, 1 LIMIT ?",
                [OTHER, limit],
            ).fetchall()
        return [r[0] for r in rows]

    def _retrying(self, attempt: Callable[[], _T]) -> _T:
        """Run one write transaction (`attempt`); a store with concurrent writers retries conflicts."""
        return attempt()

    def _write(
        self, body: Callable[[duckdb.DuckDBPyConnection], _T], lock: threading.Lock | None = None
    ) -> _T:
        """`body` in one transaction on a cursor of its own, under `lock` (the derived-rows lock by
        default), retried as a whole where the store retries conflicts."""
        self._writable()

        def attempt() -> _T:
            with lock or self._derived_lock, self._cursor() as con, transaction(con):
                return body(con)

        return self._retrying(attempt)

    def _stamp(self, rows: pa.Table | None) -> pa.Table | None:
        """Rows of `traces` or `evaluation_outbox` with this replica's name (when there is one)."""
        if rows is None or self.replica is None or not rows.num_rows:
            return rows
        column = pa.array([self.replica] * rows.num_rows, pa.string())
        return rows.set_column(rows.schema.get_field_index("replica"), "replica", column)

    @contextlib.contextmanager
    def _cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._transactions.transaction():
            cursor = self._con.cursor()
            try:
                yield cursor
            finally:
                cursor.close()

    def _writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStore(f"{self.path} is open read-only")

    def assert_writable(self) -> None:
        if file_identity(self.path) != self._identity:
            raise StoreError(
                f"the database file {self.path} was removed or replaced while ragpulse ran; "
                "restart ragpulse (what it held is gone with it)"
            )

    def probe_write(self) -> None:
        self.assert_writable()
        probe_log(self.path)
        probe_directory(self.path.parent)
        try:
            with self._cursor() as con:
                con.execute("SELECT 1").fetchall()
        except duckdb.FatalException:
            self._reopen()

    def _reopen(self) -> None:
        """Open the file again after DuckDB invalidated its instance (a checkpoint that failed for
        lack of space): the write-ahead log holds every commit since the last good checkpoint."""
        log.warning("reopening %s: DuckDB invalidated it after a failed write", self.path)
        with self._derived_lock, self._write_lock, self._transactions.alone(_QUIET_WAIT_SECONDS):
            with contextlib.suppress(duckdb.Error):
                self._con.close()
            self._con = self._connect(self._config, self.read_only)

    def _insert_scores(
        self,
        con: duckdb.DuckDBPyConnection,
        scores: pa.Table | None,
        affected: pa.Table | None,
        slices: pa.Table,
    ) -> None:
        insert_scores(
            con, scores, affected, slices, self.aggregate_key, self.aggregates_table, self.aggregates_in_place
        )

    # ---------------------------------------------------------------- lifecycle

    def checkpoint(self) -> None:
        if self.read_only:
            return
        # DuckDB folds the log in even beside an open transaction, but keeps the blocks of rows
        # deleted since it began until a later checkpoint, and the file grows meanwhile. With both
        # write locks no write of ours is in flight; reads and monitoring writes are let finish
        # (for at most a second, span appends waiting), and new ones wait for the checkpoint.
        with self._derived_lock, self._write_lock, self._transactions.alone(_QUIET_WAIT_SECONDS):
            checkpoint_merging(self._con)

    def close(self) -> None:
        with self._write_lock:
            try:
                if not self.read_only:
                    checkpoint_merging(self._con)
            finally:
                self._con.close()
