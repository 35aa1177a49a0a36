"""Storage: the `Store` interface (`base`), its backends, the table definitions (`tables`), the
migrations, the span writer's group commits (`writer`) and the rows <-> records conversions."""

from __future__ import annotations

from collector.store.base import ReadOnlyStore, Store, StoreError, StoreLocked
from collector.store.config import StoreConfig


def open_store(config: StoreConfig, read_only: bool = False) -> Store:
    """The store `config.backend` names, migrated to the current schema (unless `read_only`)."""
    if config.backend == "duckdb":
        from collector.store.duckdb_store import DuckDBStore

        return DuckDBStore(config.path, config, read_only=read_only)
    if config.backend == "ducklake":
        from collector.store.ducklake_store import DuckLakeStore

        return DuckLakeStore(config, read_only=read_only)
    raise StoreError(f"store.backend: unknown backend {config.backend!r}")


__all__ = ["ReadOnlyStore", "Store", "StoreConfig", "StoreError", "StoreLocked", "open_store"]
