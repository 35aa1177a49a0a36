"""The `store:` config section."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from collector.config_base import Section


class StoreConfig(Section):
    # The only backend for now; DuckLake (one lake for several replicas) is planned.
    backend: Literal["duckdb"] = "duckdb"
    path: str = "ragpulse.duckdb"
    # Spans waiting for commit; beyond this, exports are refused with a retryable status.
    max_queue_spans: int = Field(100_000, gt=0)
    # One commit takes at most this many spans (many exports share a commit).
    max_commit_spans: int = Field(50_000, gt=0)
    # DuckDB folds the write-ahead log into the file once it grows past this many MiB.
    checkpoint_threshold_mb: int = Field(256, gt=0)
    # DuckDB's memory (its buffer pool caches table blocks and would grow toward 80 % of the
    # machine's RAM); queries that need more spill to disk. null: DuckDB's own default.
    memory_limit: str | None = "128MB"
    threads: int | None = Field(None, gt=0)
