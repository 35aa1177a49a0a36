"""Span batches kept on local disk for assembly, past what memory may hold (`assembler.max_held_spans`).

A burst leaves more spans waiting for assembly than memory should hold. They are in the store
already, but reading them back from DuckDB costs more than mapping them (the attribute columns are
decompressed whole around every row fetched). So a batch past the memory bound is written as it is,
in Arrow's IPC file format, to a directory of the service's own, and read back when its traces are
assembled: a sequential read of the bytes that were written. The files are a cache: after a
crash the traces are recovered from the store, and the directory is emptied at every start.
"""

from __future__ import annotations

import itertools
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from collector.processors.config import AssemblerConfig
    from collector.store.config import StoreConfig


@dataclass(frozen=True, slots=True)
class SpilledBatch:
    """One batch on disk: its spans' file, and its events' (None when it had none)."""

    spans: Path
    events: Path | None
    rows: int


class SpillDirectory:
    """The directory the assembler writes batches to; emptied when opened and when closed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        shutil.rmtree(path, ignore_errors=True)  # a crash's leftovers: the store has those spans
        path.mkdir(parents=True, exist_ok=True)
        self._numbers = itertools.count()  # file names; written from the writer's and the assembler's threads

    def write(self, spans: pa.Table, events: pa.Table) -> SpilledBatch:
        number = next(self._numbers)
        spans_file = self.path / f"{number}.spans.arrow"
        _write(spans_file, spans)
        events_file = None
        if events.num_rows:
            events_file = self.path / f"{number}.events.arrow"
            _write(events_file, events)
        return SpilledBatch(spans_file, events_file, spans.num_rows + events.num_rows)

    @staticmethod
    def read(batch: SpilledBatch) -> tuple[pa.Table, pa.Table | None]:
        """The batch's spans and events (None: it had no events)."""
        return _read(batch.spans), None if batch.events is None else _read(batch.events)

    @staticmethod
    def remove(batch: SpilledBatch) -> None:
        batch.spans.unlink(missing_ok=True)
        if batch.events is not None:
            batch.events.unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _write(path: Path, table: pa.Table) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _read(path: Path) -> pa.Table:
    with pa.OSFile(str(path), "rb") as source:
        return pa.ipc.open_file(source).read_all()


def spill_directory(assembler: AssemblerConfig, store: StoreConfig) -> Path:
    """`assembler.spill_directory`, or by default: beside the database file (`<store.path>.spill`),
    or on a lake in the replica's local `store.temp_directory`."""
    if assembler.spill_directory:
        return Path(assembler.spill_directory)
    if store.backend == "ducklake":
        from collector.store.ducklake_connection import temp_directory

        # Beside DuckDB's own temporary directory, not in it: DuckDB owns what is in there.
        temporary = temp_directory(store)
        return temporary.with_name(temporary.name + ".spill")
    path = Path(store.path)
    return path.with_name(path.name + ".spill")
