"""Opening a DuckDB database for the store: the connection's settings, the schema's migrations, one
transaction (rolled back whole, also when the last one was left aborted), and the checkpoint that
merges row groups."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb

from collector.store.base import StoreError, StoreLocked
from collector.store.config import StoreConfig
from collector.store.disk import wal_replay_message
from collector.store.migrations import LATEST_VERSION, MIGRATIONS

log = logging.getLogger(__name__)


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
        # Automatic checkpoints (the ones commits trigger) write what was appended and merge no row
        # groups; explicit ones (`checkpoint`, `close`) merge them as DuckDB does. See `_checkpoint_merging`.
        settings["max_vacuum_tasks"] = 0
    return settings


def connect(
    path: str | Path, config: StoreConfig | None = None, read_only: bool = False
) -> duckdb.DuckDBPyConnection:
    """Open the database file with external access disabled; a held lock raises StoreLocked."""
    path = Path(path)
    if read_only and not path.exists():
        raise StoreError(f"database file {path} does not exist")
    try:
        return in_utc(
            duckdb.connect(str(path), read_only=read_only, config=_connection_config(config, read_only))
        )
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise StoreLocked(f"database file {path} is in use by another process") from None
        message = None if read_only else wal_replay_message(path, str(exc))
        raise StoreError(message or f"cannot open database file {path}: {exc}") from None
    except duckdb.Error as exc:
        message = None if read_only else wal_replay_message(path, str(exc))
        raise StoreError(message or f"cannot open database file {path}: {exc}") from None


def in_utc(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """The connection's database with `now()` and timestamp casts in UTC, as every stored time is
    (naive UTC): DuckDB otherwise follows the machine's time zone, and `now()::TIMESTAMP` would be
    local time (a session's status, the sessions refresher, the judge's `scored_at`). Global, so the
    cursors every store operation opens have it too; set after connecting, since the setting needs
    ICU, which is loaded with the database and not through the (disabled) extension autoloading."""
    con.execute("SET GLOBAL TimeZone = 'UTC'")
    return con


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'ragpulse_schema'"
    ).fetchone()
    if not exists or not exists[0]:
        return 0
    row = con.execute("SELECT max(version) FROM ragpulse_schema").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def migrate(con: duckdb.DuckDBPyConnection, rewrite: Callable[[str], str] | None = None) -> int:
    """Bring the schema to the latest version; returns the version found before. `rewrite` adapts
    each migration's SQL to a backend (a lake keeps its aggregates in a table of another name)."""
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
            con.execute(rewrite(sql) if rewrite else sql)
            con.execute("INSERT INTO ragpulse_schema VALUES (?, ?, now()::TIMESTAMP)", [version, description])
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
    return found


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """BEGIN ... COMMIT, rolled back when the block raises.

    A connection kept open (the span writer's) may still be in a transaction that failed and could
    not be rolled back (a ROLLBACK on a full disk can fail too): every statement on it would then
    fail with "Current transaction is aborted" long after the disk was freed. Such a transaction is
    rolled back before the new one begins, and a failed ROLLBACK never hides the error that caused
    it."""
    try:
        con.execute("BEGIN TRANSACTION")
    except duckdb.TransactionException:
        con.execute("ROLLBACK")
        con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    try:
        con.execute("COMMIT")
    except duckdb.Error:
        # A commit that failed (a conflict, where writers race) leaves nothing to keep.
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise


# DuckDB's default `max_vacuum_tasks`: the row-group merges one checkpoint may schedule.
_VACUUM_TASKS = 100


def checkpoint_merging(con: duckdb.DuckDBPyConnection) -> None:
    """CHECKPOINT with row-group merging on, for this checkpoint only.

    After each checkpoint DuckDB appends to a new row group, and its checkpoints merge the partial
    ones back ("vacuum"), rewriting rows already written; that work grows with the tables and
    came to nearly three quarters of their CPU as the tables grew (docs/architecture.md, "Checkpoints").
    So automatic checkpoints merge nothing (`max_vacuum_tasks = 0` on the connection), and the
    explicit ones (retention rounds, shutdown) merge, which also compacts row groups with deleted
    rows (they run with no other transaction open: DuckDB merges in no other kind). A checkpoint a
    commit starts meanwhile may merge too: harmless."""
    row = con.execute("SELECT current_setting('max_vacuum_tasks')").fetchone()
    before = int(row[0]) if row else _VACUUM_TASKS
    con.execute(f"SET GLOBAL max_vacuum_tasks = {max(before, _VACUUM_TASKS)}")
    try:
        con.execute("CHECKPOINT")
    finally:
        con.execute(f"SET GLOBAL max_vacuum_tasks = {before}")
