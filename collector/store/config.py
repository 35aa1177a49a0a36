"""The `store:` config section."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from collector.config_base import Section


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
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
