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
import importlib
import logging
import os
import random
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from collector.schema.tables import ALL_TABLES, SCORE_AGGREGATE_KEY, SCORE_AGGREGATES
from collector.schema.trace_rows import TraceTables
from collector.store.base import DeletedRows, StorageSize, StoreError
from collector.store.config import StoreConfig
from collector.store.disk import probe_directory
from collector.store.duckdb_store import DuckDBStore, key_match, migrate, quoted, schema_version
from collector.store.migrations import LATEST_VERSION, MIGRATIONS
from collector.store.schema_sql import SPAN_EVENTS_VIEW, SPANS_VIEW, create_table_sql
from collector.store.sql import QueryResult, run_query

log = logging.getLogger(__name__)

_T = TypeVar("_T")

LAKE = "lake"  # the name the lake is attached under (and USE'd), so the tables keep their names
CATALOG_DB = f"__ducklake_metadata_{LAKE}"  # DuckLake's own attachment of the PostgreSQL catalog

# The extension wheels carry one build per DuckDB version: the module, and the extension's name.
EXTENSIONS = (
    ("duckdb_extension_postgres_scanner", "postgres_scanner"),
    ("duckdb_extension_ducklake", "ducklake"),
)
HTTPFS = ("duckdb_extension_httpfs", "httpfs")  # for a data path on S3

MAINTENANCE_MEMORY_MB = 512  # DuckDB's memory limit while files are merged (see `_maintenance_memory`)
MAX_ATTEMPTS = 30
# A claim whose assembly was not stored after this long is taken over by another replica (its
# replica died between claim and commit, or is gone).
STALE_CLAIM_SECONDS = 300  # of a write transaction that keeps losing races to other replicas
LEASE_SECONDS = 30.0  # a leader that stops renewing is replaced after this long
DEPARTED_SECONDS = 300  # a replica silent this long has its judge work and evaluation events adopted


def extension_path(module_name: str, extension: str) -> Path:
    """The extension file shipped in a `duckdb-extension-*` wheel for the running DuckDB."""
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise StoreError(
            f"store.backend: ducklake needs the {module_name.replace('_', '-')} package: "
            "pip install 'ragpulse[ducklake]'"
        ) from None
    assert module.__file__ is not None
    path = (
        Path(module.__file__).parent
        / "extensions"
        / f"v{duckdb.__version__}"
        / f"{extension}.duckdb_extension"
    )
    if not path.exists():
        raise StoreError(
            f"{module_name.replace('_', '-')} has no build for DuckDB {duckdb.__version__} ({path}); "
            "install the version of the extension that matches duckdb"
        )
    return path


def temp_directory(config: StoreConfig) -> Path:
    """`store.temp_directory`, else a directory of this replica's under the system's temp directory."""
    if config.temp_directory:
        return Path(config.temp_directory)
    return Path(tempfile.gettempdir()) / f"ragpulse-{config.replica_name}.tmp"


def _megabytes(setting: str) -> float | None:
    """DuckDB's memory_limit as it reports it ("122.0 MiB", "1.5 GiB") in MB; None if unreadable."""
    number, _, unit = setting.strip().partition(" ")
    scale = {"KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0, "TiB": 1024.0**2}.get(unit)
    try:
        return float(number) * scale if scale else None
    except ValueError:
        return None


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def open_lake(config: StoreConfig, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A DuckDB instance with the lake attached (read-only when asked) and in use, and external
    access then switched off: only the lake's data directory stays reachable."""
    assert config.catalog and config.data_path
    settings: dict[str, Any] = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    if config.memory_limit:
        settings["memory_limit"] = config.memory_limit
    if config.threads:
        settings["threads"] = config.threads
    if not read_only and "://" not in config.data_path:
        Path(config.data_path).mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(":memory:", config=settings)
    try:
        for module_name, extension in EXTENSIONS:
            con.execute(f"LOAD {_quote(str(extension_path(module_name, extension)))}")
        if config.data_path.startswith("s3://"):
            con.execute(f"LOAD {_quote(str(extension_path(*HTTPFS)))}")
            con.execute(s3_secret(os.environ))
        # No data inlining: DuckLake 1.5.5 readers break on inlined rows flushed after a column was
        # added (slice dimensions add columns), so every write is a Parquet file, merged later.
        options = f"DATA_PATH {_quote(config.data_path)}" + (
            ", READ_ONLY" if read_only else ", DATA_INLINING_ROW_LIMIT 0"
        )
        con.execute(f"ATTACH {_quote('ducklake:' + config.catalog)} AS {LAKE} ({options})")
        con.execute(f"USE {LAKE}")
        # An in-memory DuckDB has nowhere to spill by default: give it a directory, or merging
        # files under memory_limit fails instead of spilling.
        con.execute(f"SET temp_directory = {_quote(str(temp_directory(config)))}")
        if not read_only:
            con.execute("SET preserve_insertion_order = false")  # merges and inserts need no order
            # Commits of other replicas (and of our own two writer threads) race for the next
            # snapshot id; DuckLake retries such a commit itself, by default 10 times, waiting
            # 100 ms the first time. A commit takes milliseconds: retry sooner, and more often.
            con.execute("SET ducklake_max_retry_count = 100")
            con.execute("SET ducklake_retry_wait_ms = 5")
        data_dir = config.data_path if config.data_path.endswith("/") else config.data_path + "/"
        con.execute(f"SET allowed_directories = [{_quote(data_dir)}]")
        con.execute("SET enable_external_access = false")
    except duckdb.Error as exc:
        con.close()
        first_line = str(exc).strip().splitlines()[0][:300]
        raise StoreError(f"cannot open the lake (store.catalog, store.data_path): {first_line}") from None
    return con


def s3_secret(environ: Mapping[str, str]) -> str:
    """`CREATE SECRET` for an `s3://` data path from the AWS SDKs' variables: AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION (or AWS_DEFAULT_REGION) and AWS_ENDPOINT_URL
    for S3-compatible stores (MinIO, Ceph: addressed by path, TLS as its scheme says)."""
    key, secret = environ.get("AWS_ACCESS_KEY_ID"), environ.get("AWS_SECRET_ACCESS_KEY")
    if not key or not secret:
        raise StoreError(
            "store.data_path is on S3: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(and AWS_REGION; AWS_ENDPOINT_URL for an S3-compatible store)"
        )
    options = [f"KEY_ID {_quote(key)}", f"SECRET {_quote(secret)}"]
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    if region:
        options.append(f"REGION {_quote(region)}")
    if environ.get("AWS_SESSION_TOKEN"):
        options.append(f"SESSION_TOKEN {_quote(environ['AWS_SESSION_TOKEN'])}")
    endpoint = environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        scheme, _, host = endpoint.rstrip("/").partition("://")
        options += [f"ENDPOINT {_quote(host or scheme)}", "URL_STYLE 'path'"]
        options.append(f"USE_SSL {'false' if scheme == 'http' else 'true'}")
    return f"CREATE SECRET ragpulse_s3 (TYPE s3, {', '.join(options)})"


def is_conflict(exc: BaseException) -> bool:
    """Whether a failed commit lost a race to another writer (worth running again): DuckLake's
    conflicts, and PostgreSQL's serialization failures (the catalog runs REPEATABLE READ) and
    deadlocks."""
    text = str(exc)
    return isinstance(exc, duckdb.Error) and (
        "Transaction conflict" in text
        or "could not serialize access" in text
        or "deadlock detected" in text  # PostgreSQL aborted one of two waiting transactions
        # Two commits took the same next snapshot id in the catalog (DuckLake's own retries ran out).
        or ("duplicate key value violates unique constraint" in text and '"ducklake_' in text)
    )


def retry_conflicts(attempt: Callable[[], _T], what: str = "write") -> _T:
    """`attempt()`, run again (after a short random pause, growing) while it loses commit races."""
    for number in range(1, MAX_ATTEMPTS + 1):
        try:
            return attempt()
        except duckdb.Error as exc:
            if not is_conflict(exc) or number == MAX_ATTEMPTS:
                raise
            log.debug("lake %s lost a commit race (attempt %d); running it again", what, number)
            time.sleep(random.uniform(0.005, 0.02) * min(2**number, 50))
    raise AssertionError("unreachable")


AGGREGATE_PARTS = "score_aggregate_parts"
FLUSH_INLINED = f"CALL ducklake_flush_inlined_data('{LAKE}')"


def summed_parts() -> str:
    """The aggregate columns of a key, summed over its partial rows (the view, and folding)."""
    how = {"sum": "sum(sum)", "sum_sq": "sum(sum_sq)", "min": "min(min)", "max": "max(max)"}
    how["updated_at"] = "max(updated_at)"
    values = [c for c in SCORE_AGGREGATES.column_names if c not in SCORE_AGGREGATE_KEY]
    return ", ".join(f"{how.get(c, f'sum({c})::BIGINT')} AS {c}" for c in values)


def aggregates_view(key: Sequence[str]) -> str:
    """`score_aggregates` on a lake: one row per key, summing the key's partial rows."""
    return (
        f"CREATE OR REPLACE VIEW score_aggregates AS SELECT {quoted(key)}, {summed_parts()} "
        f"FROM {AGGREGATE_PARTS} GROUP BY ALL"
    )


def _lake_migration(sql: str) -> str:
    # On a lake `score_aggregates` is a view: its columns are those of the partial rows.
    return sql.replace("ALTER TABLE score_aggregates ", f"ALTER TABLE {AGGREGATE_PARTS} ")


def migrate_lake(con: duckdb.DuckDBPyConnection) -> None:
    """A new lake gets every table at the latest schema at once (DuckLake has no PRIMARY KEY: the one
    key, `cases.case_id`, is kept by `write_cases`); an existing one runs the migrations it lacks,
    then gets its aggregates view again (its key may have grown)."""
    if schema_version(con):
        if schema_version(con) < LATEST_VERSION:
            # Migrations add columns: rows inlined before (older versions inlined) go to files first.
            con.execute(FLUSH_INLINED)
        if migrate(con, _lake_migration) < LATEST_VERSION:
            dimensions = [
                r[0]
                for r in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                    "ORDER BY ordinal_position",
                    [AGGREGATE_PARTS],
                ).fetchall()
                if r[0] not in SCORE_AGGREGATES.column_names
            ]
            con.execute(aggregates_view((*SCORE_AGGREGATE_KEY, *dimensions)))
        return
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(
            "CREATE TABLE ragpulse_schema (version INTEGER, description VARCHAR, applied_at TIMESTAMP)"
        )
        for table in ALL_TABLES:
            ddl = create_table_sql(table).replace("PRIMARY KEY", "NOT NULL")
            if table is SCORE_AGGREGATES:
                ddl = ddl.replace(f"CREATE TABLE {table.name} ", f"CREATE TABLE {AGGREGATE_PARTS} ", 1)
            con.execute(ddl)
        con.execute(aggregates_view(SCORE_AGGREGATE_KEY))
        con.execute(SPANS_VIEW)
        con.execute(SPAN_EVENTS_VIEW)
        for version, description, _ in MIGRATIONS:
            con.execute("INSERT INTO ragpulse_schema VALUES (?, ?, now()::TIMESTAMP)", [version, description])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


class LakeCoordinator:
    """What replicas agree on through the catalog's PostgreSQL: who assembles which trace, and who
    leads. Three small tables there (not in the lake: they need keys and atomic upserts):

    - `ragpulse_trace_spans`: spans of each trace each replica received, as it assembles them;
    - `ragpulse_trace_claims`: for each trace, the replica that assembled it last, with how many
      spans, and how many assemblies there were (the revision);
    - `ragpulse_leases`: the leader, until its lease runs out.

    SQL travels through DuckDB's postgres extension on DuckLake's own connection to the catalog.
    Trace ids are hex (the decoder makes them so) and replica names are checked by the config, so
    the statements are built from known-safe text."""

    def __init__(self, con: duckdb.DuckDBPyConnection, replica: str) -> None:
        self._con = con
        self.replica = replica
        self._lock = threading.Lock()
        self._leader_until = 0.0
        retry_conflicts(self._create_tables, "catalog setup")

    def _execute(self, sql: str) -> None:
        """One statement in a transaction of its own, run again when another replica's got there
        first (PostgreSQL refuses an upsert of a row updated meanwhile under REPEATABLE READ)."""

        def attempt() -> None:
            with self._lock:
                cursor = self._con.cursor()
                try:
                    cursor.execute(f"CALL postgres_execute({_quote(CATALOG_DB)}, ?)", [sql])
                finally:
                    cursor.close()

        retry_conflicts(attempt, "catalog update")

    def _query(self, sql: str) -> list[tuple[Any, ...]]:
        with self._lock:
            cursor = self._con.cursor()
            try:
                return cursor.execute(
                    f"SELECT * FROM postgres_query({_quote(CATALOG_DB)}, ?)", [sql]
                ).fetchall()
            finally:
                cursor.close()

    def _create_tables(self) -> None:
        try:
            self._execute(
                "CREATE TABLE IF NOT EXISTS ragpulse_trace_spans (trace_id text NOT NULL, "
                "replica text NOT NULL, spans bigint NOT NULL, PRIMARY KEY (trace_id, replica));"
                "CREATE TABLE IF NOT EXISTS ragpulse_trace_claims (trace_id text PRIMARY KEY, "
                "replica text NOT NULL, spans bigint NOT NULL, revision integer NOT NULL, "
                "token text NOT NULL, claimed_at timestamptz NOT NULL DEFAULT now(), "
                "done boolean NOT NULL DEFAULT false, redo boolean NOT NULL DEFAULT false);"
                "CREATE TABLE IF NOT EXISTS ragpulse_replicas (name text PRIMARY KEY, "
                "seen_at timestamptz NOT NULL);"
                "CREATE TABLE IF NOT EXISTS ragpulse_leases (name text PRIMARY KEY, holder text NOT NULL, "
                "expires_at timestamptz NOT NULL)"
            )
        except duckdb.Error as exc:
            # Two replicas creating the tables at once: one loses on PostgreSQL's catalog keys.
            if "duplicate key" in str(exc) or "already exists" in str(exc):
                raise duckdb.TransactionException(
                    "Transaction conflict: catalog tables created meanwhile"
                ) from exc
            raise

    @staticmethod
    def _ids(trace_ids: Iterable[str]) -> str:
        ids = list(trace_ids)
        for trace_id in ids:
            if not trace_id.isalnum():
                raise ValueError(f"not a trace id: {trace_id!r}")
        return ", ".join(f"'{t}'" for t in ids)

    def register(self, arrived: Mapping[str, int]) -> None:
        """Add spans of these traces received by this replica."""
        if not arrived:
            return
        self._ids(arrived)
        rows = ", ".join(f"('{t}', '{self.replica}', {int(n)})" for t, n in arrived.items())
        self._execute(
            f"INSERT INTO ragpulse_trace_spans VALUES {rows} ON CONFLICT (trace_id, replica) "
            "DO UPDATE SET spans = ragpulse_trace_spans.spans + excluded.spans"
        )

    def elsewhere(self, trace_ids: Sequence[str]) -> set[str]:
        """Those of these traces of which another replica registered spans."""
        ids = self._ids(trace_ids)
        if not ids:
            return set()
        found = self._query(
            f"SELECT DISTINCT trace_id FROM ragpulse_trace_spans WHERE trace_id IN ({ids}) "
            f"AND replica <> '{self.replica}'"
        )
        return {row[0] for row in found}

    def claim(self, span_counts: Mapping[str, int]) -> dict[str, tuple[int, bool]]:
        """Claim each trace for an assembly with this many spans. Won when no replica has claimed
        it, or the last claim had fewer spans, or the last claim's assembly was never stored (`done`
        stays false when its replica died between claim and commit, or its write failed): by this
        replica at once, by another after STALE_CLAIM_SECONDS. Returns the won traces with the
        revision their assembly is to carry and whether it redoes an unmarked claim (whose rows may
        have been stored after all: the mark is what failed)."""
        if not span_counts:
            return {}
        self._ids(span_counts)
        token = uuid.uuid4().hex
        # In trace id order: replicas claiming overlapping traces lock their rows in the same order,
        # so their upserts wait for each other instead of deadlocking.
        rows = ", ".join(
            f"('{t}', '{self.replica}', {int(span_counts[t])}, 1, '{token}')" for t in sorted(span_counts)
        )
        claims = "ragpulse_trace_claims"
        self._execute(
            f"INSERT INTO {claims} (trace_id, replica, spans, revision, token) "
            f"VALUES {rows} ON CONFLICT (trace_id) DO UPDATE SET replica = excluded.replica, "
            f"spans = excluded.spans, token = excluded.token, claimed_at = now(), done = false, "
            f"redo = NOT {claims}.done, "
            # An assembly that was stored counts; one that never was is redone under its revision.
            f"revision = CASE WHEN {claims}.done THEN {claims}.revision + 1 ELSE {claims}.revision END "
            f"WHERE {claims}.spans < excluded.spans OR (NOT {claims}.done AND ({claims}.replica = "
            f"excluded.replica OR {claims}.claimed_at < now() - interval '{STALE_CLAIM_SECONDS} seconds'))"
        )
        won = self._query(f"SELECT trace_id, revision, redo FROM {claims} WHERE token = '{token}'")
        return {trace_id: (int(revision), bool(redo)) for trace_id, revision, redo in won}

    def mark_assembled(self, trace_ids: Sequence[str]) -> None:
        """These traces' assemblies, claimed by this replica, are stored."""
        self._for_each_chunk(
            trace_ids,
            lambda ids: (
                f"UPDATE ragpulse_trace_claims SET done = true WHERE trace_id IN ({ids}) "
                f"AND replica = '{self.replica}'"
            ),
        )

    def revisions(self, trace_ids: Iterable[str]) -> dict[str, int]:
        """How often each of these traces was assembled and stored (by any replica)."""
        ids = self._ids(trace_ids)
        if not ids:
            return {}
        rows = self._query(
            "SELECT trace_id, CASE WHEN done THEN revision ELSE revision - 1 END "
            f"FROM ragpulse_trace_claims WHERE trace_id IN ({ids})"
        )
        return {trace_id: int(revision) for trace_id, revision in rows if revision}

    def forget(self, trace_ids: Sequence[str]) -> None:
        """Deleted traces: their claims and span counts go too."""
        self._for_each_chunk(
            trace_ids,
            lambda ids: (
                f"DELETE FROM ragpulse_trace_spans WHERE trace_id IN ({ids});"
                f"DELETE FROM ragpulse_trace_claims WHERE trace_id IN ({ids})"
            ),
        )

    def _for_each_chunk(self, trace_ids: Sequence[str], statement: Callable[[str], str]) -> None:
        """`statement(ids)` for every 1,000 of these trace ids (`ids`: a quoted SQL list)."""
        for start in range(0, len(trace_ids), 1000):
            ids = self._ids(trace_ids[start : start + 1000])
            if ids:
                self._execute(statement(ids))

    def is_leader(self) -> bool:
        """Take or renew the lease; True while this replica holds it (checked every third of it).
        Each check is also this replica's heartbeat (`ragpulse_replicas`)."""
        now = time.monotonic()
        if now < self._leader_until - 2 * LEASE_SECONDS / 3:
            return True
        self._execute(
            f"INSERT INTO ragpulse_replicas VALUES ('{self.replica}', now()) "
            "ON CONFLICT (name) DO UPDATE SET seen_at = excluded.seen_at;"
            f"INSERT INTO ragpulse_leases VALUES ('leader', '{self.replica}', "
            f"now() + interval '{LEASE_SECONDS} seconds') "
            "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at "
            "WHERE ragpulse_leases.holder = excluded.holder OR ragpulse_leases.expires_at < now()"
        )
        rows = self._query("SELECT holder FROM ragpulse_leases WHERE name = 'leader'")
        leads = bool(rows) and rows[0][0] == self.replica
        self._leader_until = now + LEASE_SECONDS if leads else 0.0
        return leads

    def departed(self) -> list[str]:
        """Replicas not heard from for DEPARTED_SECONDS (stopped for good, or long gone)."""
        rows = self._query(
            f"SELECT name FROM ragpulse_replicas WHERE name <> '{self.replica}' "
            f"AND seen_at < now() - interval '{DEPARTED_SECONDS} seconds'"
        )
        return sorted(row[0] for row in rows)


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
            current_mb = _megabytes(str(row[0])) if row else None
            raise_it = current_mb is not None and current_mb < MAINTENANCE_MEMORY_MB
            if raise_it:
                con.execute(f"SET memory_limit = '{MAINTENANCE_MEMORY_MB}MB'")
        try:
            yield
        finally:
            if raise_it:
                with self._cursor() as con:
                    con.execute(
                        f"SET memory_limit = {_quote(configured)}" if configured else "RESET memory_limit"
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
            folded = con.execute(
                f"SELECT {quoted(key)}, {summed_parts()}, count(*) AS parts "
                f"FROM {AGGREGATE_PARTS} GROUP BY ALL HAVING count(*) > 1"
            ).to_arrow_table()
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
