"""A persistent judge verdict cache in DuckDB: `DuckDBVerdictStore` implements `VerdictStore`.

`JudgeClient(settings, store=DuckDBVerdictStore("verdicts.duckdb"))` reuses a verdict across runs
and processes when the model, temperature, prompt version, messages and schema are the same (the
client's sha256 `cache_key`); the store is consulted after the client's in-memory LRU cache, and only
successful verdicts (parsed, and accepted by the caller's verdict check) are put into it.

One table, created when missing (a contract, like the tables `ragpulse serve` keeps):

    judge_verdicts(key VARCHAR PRIMARY KEY, value JSON, created_at TIMESTAMP)

`value` is the entry the client caches (`{"parsed": ..., "raw": ..., "response_model": ...}`);
`created_at` is when the row was last written (UTC). The entry carries neither the configured model
nor the prompt version (both are folded into `key`), so there are no columns for them.

Design choices:

- **A file or a connection.** Given a path, the store opens (and owns, and `close()`s) its own DuckDB
  file. Given a `duckdb.DuckDBPyConnection` (the online service's store connection), it creates its
  table there and leaves the connection's life to its owner. Either way every call runs on its own
  cursor (DuckDB connections are not to be shared between threads; cursors are) and writes are
  serialized by a lock, so one store is safe to use from the judge's thread pool.
- **A cache, never a source of failure.** A row that does not read back as a JSON object (malformed
  text, an array, a JSON or SQL null) is a miss; so is a database error on `get`. A database error on
  `put` is logged and the verdict is simply not persisted: the judge's answer stands. Whether a hit
  still matches the verdict schema and passes the caller's verdict check is the client's business (an
  entry failing either is a miss there too).
- **Upsert.** `put` is `INSERT OR REPLACE`: the latest verdict for a key wins.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

log = logging.getLogger(__name__)

TABLE = "judge_verdicts"

_CREATE = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    key VARCHAR PRIMARY KEY,
    value JSON,
    created_at TIMESTAMP
)
"""

# The store's own file needs no file, network or extension access (JSON is built into duckdb).
_OWN_FILE_CONFIG: dict[str, Any] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}


class VerdictStoreError(RuntimeError):
    """The verdict store cannot be opened (the message names the file and why)."""


class DuckDBVerdictStore:
    """Judge verdicts by cache key in a DuckDB table (see the module docstring)."""

    def __init__(self, target: str | Path | duckdb.DuckDBPyConnection) -> None:
        self._write_lock = threading.Lock()  # one writer at a time: no write-write conflicts
        self._cursor_lock = threading.Lock()
        self._closed = False
        if isinstance(target, duckdb.DuckDBPyConnection):
            self.path: Path | None = None
            self._con = target
            self._owns_connection = False
        else:
            self.path = Path(target)
            self._con = self._open(self.path)
            self._owns_connection = True
        try:
            with self._write_lock:
                cursor = self._cursor()
                try:
                    cursor.execute(_CREATE)
                finally:
                    cursor.close()
        except duckdb.Error as exc:
            if self._owns_connection:
                self._con.close()
            where = self.path if self.path is not None else "the given connection"
            raise VerdictStoreError(f"cannot create table {TABLE} in {where}: {exc}") from None

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        # A cursor is a connection of its own to the same database, for one call in one thread.
        with self._cursor_lock:
            return self._con.cursor()

    @staticmethod
    def _open(path: Path) -> duckdb.DuckDBPyConnection:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return duckdb.connect(str(path), config=_OWN_FILE_CONFIG)
        except OSError as exc:
            raise VerdictStoreError(f"cannot open verdict store {path}: {exc.strerror or exc}") from None
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise VerdictStoreError(
                    f"verdict store {path} is in use by another process (give each process its own file)"
                ) from None
            raise VerdictStoreError(f"cannot open verdict store {path}: {exc}") from None
        except duckdb.Error as exc:
            raise VerdictStoreError(f"cannot open verdict store {path}: {exc}") from None

    # -- VerdictStore --------------------------------------------------------------------------------

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored entry for `key`, or None (absent, unreadable, or the database failed)."""
        try:
            cursor = self._cursor()
            try:
                row = cursor.execute(
                    f"SELECT CAST(value AS VARCHAR) FROM {TABLE} WHERE key = ?", [key]
                ).fetchone()
            finally:
                cursor.close()
        except duckdb.Error as exc:
            log.warning("verdict store: reading %s failed, treated as a miss: %s", key[:16], exc)
            return None
        if row is None or row[0] is None:
            return None
        try:
            value = json.loads(row[0])
        except ValueError:
            log.warning("verdict store: entry %s is not valid JSON, treated as a miss", key[:16])
            return None
        if not isinstance(value, dict):
            log.warning("verdict store: entry %s is not a JSON object, treated as a miss", key[:16])
            return None
        return value

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Insert or replace the entry for `key` (`value` must be JSON-able)."""
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        now = datetime.now(UTC).replace(tzinfo=None)
        try:
            with self._write_lock:
                cursor = self._cursor()
                try:
                    cursor.execute(
                        f"INSERT OR REPLACE INTO {TABLE} (key, value, created_at) VALUES (?, ?, ?)",
                        [key, text, now],
                    )
                finally:
                    cursor.close()
        except duckdb.Error as exc:
            log.warning("verdict store: writing %s failed, the verdict is not persisted: %s", key[:16], exc)

    # -- housekeeping --------------------------------------------------------------------------------

    def count(self) -> int:
        """How many verdicts are stored."""
        cursor = self._cursor()
        try:
            row = cursor.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
        finally:
            cursor.close()
        return int(row[0]) if row else 0

    def close(self) -> None:
        """Close the file when the store opened it; a borrowed connection is left to its owner."""
        with self._write_lock, self._cursor_lock:
            if self._closed:
                return
            self._closed = True
            if self._owns_connection:
                try:
                    self._con.execute("CHECKPOINT")
                except duckdb.Error as exc:
                    log.warning("verdict store: checkpoint on close failed: %s", exc)
                finally:
                    self._con.close()

    def __enter__(self) -> DuckDBVerdictStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
