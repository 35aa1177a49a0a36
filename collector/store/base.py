"""The store's interfaces: every read and write ragpulse makes, by name, grouped per caller.

The rest of ragpulse reaches storage only through these; a component takes the narrowest one it uses
(the span writer a `SpanLog`, the evaluation exporter an `EvaluationOutbox`, ...), and `Store` is
all of them, which `store.backend` picks the implementation of (`open_store`). The SELECTs that read
the public tables by name for the dashboard, monitoring, probes and the demo are in `store/reads/`.
Writes take Arrow tables in the shapes of `schema/tables.py` (bulk inserts, never row by row). Every method
may be called from any thread; an implementation keeps the span writer's group commits and the other
work from waiting on each other.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from collector.schema.trace_rows import TraceTables
    from collector.store.health import StoreHealth
    from collector.store.sql import QueryResult


class StoreError(RuntimeError):
    """The store cannot be opened or written."""


class StoreLocked(StoreError):
    """Another process (usually a running `ragpulse serve`) holds the database file."""


class ReadOnlyStore(StoreError):
    """A write was asked of a store opened read-only."""


@dataclass(frozen=True)
class StorageSize:
    """What the store takes on disk, in bytes, as the retention keeper weighs it."""

    file_bytes: int  # the database file(s)
    wal_bytes: int  # the write-ahead log, not folded into the file yet
    free_bytes: int  # inside `file_bytes`: space freed by deletions, reused before the file grows

    @property
    def on_disk(self) -> int:
        """What the disk holds: the file plus its write-ahead log (`store.retention.max_bytes`)."""
        return self.file_bytes + self.wal_bytes

    @property
    def live(self) -> int:
        """The bytes that hold data: on disk minus the free space inside the file."""
        return max(0, self.file_bytes - self.free_bytes) + self.wal_bytes


@dataclass(frozen=True)
class DeletedRows:
    """What one `delete_traces` call removed: traces (ids that had spans; rows left by a trace whose
    spans are gone already do not count it again) and rows per table."""

    traces: int
    rows: dict[str, int]

    @property
    def spans(self) -> int:
        return self.rows.get("spans", 0)


@dataclass(frozen=True)
class RescoreScope:
    """The traces a `ragpulse rescore` run scores again: started in [start, end), of `service`, with
    the slice dimension `slice` (name, value) when given."""

    start: datetime
    end: datetime
    service: str | None = None
    slice: tuple[str, str] | None = None


class RescoreScopeError(ValueError):
    """A rescore scope the store cannot select (a slice dimension it does not have)."""


@dataclass(frozen=True)
class RescoreTotals:
    """How many traces a rescore scope holds, and how many of them the judge scored before."""

    traces: int
    judged: int


class StoreRole(ABC):
    """What every interface of the store offers its caller: the health its failures are counted in,
    and whether this replica leads (with several replicas on one lake)."""

    # Whether writes go through, fed by every writer of the store (`store/health.py`).
    health: StoreHealth

    # Whether other replicas write this store too.
    shared = False

    def is_leader(self) -> bool:
        """Whether this replica runs the work done once for all replicas (alerts, canaries,
        webhook deliveries, retention, compaction) in this round."""
        return True


class SpanLog(StoreRole):
    """The span writer's: group commits of received spans, and whether a write would be kept."""

    @abstractmethod
    def append_spans(self, spans: pa.Table, events: pa.Table) -> None:
        """Insert one group commit of spans and span events in a single durable transaction."""

    def assert_writable(self) -> None:
        """Raise StoreError when a write would be acknowledged but lost (the database file was
        removed under the service). Cheap: the span writer calls it before every group commit."""

    def probe_write(self) -> None:
        """Raise unless the store can take writes now (room on its disk, a catalog that answers);
        repair what can be repaired (reopen an invalidated database). Run while writes fail, so
        that the store is found writable again without waiting for traffic."""


class CaseBook(StoreRole):
    """Golden cases (the assembler matches traces to them; datasets, probes and the API load them)."""

    @abstractmethod
    def read_cases(self) -> pa.Table:
        """Every golden case (`case_id, normalized_question, expected_documents, expected_answer`)."""

    @abstractmethod
    def write_cases(self, cases: pa.Table) -> None:
        """Insert golden cases (the `cases` shape), replacing those with the same id."""


class SpanReads(StoreRole):
    """Spans read back by trace (the assembler, the judge stage)."""

    @abstractmethod
    def read_spans(self, trace_ids: Iterable[str]) -> tuple[pa.Table, pa.Table]:
        """(spans, events) of these traces, each span and event once: the first stored copy, as the
        `spans` and `span_events` views show them (spans with the columns of
        `span_records.SPAN_COLUMNS`, `received_at` and `resource_attributes`)."""


class AssemblyTables(SpanReads, CaseBook):
    """The assembler's: which traces wait, which were assembled, and the assembled rows written (with
    the claims that keep replicas from assembling a trace twice)."""

    @abstractmethod
    def pending_trace_ids(self, received_before: datetime | None = None) -> list[str]:
        """Traces with stored spans that no assembly has seen: never assembled, or spans or log
        events received after their last assembly (a crash between commit and assembly). With
        `received_before`, only rows received before then count (the start-up recovery: what came
        since the assembler started is assembled as it comes, not taken up early as `recovery`)."""

    @abstractmethod
    def has_traces(self) -> bool:
        """Whether any trace was ever assembled into this store."""

    @abstractmethod
    def assembly_counts(self, trace_ids: Iterable[str]) -> dict[str, int]:
        """How often each of these traces was assembled already (absent: never)."""

    @abstractmethod
    def traces_assembled_twice(self, since: float) -> list[str]:
        """Traces with more than one row in `traces`, of those assembled at or after `since`
        (seconds since the epoch)."""

    @abstractmethod
    def write_traces(self, tables: TraceTables, replace: Sequence[str]) -> None:
        """Insert assembled traces, steps and documents, with their deterministic scores, write-back
        events and outbox rows, in one transaction, first deleting the earlier assemblies of the
        traces in `replace` (and every score and write-back event of them). `score_aggregates`
        is kept in step: new scores are added, the groups of replaced scores recomputed."""

    def traces_elsewhere(self, trace_ids: Sequence[str]) -> set[str]:
        """Those of these traces of which other replicas received spans too (a shared store learns
        it in `append_spans`, before the spans are acknowledged): to assemble such a trace whole,
        its spans are read back from the store."""
        return set()

    def claim_traces(self, span_counts: Mapping[str, int]) -> dict[str, int | None]:
        """The traces this replica is to assemble now, of those it is ready to assemble with
        `span_counts` spans each, with the revision (assembly count) each claim gave it, or None
        where the store leaves counting to the assembler. A trace is claimed by one replica for
        each set of spans, and again only with more spans than its last assembly had."""
        return dict.fromkeys(span_counts)


class FeedbackBook(StoreRole):
    """The feedback API's: scores given from outside, kept, and attached to their traces; people's
    verdicts on ragpulse's scores."""

    @abstractmethod
    def write_feedback(self, feedback: pa.Table) -> int:
        """Store `feedback` rows (the `feedback` shape, one per `feedback_id`; a stored row with the
        same id is replaced, and its score with it) in one transaction, and add a `scores` row for
        each whose trace is assembled (by trace id, or by a response id of the trace). The others
        get theirs when their trace is assembled. Returns how many were attached now."""

    @abstractmethod
    def write_annotation(self, annotation: pa.Table) -> dict[str, object] | None:
        """Store a person's verdict (one `annotations` row, without the copy of its score) with a
        copy of the trace's current score of that name, replacing the same author's earlier verdict
        on it; returns the row stored, or None (nothing stored) when the trace has no such score."""


class SliceColumns(StoreRole):
    """The slice dimensions' columns (`monitoring.dimensions`)."""

    # The slice dimensions the store has columns for (in `traces`, `scores`, `score_aggregates`).
    dimensions: tuple[str, ...] = ()

    @abstractmethod
    def add_dimensions(self, names: Sequence[str]) -> None:
        """Add a column to `traces`, `scores` and `score_aggregates` for each of these dimensions
        the store lacks (`monitoring.dimensions`); columns of dimensions no longer declared stay,
        with their rows (new rows leave them null). Each becomes part of the aggregates' key."""

    @abstractmethod
    def top_dimension_values(self, name: str, limit: int, days: int = 7) -> list[str]:
        """A dimension's most frequent values over the last `days` days (by scores counted), for
        the cap on its values to start from after a restart."""


class JudgeQueue(SpanReads):
    """The judge stage's: traces waiting for the judge, and its scores stored."""

    @abstractmethod
    def pending_judge_work(self, limit: int, exclude: Iterable[str] = ()) -> pa.Table:
        """Up to `limit` traces waiting for the judge (`judge_status = 'pending'`), oldest first,
        without those in `exclude`: `trace_id, assembly_count, sample_reason, expected_answer,
        expected_documents` (JSON text)."""

    @abstractmethod
    def earlier_turns(
        self, trace_ids: Sequence[str], turns: int
    ) -> dict[str, list[tuple[str | None, str | None]]]:
        """For each of these traces with a session id: the (question, answer) of the last `turns`
        turns of its session before it, oldest first (`store/reads/conversation.py`)."""

    @abstractmethod
    def write_judge_scores(self, revisions: pa.Table, scores: pa.Table, outbox: pa.Table) -> int:
        """Store the judge's scores of traces (`revisions`: `trace_id, revision`) in one transaction,
        and mark them `done`; a trace re-assembled since (another revision) or no longer pending is
        left out, rows and all. Returns how many traces were stored."""

    @abstractmethod
    def skip_judge_work(self, trace_ids: Sequence[str], reason: str) -> None:
        """Pending traces the judge will not score (`throttled`, `over_budget`): their decision
        becomes `deterministic` with that reason."""


class RescoreBook(JudgeQueue):
    """`ragpulse rescore`: its runs, the traces of its scope in order, and each batch's scores put in
    place of those they replace (the replaced rows kept in `score_history`)."""

    @abstractmethod
    def count_rescore_scope(self, scope: RescoreScope) -> RescoreTotals:
        """How many traces `scope` holds (see `next_rescore_batch`), and how many were judged."""

    @abstractmethod
    def next_rescore_batch(
        self, scope: RescoreScope, after: tuple[datetime, str] | None, limit: int
    ) -> pa.Table:
        """The next `limit` traces of `scope` after `after` (start time, trace id), in that order:
        trace_id, start_time, assembly_count, judge_status, expected_answer, expected_documents."""

    @abstractmethod
    def judge_token_means(self, scope: RescoreScope, names: Sequence[str]) -> dict[str, tuple[float, float]]:
        """Per judge score name, the mean input and output tokens of its judge calls in `scope`."""

    @abstractmethod
    def find_rescore_run(self, request: str) -> dict[str, Any] | None:
        """The latest unfinished run of this request (canonical JSON), cursor included."""

    @abstractmethod
    def rescore_runs(self, run_id: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        """The latest runs, newest first (or the one named), without their cursors."""

    @abstractmethod
    def open_rescore_run(self, run: pa.Table) -> None:
        """Store a new run (one row in RESCORE_RUNS' schema)."""

    @abstractmethod
    def set_rescore_status(self, run_id: str, status: str, error: str | None = None) -> None:
        """A run ended: `done`, `stopped`, `failed` (with `error`)."""

    @abstractmethod
    def claim_rescore_run(self, run_id: str, stale_before: datetime) -> bool:
        """Take up an unfinished run: false when another process runs it (status `running` with
        progress since `stale_before`)."""

    @abstractmethod
    def stop_orphaned_rescore_runs(self) -> int:
        """Runs still `running` made `stopped`: called where no other process can be running one
        (a database file this process holds). Returns how many."""

    @abstractmethod
    def write_rescore(
        self,
        run_id: str,
        revisions: pa.Table,
        scores: pa.Table,
        outbox: pa.Table,
        cursor: tuple[datetime, str],
        progress: dict[str, int],
    ) -> tuple[int, int]:
        """In one transaction: the scores of the traces of `revisions` (trace_id, revision, start_time) still
        at that assembly, in place of the rows they replace (moved to `score_history`, aggregates
        counted again), their outbox rows, and the run's cursor and `progress` counts. Returns
        (scores written, scores replaced)."""


class EvaluationOutbox(StoreRole):
    """The evaluation exporter's: write-back events waiting for OTLP export."""

    @abstractmethod
    def read_outbox(self, limit: int) -> pa.Table:
        """The oldest `limit` evaluation events waiting for OTLP export."""

    @abstractmethod
    def delete_outbox(self, event_ids: Sequence[str]) -> None:
        """Events the downstream has acknowledged."""

    @abstractmethod
    def trim_outbox(self, max_events: int) -> int:
        """Drop the oldest events beyond `max_events`; returns how many were dropped."""

    @abstractmethod
    def outbox_depth(self) -> int:
        """Evaluation events waiting for export."""


class SqlReads(StoreRole):
    """Read-only SQL: a person's (`ragpulse sql`, `/api/sql`) and ragpulse's own reads (`store/reads/`)."""

    @abstractmethod
    def query(self, sql: str, max_rows: int, timeout: float) -> QueryResult:
        """Run one read-only query (`collector.store.sql` rules), at most `max_rows` rows, interrupted
        after `timeout` seconds; `QueryError` when it is refused or fails. It runs on a cursor of
        its own, never on the writer's connection. Inside `collector.store.sql.user_sql` (a user's
        query) it is also held to `sql.max_bytes` and `sql.memory_limit`, and its rows come as
        the JSON answer (`QueryResult.body`)."""

    @abstractmethod
    def define_sessions_view(self, idle_timeout: float) -> None:
        """Define the `sessions` view again with `idle_timeout` (`sessions.idle_timeout`, seconds):
        a view cannot read the config, and its `status` depends on it (docs/sessions.md)."""


class SessionRollups(StoreRole):
    """The sessions refresher's: the rows of `sessions` kept current as turns and scores change."""

    @abstractmethod
    def refresh_sessions(self, catch_up: float | None = None) -> int:
        """Compute again, in one transaction, the `session_rollups` rows of the sessions whose turns
        were stored, re-assembled, scored or deleted here since the last refresh; with `catch_up`
        (seconds), also those with a turn assembled or scored since that long before the last
        refresh recorded (at start: what a process that stopped before its refresh left). Returns
        how many sessions were computed."""

    @abstractmethod
    def sessions_to_score(self, idle_timeout: float, limit: int) -> list[tuple[str, str]]:
        """Up to `limit` sessions (session id, service) that ended (no turn for `idle_timeout`
        seconds) and lack session-level scores of their current state, the longest ended first."""

    @abstractmethod
    def session_turns(self, keys: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
        """The turns of these sessions in order: `session_id, service_name, trace_id, root_span_id,
        start_time, end_time, question, revision, failing` (its failing scores' names)."""

    @abstractmethod
    def write_session_scores(
        self, keys: Sequence[tuple[str, str]], checks: pa.Table, scores: pa.Table
    ) -> int:
        """In one transaction: of the sessions `keys` asked for, those still as they were read
        (`checks`: `session_id, service_name, turns, last_activity, revisions, last_trace_id`) get
        `scores` (on their last turns) in place of their session-level scores (aggregates kept in
        step) and are recorded as scored; those with no turn left lose their `sessions` row.
        Returns how many sessions were scored."""


class AlertLog(SqlReads):
    """Monitoring's: alert states, events and their notifications (the webhook exporter delivers
    them), and judge canary runs; figures are read with SQL."""

    @abstractmethod
    def read_alerts(self) -> pa.Table:
        """Every row of `alerts`: the current state of each alert (and service)."""

    @abstractmethod
    def write_alerts(self, states: pa.Table, events: pa.Table, notifications: pa.Table) -> None:
        """In one transaction: replace the `alerts` rows of these (alert, service) states, and add
        the events and their notifications (`alerts`, `alert_events`, `alert_notifications` shapes)."""

    @abstractmethod
    def pending_notifications(self) -> pa.Table:
        """Notifications not delivered yet, oldest first per webhook."""

    @abstractmethod
    def update_notification(
        self,
        event_id: str,
        webhook: str,
        attempts: int,
        delivered_at: datetime | None,
        next_attempt_at: datetime | None,
        error: str | None,
    ) -> None:
        """Record one delivery attempt of a notification."""

    @abstractmethod
    def read_canary_runs(self) -> pa.Table:
        """Every judge canary run, oldest first."""

    @abstractmethod
    def write_canary_run(self, run: pa.Table) -> None:
        """Add a canary run (the `canary_runs` shape)."""


class ProbeRuns(SqlReads, CaseBook):
    """The probe runner's: its runs, the cases it sends, and the traces and scores its requests made
    (with SQL)."""

    @abstractmethod
    def write_probe_run(self, run: pa.Table) -> None:
        """Add probe runs (the `probe_runs` shape), replacing the rows with the same `run_id`: a run
        is written when it starts and again when it finishes."""

    @abstractmethod
    def read_probe_runs(self, probe: str | None = None, limit: int | None = None) -> pa.Table:
        """Probe runs, newest first (by `started_at`), of one probe or of all; at most `limit`."""


class ApiStore(SqlReads, CaseBook):
    """The JSON API's: a person's read-only SQL (`/api/sql`), and golden cases loaded over HTTP."""


class Housekeeping(StoreRole):
    """Retention and maintenance: what the store weighs, the oldest traces deleted, compaction."""

    @abstractmethod
    def storage_size(self) -> StorageSize:
        """The bytes the store takes on disk now."""

    @abstractmethod
    def count_traces(self) -> int:
        """How many traces have stored spans."""

    @abstractmethod
    def oldest_traces(self, limit: int, before: datetime | None = None) -> list[str]:
        """Up to `limit` trace ids, oldest first, optionally only those older than `before` (naive
        UTC). A trace's age is its newest span's end time (when a span has none, when it arrived);
        a trace id with rows but no span (log events whose spans never came, assembled rows whose
        spans were deleted meanwhile) ages by the newest time of those rows."""

    @abstractmethod
    def delete_traces(self, trace_ids: Sequence[str]) -> DeletedRows:
        """Delete every row of these traces from every per-trace table (spans, span events, traces,
        steps, documents, scores, the evaluation outbox; judge work is the traces' `judge_status`),
        in one transaction that never waits on nor fails a concurrent span append. Aggregates
        (`score_aggregates`), alerts, canary runs and cases are kept."""

    @abstractmethod
    def checkpoint(self) -> None:
        """Fold the write-ahead state into the main file(s), with no write of ours in flight, so
        the space of deleted rows is freed (and the file truncated where its end became free)."""

    def maintain(self) -> None:
        """Periodic housekeeping of the storage (compaction for a lake; nothing for a file)."""


class Store(
    SpanLog,
    AssemblyTables,
    RescoreBook,  # a JudgeQueue too
    JudgeQueue,
    SliceColumns,
    EvaluationOutbox,
    AlertLog,
    ProbeRuns,
    ApiStore,
    FeedbackBook,
    SessionRollups,
    Housekeeping,
):
    """What ragpulse stores and reads back: every interface above, implemented by one backend
    (`DuckDBStore` on a file, `DuckLakeStore` on a lake). A caller asks for the narrowest interface
    it uses."""

    @abstractmethod
    def close(self) -> None:
        """Checkpoint (when writable) and release the store."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
