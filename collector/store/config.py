"""The `store:` config section."""

from __future__ import annotations

import os
import re
import socket
from typing import Literal

from pydantic import Field, field_validator, model_validator

from collector.config_base import Section


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class RetentionConfig(Section):
    """`store.retention`: what the retention keeper (`store/retention.py`) deletes, and how often it
    looks. Both limits are off (null) by default: nothing is ever deleted unless asked for."""

    # Whole traces whose newest span ended more than this many days ago are deleted.
    max_age_days: float | None = Field(None, gt=0)
    # When the database file plus its write-ahead log passes this many bytes, the oldest traces are
    # deleted until it is back under 90 % of it.
    max_bytes: int | None = Field(None, gt=0)
    # Seconds between two rounds (the first runs at start).
    check_every: float = Field(60.0, gt=0)
    # Traces deleted per transaction: each transaction holds back the assembler's writes (never the
    # span writer's), and each is followed by a checkpoint, which does hold the span writer.
    delete_batch: int = Field(5000, gt=0)

    @property
    def enabled(self) -> bool:
        """Whether any limit is set (otherwise no retention keeper runs)."""
        return self.max_age_days is not None or self.max_bytes is not None


# A replica's name travels inside SQL text sent to the catalog: letters, digits, `.`, `_`, `-`.
_REPLICA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


class StoreConfig(Section):
    # duckdb: one database file (the embedded default). ducklake: one lake shared by several
    # replicas, its catalog in PostgreSQL and its data as Parquet files (docs/scale-out.md).
    backend: Literal["duckdb", "ducklake"] = "duckdb"
    path: str = "ragpulse.duckdb"
    # ducklake: the catalog, as DuckLake names it ("postgres:dbname=ragpulse host=... user=...";
    # libpq's PGPASSWORD and friends apply), and where the Parquet files go (a directory every
    # replica mounts, or s3://...).
    catalog: str | None = None
    data_path: str | None = None
    # ducklake: this replica's name, unique among the replicas (default: the host name, which is
    # stable for a StatefulSet's pods).
    replica: str | None = None
    # ducklake: seconds between two maintenance rounds (merging small Parquet files, expiring old
    # snapshots, folding aggregate rows), run by one replica at a time.
    compact_every: float = Field(300.0, gt=0)
    # ducklake: where DuckDB spills what does not fit in `memory_limit` (merging files does); a
    # local directory. null: <the system's temp directory>/ragpulse-<replica>.tmp.
    temp_directory: str | None = None
    # Spans waiting for commit; beyond this, exports are refused with a retryable status.
    max_queue_spans: int = Field(100_000, gt=0)
    # One commit takes at most this many spans (many exports share a commit).
    max_commit_spans: int = Field(50_000, gt=0)
    # `ragpulse doctor` warns when the store's disk has less free than this (MB).
    min_free_mb: int = Field(1024, ge=0)
    # DuckDB folds the write-ahead log into the file once it grows past this many MiB.
    checkpoint_threshold_mb: int = Field(256, gt=0)
    # DuckDB's memory (its buffer pool caches table blocks and would grow toward 80 % of the
    # machine's RAM); queries that need more spill to disk. null: DuckDB's own default. Room for the
    # rows appended since the last checkpoint (about 200 MB when the log nears 256 MiB) beside every
    # write's and read's working memory: at 128MB, a service up for 49 minutes ran out of it, and
    # DuckDB 1.5.5 does not always recover from commits that fail for memory (docs/operations.md).
    memory_limit: str | None = "256MB"
    # DuckDB's threads. null: where mapping workers run beside it (`serve`, `replay --db`), the
    # cores they leave, at least one (`beside_workers`); elsewhere DuckDB's default, every core.
    threads: int | None = Field(None, gt=0)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)

    def beside_workers(self, workers: int, cores: int | None = None) -> StoreConfig:
        """This section with `threads`, when null, set to the `cores` (default: those this process
        may run on) that `workers` mapping processes leave, at least one. A DuckDB thread more than
        the free cores does not make writes faster: it waits for a core, and the writing thread
        waits for it. With no workers, `threads` stays as it is."""
        if self.threads is not None or workers <= 0:
            return self
        return self.model_copy(update={"threads": max(1, (cores or available_cores()) - workers)})

    @field_validator("replica")
    @classmethod
    def _replica_name(cls, value: str | None) -> str | None:
        if value is not None and not _REPLICA_NAME.fullmatch(value):
            raise ValueError("a replica name is 1-63 letters, digits, '.', '_' or '-'")
        return value

    @model_validator(mode="after")
    def _lake_settings(self) -> StoreConfig:
        if self.backend == "ducklake":
            if not self.catalog or not self.catalog.startswith("postgres:"):
                raise ValueError(
                    "store.catalog: the ducklake backend needs a PostgreSQL catalog, "
                    '"postgres:dbname=... host=... user=..."'
                )
            if not self.data_path:
                raise ValueError("store.data_path: the ducklake backend needs a directory (or s3://...)")
        return self

    @property
    def location(self) -> str:
        """Where the data is, for messages: the file, or the lake's data directory."""
        return self.path if self.backend == "duckdb" else f"the lake at {self.data_path}"

    @property
    def replica_name(self) -> str:
        """This replica's name: `replica`, else the host name (made a valid replica name)."""
        if self.replica:
            return self.replica
        host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()).strip("-._") or "replica"
        return host[:63]
