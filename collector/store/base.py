"""The store interface: every read and write ragpulse makes, by name.

The rest of ragpulse reaches storage only through `Store`; `store.backend` picks the
implementation (`open_store`). Writes take Arrow tables in the shapes of `tables.py` (bulk
inserts, never row by row). Every method may be called from any thread; an implementation keeps
the span writer's group commits and the other work from waiting on each other.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from collector.sql import QueryResult
    from collector.store.trace_rows import TraceTables


class StoreError(RuntimeError):
    """The store cannot be opened or written."""


class StoreLocked(StoreError):
    """Another process (usually a running `ragpulse serve`) holds the database file."""


class ReadOnlyStore(StoreError):
    """A write was asked of a store opened read-only."""


class Store(ABC):
    """What ragpulse stores and reads back."""

    # ---------------------------------------------------------------- ingest

    @abstractmethod
    def append_spans(self, spans: pa.Table, events: pa.Table) -> None:
        """Insert one group commit of spans and span events in a single durable transaction."""

    # ---------------------------------------------------------------- assembly

    @abstractmethod
    def read_spans(self, trace_ids: Iterable[str]) -> tuple[pa.Table, pa.Table]:
        """(spans, events) of every stored span and event of these traces."""

    @abstractmethod
    def pending_trace_ids(self) -> list[str]:
        """Traces with stored spans that no assembly has seen: never assembled, or spans or log
        events received after their last assembly (a crash between commit and assembly)."""

    @abstractmethod
    def has_traces(self) -> bool:
        """Whether any trace was ever assembled into this store."""

    @abstractmethod
    def assembly_counts(self, trace_ids: Iterable[str]) -> dict[str, int]:
        """How often each of these traces was assembled already (absent: never)."""

    @abstractmethod
    def write_traces(self, tables: TraceTables, replace: Sequence[str]) -> None:
        """Insert assembled traces, steps and documents in one transaction, first deleting the
        earlier assemblies of the traces in `replace`."""

    # ---------------------------------------------------------------- golden cases

    @abstractmethod
    def read_cases(self) -> pa.Table:
        """Every golden case (`case_id, normalized_question, expected_documents, expected_answer`)."""

    @abstractmethod
    def write_cases(self, cases: pa.Table) -> None:
        """Insert golden cases (the `cases` shape), replacing those with the same id."""

    # ---------------------------------------------------------------- read-only SQL

    @abstractmethod
    def query(self, sql: str, max_rows: int, timeout: float) -> QueryResult:
        """Run one read-only query (`collector.sql` rules), at most `max_rows` rows, interrupted
        after `timeout` seconds; `QueryError` when it is refused or fails."""

    # ---------------------------------------------------------------- lifecycle

    @abstractmethod
    def checkpoint(self) -> None:
        """Fold the write-ahead state into the main file(s)."""

    @abstractmethod
    def close(self) -> None:
        """Checkpoint (when writable) and release the store."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
