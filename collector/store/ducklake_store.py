"""The DuckLake backend (`store.backend: ducklake`): one lake that several replicas write.

A DuckLake keeps its catalog in PostgreSQL and its rows as Parquet files under `store.data_path`.
Every replica attaches the same lake and writes it through DuckDB, as the file backend writes its
file: the SQL of `DuckDBStore` runs unchanged, with four differences:

- **Conflicts are retried.** DuckLake commits optimistically: two transactions that insert into one
  table both commit, but a delete or update conflicts with any other change to its table committed
  meanwhile. Every write transaction is therefore run again, whole, when it loses such a race.
- **Hot writes only append.** Each write appends a row of partial sums per key to
  `score_aggregate_parts` instead of updating one row in place; `score_aggregates` is a view that
  sums them (one row per key, as on the file), and maintenance folds the parts now and then.
- **Who assembles a trace is decided in the catalog.** The Collector's load-balancing exporter sends
  all spans of a trace to one replica, but not while replicas come and go. Claims in PostgreSQL
  make each set of spans assembled once (`LakeCoordinator`, docs/scale-out.md has the rule).
- **Reading is separate.** SQL from users runs on a second DuckDB instance that attached the lake
  read-only: DuckLake's own PostgreSQL connection then refuses writes too (a `postgres_execute`
  in a SELECT included).

Extensions are loaded from the `duckdb-extension-ducklake` and `duckdb-extension-postgres-scanner`
wheels (`pip install 'ragpulse[ducklake]'`), by path: nothing is downloaded at run time; with data on
S3 (`s3://`), `duckdb-extension-httpfs` too, with a secret made from the AWS SDKs' variables.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from collector.schema.tables import SCORE_AGGREGATE_KEY
from collector.schema.trace_rows import TraceTables
from collector.store.base import DeletedRows, StorageSize
from collector.store.config import StoreConfig
from collector.store.disk import probe_directory
from collector.store.duckdb_rows import arrow_table, key_match, quoted
from collector.store.duckdb_store import DuckDBStore
from collector.store.ducklake_connection import (
    AGGREGATE_PARTS,
    FLUSH_INLINED,
    LAKE,
    MAINTENANCE_MEMORY_MB,
    aggregates_view,
    megabytes,
    migrate_lake,
    open_lake,
    retry_conflicts,
    summed_parts,
)
from collector.store.ducklake_coordination import LakeCoordinator
from collector.store.reads.predicates import sql_string
from collector.store.sql import QueryResult, run_query

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class DuckLakeStore(DuckDBStore):
    """The lake: `DuckDBStore`'s SQL on a DuckLake, with conflicts retried, appended aggregates,
    claims for assembly and a read-only instance for users' SQL."""

    aggregates_in_place = False
    aggregates_table = AGGREGATE_PARTS
    shared = True

    def __init__(self, config: StoreConfig, read_only: bool = False) -> None:
        self.config = config
        self._reader: duckdb.DuckDBPyConnection | None = None
        self._reader_lock = threading.Lock()
        super().__init__(config.data_path or "", config, read_only=read_only)
        self.coordinator: LakeCoordinator | None = None
        # One thread registers a group commit's arrivals in the catalog while the commit runs.
        self._registrar = ThreadPoolExecutor(1, thread_name_prefix="ragpulse-lake-arrivals")
        self._redo: set[str] = set()  # traces claimed again after an unmarked claim (see `claim`)
        if not read_only:
            self.replica = config.replica_name
            try:
                self.coordinator = LakeCoordinator(self._con, self.replica)
            except Exception:
                self._con.close()
                raise

    def _connect(self, config: StoreConfig | None, read_only: bool) -> duckdb.DuckDBPyConnection:
        assert config is not None
        return open_lake(config, read_only)

    @contextlib.contextmanager
    def _cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with super()._cursor() as cursor:
            cursor.execute(f"USE {LAKE}")  # a cursor starts in the in-memory database
            yield cursor

    def _migrate(self) -> None:
        retry_conflicts(lambda: migrate_lake(self._con), "schema setup")

    def add_dimensions(self, names: Sequence[str]) -> None:
        if set(names) - set(self.dimensions):
            # Rows a writer inlined before the column existed are flushed first (see `open_lake`).
            retry_conflicts(lambda: self._maintenance_step(FLUSH_INLINED), "maintenance")
        super().add_dimensions(names)

    def _after_new_dimensions(self, con: duckdb.DuckDBPyConnection, dimensions: Sequence[str]) -> None:
        con.execute(aggregates_view((*SCORE_AGGREGATE_KEY, *dimensions)))

    def _retrying(self, attempt: Callable[[], _T]) -> _T:
        return retry_conflicts(attempt)

    # ---------------------------------------------------------------- several replicas

    def append_spans(self, spans: pa.Table, events: pa.Table) -> None:
        if self.coordinator is None or not spans.num_rows:
            super().append_spans(spans, events)
            return
        # Registered beside the commit, both done before the export is acknowledged: a replica
        # that assembles one of these traces then knows to read these spans back. Registered but
        # not committed (the commit fails) costs that replica a read back, nothing more.
        counts = pc.value_counts(spans["trace_id"])
        arrived = dict(
            zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)
        )
        registered = self._registrar.submit(self.coordinator.register, arrived)
        try:
            super().append_spans(spans, events)
        finally:
            registered.result()

    def traces_elsewhere(self, trace_ids: Sequence[str]) -> set[str]:
        assert self.coordinator is not None
        return self.coordinator.elsewhere(trace_ids)

    def claim_traces(self, span_counts: Mapping[str, int]) -> dict[str, int | None]:
        assert self.coordinator is not None
        won = self.coordinator.claim(span_counts)
        self._redo.update(t for t, (_, redo) in won.items() if redo)
        return {t: revision for t, (revision, _) in won.items()}

    def write_traces(self, tables: TraceTables, replace: Sequence[str]) -> None:
        # A redone claim replaces whatever its first attempt may have stored.
        redone = self._redo.intersection(tables.traces["trace_id"].to_pylist())
        self._redo -= redone
        super().write_traces(tables, sorted(set(replace) | redone))
        if self.coordinator is not None and tables.traces.num_rows:
            # After the commit: a claim left undone (a crash before this) is redone, never lost.
            self.coordinator.mark_assembled(tables.traces["trace_id"].to_pylist())

    def assembly_counts(self, trace_ids: Iterable[str]) -> dict[str, int]:
        # The claims know every replica's assemblies, by key: no scan of the lake's traces.
        if self.coordinator is None:
            return super().assembly_counts(trace_ids)
        return self.coordinator.revisions(trace_ids)

    def is_leader(self) -> bool:
        return self.coordinator is not None and self.coordinator.is_leader()

    def maintain(self) -> None:
        """Fold aggregate rows, merge small Parquet files, expire old snapshots and delete the files
        nothing refers to any more. Each step is its own transaction, retried on conflicts."""
        if self.read_only:
            return
        self._adopt_departed()
        retry_conflicts(self._fold_aggregates, "aggregate folding")
        with self._maintenance_memory():
            for step in (
                FLUSH_INLINED,
                f"CALL ducklake_merge_adjacent_files('{LAKE}')",
                f"CALL ducklake_expire_snapshots('{LAKE}', older_than => now() - INTERVAL 1 HOUR)",
                f"CALL ducklake_cleanup_old_files('{LAKE}', older_than => now() - INTERVAL 1 HOUR)",
            ):
                retry_conflicts(lambda step=step: self._maintenance_step(step), "maintenance")  # type: ignore[misc]

    @contextlib.contextmanager
    def _maintenance_memory(self) -> Iterator[None]:
        """DuckLake's file merge allocates 128 MiB blocks that cannot spill: below
        MAINTENANCE_MEMORY_MB, the memory limit is raised to it while maintenance runs."""
        configured = self.config.memory_limit
        with self._cursor() as con:
            row = con.execute("SELECT current_setting('memory_limit')").fetchone()
            current_mb = megabytes(str(row[0])) if row else None
            raise_it = current_mb is not None and current_mb < MAINTENANCE_MEMORY_MB
            if raise_it:
                con.execute(f"SET memory_limit = '{MAINTENANCE_MEMORY_MB}MB'")
        try:
            yield
        finally:
            if raise_it:
                with self._cursor() as con:
                    con.execute(
                        f"SET memory_limit = {sql_string(configured)}" if configured else "RESET memory_limit"
                    )

    def _adopt_departed(self) -> None:
        """The pending judge work and unexported evaluation events of departed replicas become this
        replica's (they belong to the replica that assembled the trace, which is gone)."""
        assert self.coordinator is not None
        departed = self.coordinator.departed()
        if not departed:
            return

        def body(con: duckdb.DuckDBPyConnection) -> None:
            con.execute(
                "UPDATE traces SET replica = ? WHERE judge_status = 'pending' AND list_contains(?, replica)",
                [self.replica, departed],
            )
            con.execute(
                "UPDATE evaluation_outbox SET replica = ? WHERE list_contains(?, replica)",
                [self.replica, departed],
            )

        self._write(body)
        log.info(
            "adopted the judge work and evaluation events of departed replica(s) %s", ", ".join(departed)
        )

    def _maintenance_step(self, sql: str) -> None:
        with self._cursor() as con:
            con.execute(sql)

    def _fold_aggregates(self) -> int:
        """Partial aggregate rows of a key become one row; returns how many rows went."""
        key = self.aggregate_key

        def body(con: duckdb.DuckDBPyConnection) -> int:
            folded = arrow_table(
                con.execute(
                    f"SELECT {quoted(key)}, {summed_parts()}, count(*) AS parts "
                    f"FROM {AGGREGATE_PARTS} GROUP BY ALL HAVING count(*) > 1"
                )
            )
            if not folded.num_rows:
                return 0
            con.register("_folded", folded)
            try:
                match = key_match(key, "a", "f")
                con.execute(
                    f"DELETE FROM {AGGREGATE_PARTS} a WHERE EXISTS (SELECT 1 FROM _folded f WHERE {match})"
                )
                con.execute(f"INSERT INTO {AGGREGATE_PARTS} BY NAME SELECT * EXCLUDE (parts) FROM _folded")
            finally:
                con.unregister("_folded")
            return int(pc.sum(folded["parts"]).as_py()) - folded.num_rows

        return self._write(body)

    # ---------------------------------------------------------------- read-only SQL

    def query(self, sql: str, max_rows: int, timeout: float) -> QueryResult:
        if self.read_only:
            return super().query(sql, max_rows, timeout)
        with self._reader_lock:
            if self._reader is None:
                self._reader = open_lake(self.config, read_only=True)
            reader = self._reader
        cursor = reader.cursor()
        try:
            cursor.execute(f"USE {LAKE}")
            return run_query(cursor, sql, max_rows, timeout)
        finally:
            cursor.close()

    # ---------------------------------------------------------------- retention

    def storage_size(self) -> StorageSize:
        with self._cursor() as con:
            row = con.execute(
                "SELECT coalesce(sum(file_size_bytes + delete_file_size_bytes), 0) "
                f"FROM ducklake_table_info('{LAKE}')"
            ).fetchone()
        return StorageSize(file_bytes=int(row[0]) if row else 0, wal_bytes=0, free_bytes=0)

    def delete_traces(self, trace_ids: Sequence[str]) -> DeletedRows:
        deleted = super().delete_traces(trace_ids)
        if self.coordinator is not None:
            self.coordinator.forget(list(dict.fromkeys(trace_ids)))
        return deleted

    # ---------------------------------------------------------------- health

    def assert_writable(self) -> None:
        """Nothing to check per commit: a lake's files are many, and the catalog answers or not."""

    def probe_write(self) -> None:
        """The catalog answers (a transaction reads its latest snapshot from PostgreSQL) and a local
        data directory takes a write."""
        with self._cursor() as con:
            con.execute("SELECT count(*) FROM ragpulse_schema").fetchall()
        data_path = self.config.data_path or ""
        if "://" not in data_path:
            probe_directory(Path(data_path))

    # ---------------------------------------------------------------- lifecycle

    def checkpoint(self) -> None:
        # Deleted rows live on as delete files until their data files are rewritten: merging
        # and cleaning up is what frees their space.
        self.maintain()

    def close(self) -> None:
        self._registrar.shutdown(wait=True)
        with self._write_lock:
            try:
                self._con.close()
            finally:
                if self._reader is not None:
                    self._reader.close()
