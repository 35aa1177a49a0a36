"""The DuckDB-file backend of the store.

The rest of ragpulse reaches storage only through `Store`: `append` (one transaction per group
commit, Arrow in, no row-by-row inserts) and `read_cursor` (a cursor for read-only SQL). A DuckLake
backend can later implement the same few methods.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from collector.config import StoreConfig
from collector.store.schema import LATEST_VERSION, MIGRATIONS


class StoreError(RuntimeError):
    """The database file cannot be opened or written."""


class StoreLocked(StoreError):
    """Another process (usually a running `ragpulse serve`) holds the database file."""


def _connection_config(config: StoreConfig | None, read_only: bool) -> dict[str, Any]:
    # SQL users can reach these connections: no file, network or extension access, ever.
    settings: dict[str, Any] = {
        "enable_external_access": False,
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    }
    if config is not None and not read_only:
        settings["checkpoint_threshold"] = f"{config.checkpoint_threshold_mb}MiB"
        if config.memory_limit:
            settings["memory_limit"] = config.memory_limit
        if config.threads:
            settings["threads"] = config.threads
    return settings


def connect(
    path: str | Path, config: StoreConfig | None = None, read_only: bool = False
) -> duckdb.DuckDBPyConnection:
    """Open the database file with external access disabled; a held lock raises StoreLocked."""
    path = Path(path)
    if read_only and not path.exists():
        raise StoreError(f"database file {path} does not exist")
    try:
        return duckdb.connect(str(path), read_only=read_only, config=_connection_config(config, read_only))
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise StoreLocked(f"database file {path} is in use by another process") from None
        raise StoreError(f"cannot open database file {path}: {exc}") from None
    except duckdb.Error as exc:
        raise StoreError(f"cannot open database file {path}: {exc}") from None


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'ragpulse_schema'"
    ).fetchone()
    if not exists or not exists[0]:
        return 0
    row = con.execute("SELECT max(version) FROM ragpulse_schema").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Bring the schema to the latest version; returns the version found before."""
    found = schema_version(con)
    if found > LATEST_VERSION:
        raise StoreError(
            f"database schema version {found} is newer than this ragpulse ({LATEST_VERSION}); "
            "upgrade ragpulse"
        )
    if found == 0:
        con.execute(
            "CREATE TABLE IF NOT EXISTS ragpulse_schema "
            "(version INTEGER, description VARCHAR, applied_at TIMESTAMP)"
        )
    for version, description, sql in MIGRATIONS:
        if version <= found:
            continue
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(sql)
            con.execute("INSERT INTO ragpulse_schema VALUES (?, ?, now()::TIMESTAMP)", [version, description])
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
    return found


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """BEGIN ... COMMIT, rolled back when the block raises."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


class Store:
    """A ragpulse database file opened for writing: one writer connection, cursors for readers."""

    def __init__(self, path: str | Path, config: StoreConfig | None = None) -> None:
        self.path = Path(path)
        self._con = connect(self.path, config)
        self._write_lock = threading.Lock()
        try:
            migrate(self._con)
        except Exception:
            self._con.close()
            raise

    def append(self, spans: pa.Table, events: pa.Table) -> None:
        """Insert one group of spans and events in a single committed transaction."""
        with self._write_lock, transaction(self._con) as con:
            if spans.num_rows:
                con.register("_ingest_spans", spans)
                con.execute("INSERT INTO spans BY NAME SELECT * FROM _ingest_spans")
                con.unregister("_ingest_spans")
            if events.num_rows:
                con.register("_ingest_events", events)
                con.execute("INSERT INTO span_events BY NAME SELECT * FROM _ingest_events")
                con.unregister("_ingest_events")

    def read_cursor(self) -> duckdb.DuckDBPyConnection:
        """A new cursor on the same database, for one reader thread (SQL API)."""
        return self._con.cursor()

    def checkpoint(self) -> None:
        with self._write_lock:
            self._con.execute("CHECKPOINT")

    def close(self) -> None:
        with self._write_lock:
            try:
                self._con.execute("CHECKPOINT")
            finally:
                self._con.close()
