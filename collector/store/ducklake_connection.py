"""Opening a DuckLake for the store: its extensions loaded from their wheels by path, the lake
attached (its catalog in PostgreSQL, data on a path or on S3), its schema migrated, and the
optimistic-commit conflicts of writes retried."""

from __future__ import annotations

import importlib
import logging
import os
import random
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from collector.schema.tables import ALL_TABLES, SCORE_AGGREGATE_KEY, SCORE_AGGREGATES
from collector.store.base import StoreError
from collector.store.config import StoreConfig
from collector.store.duckdb_connection import in_utc, migrate, schema_version
from collector.store.duckdb_rows import quoted
from collector.store.migrations import LATEST_VERSION, MIGRATIONS
from collector.store.reads.predicates import sql_string
from collector.store.schema_sql import (
    SCORES_ALL_VIEW,
    SESSIONS_VIEW,
    SPAN_EVENTS_VIEW,
    SPANS_VIEW,
    create_table_sql,
)

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
MAX_ATTEMPTS = 30  # of a write transaction that keeps losing races to other replicas


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


def megabytes(setting: str) -> float | None:
    """DuckDB's memory_limit as it reports it ("122.0 MiB", "1.5 GiB") in MB; None if unreadable."""
    number, _, unit = setting.strip().partition(" ")
    scale = {"KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0, "TiB": 1024.0**2}.get(unit)
    try:
        return float(number) * scale if scale else None
    except ValueError:
        return None


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
    con = in_utc(duckdb.connect(":memory:", config=settings))
    try:
        for module_name, extension in EXTENSIONS:
            con.execute(f"LOAD {sql_string(str(extension_path(module_name, extension)))}")
        if config.data_path.startswith("s3://"):
            con.execute(f"LOAD {sql_string(str(extension_path(*HTTPFS)))}")
            con.execute(s3_secret(os.environ))
        # No data inlining: DuckLake 1.5.5 readers break on inlined rows flushed after a column was
        # added (slice dimensions add columns), so every write is a Parquet file, merged later.
        options = f"DATA_PATH {sql_string(config.data_path)}" + (
            ", READ_ONLY" if read_only else ", DATA_INLINING_ROW_LIMIT 0"
        )
        con.execute(f"ATTACH {sql_string('ducklake:' + config.catalog)} AS {LAKE} ({options})")
        con.execute(f"USE {LAKE}")
        # An in-memory DuckDB has nowhere to spill by default: give it a directory, or merging
        # files under memory_limit fails instead of spilling.
        con.execute(f"SET temp_directory = {sql_string(str(temp_directory(config)))}")
        if not read_only:
            con.execute("SET preserve_insertion_order = false")  # merges and inserts need no order
            # Commits of other replicas (and of our own two writer threads) race for the next
            # snapshot id; DuckLake retries such a commit itself, by default 10 times, waiting
            # 100 ms the first time. A commit takes milliseconds: retry sooner, and more often.
            con.execute("SET ducklake_max_retry_count = 100")
            con.execute("SET ducklake_retry_wait_ms = 5")
        data_dir = config.data_path if config.data_path.endswith("/") else config.data_path + "/"
        con.execute(f"SET allowed_directories = [{sql_string(data_dir)}]")
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
    options = [f"KEY_ID {sql_string(key)}", f"SECRET {sql_string(secret)}"]
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    if region:
        options.append(f"REGION {sql_string(region)}")
    if environ.get("AWS_SESSION_TOKEN"):
        options.append(f"SESSION_TOKEN {sql_string(environ['AWS_SESSION_TOKEN'])}")
    endpoint = environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        scheme, _, host = endpoint.rstrip("/").partition("://")
        options += [f"ENDPOINT {sql_string(host or scheme)}", "URL_STYLE 'path'"]
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
        con.execute(SESSIONS_VIEW)
        con.execute(SCORES_ALL_VIEW)
        for version, description, _ in MIGRATIONS:
            con.execute("INSERT INTO ragpulse_schema VALUES (?, ?, now()::TIMESTAMP)", [version, description])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
