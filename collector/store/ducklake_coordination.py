"""Which replica does what on one lake, decided in its PostgreSQL catalog: the claims that make each
set of a trace's spans assembled once, the leader's lease, and departed replicas' work adopted
(docs/scale-out.md has the rules)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import duckdb

from collector.store.ducklake_connection import (
    CATALOG_DB,
    retry_conflicts,
)
from collector.store.reads.predicates import sql_string

log = logging.getLogger(__name__)

# A claim whose assembly was not stored after this long is taken over by another replica (its
# replica died between claim and commit, or is gone).
STALE_CLAIM_SECONDS = 300
LEASE_SECONDS = 30.0  # a leader that stops renewing is replaced after this long
DEPARTED_SECONDS = 300  # a replica silent this long has its judge work and evaluation events adopted


class LakeCoordinator:
    """What replicas agree on through the catalog's PostgreSQL: who assembles which trace, and who
    leads. Three small tables there (not in the lake: they need keys and atomic upserts):

    - `ragpulse_trace_spans`: spans of each trace each replica received, as it assembles them;
    - `ragpulse_trace_claims`: for each trace, the replica that assembled it last, with how many
      spans, and how many assemblies there were (the revision);
    - `ragpulse_leases`: the leader, until its lease runs out.

    SQL travels through DuckDB's postgres extension on DuckLake's own connection to the catalog.
    Trace ids are hex (the decoder makes them so) and replica names are checked by the config, so
    the statements are built from known-safe text."""

    def __init__(self, con: duckdb.DuckDBPyConnection, replica: str) -> None:
        self._con = con
        self.replica = replica
        self._lock = threading.Lock()
        self._leader_until = 0.0
        retry_conflicts(self._create_tables, "catalog setup")

    def _execute(self, sql: str) -> None:
        """One statement in a transaction of its own, run again when another replica's got there
        first (PostgreSQL refuses an upsert of a row updated meanwhile under REPEATABLE READ)."""

        def attempt() -> None:
            with self._lock:
                cursor = self._con.cursor()
                try:
                    cursor.execute(f"CALL postgres_execute({sql_string(CATALOG_DB)}, ?)", [sql])
                finally:
                    cursor.close()

        retry_conflicts(attempt, "catalog update")

    def _query(self, sql: str) -> list[tuple[Any, ...]]:
        with self._lock:
            cursor = self._con.cursor()
            try:
                return cursor.execute(
                    f"SELECT * FROM postgres_query({sql_string(CATALOG_DB)}, ?)", [sql]
                ).fetchall()
            finally:
                cursor.close()

    def _create_tables(self) -> None:
        try:
            self._execute(
                "CREATE TABLE IF NOT EXISTS ragpulse_trace_spans (trace_id text NOT NULL, "
                "replica text NOT NULL, spans bigint NOT NULL, PRIMARY KEY (trace_id, replica));"
                "CREATE TABLE IF NOT EXISTS ragpulse_trace_claims (trace_id text PRIMARY KEY, "
                "replica text NOT NULL, spans bigint NOT NULL, revision integer NOT NULL, "
                "token text NOT NULL, claimed_at timestamptz NOT NULL DEFAULT now(), "
                "done boolean NOT NULL DEFAULT false, redo boolean NOT NULL DEFAULT false);"
                "CREATE TABLE IF NOT EXISTS ragpulse_replicas (name text PRIMARY KEY, "
                "seen_at timestamptz NOT NULL);"
                "CREATE TABLE IF NOT EXISTS ragpulse_leases (name text PRIMARY KEY, holder text NOT NULL, "
                "expires_at timestamptz NOT NULL)"
            )
        except duckdb.Error as exc:
            # Two replicas creating the tables at once: one loses on PostgreSQL's catalog keys.
            if "duplicate key" in str(exc) or "already exists" in str(exc):
                raise duckdb.TransactionException(
                    "Transaction conflict: catalog tables created meanwhile"
                ) from exc
            raise

    @staticmethod
    def _ids(trace_ids: Iterable[str]) -> str:
        ids = list(trace_ids)
        for trace_id in ids:
            if not trace_id.isalnum():
                raise ValueError(f"not a trace id: {trace_id!r}")
        return ", ".join(f"'{t}'" for t in ids)

    def register(self, arrived: Mapping[str, int]) -> None:
        """Add spans of these traces received by this replica."""
        if not arrived:
            return
        self._ids(arrived)
        rows = ", ".join(f"('{t}', '{self.replica}', {int(n)})" for t, n in arrived.items())
        self._execute(
            f"INSERT INTO ragpulse_trace_spans VALUES {rows} ON CONFLICT (trace_id, replica) "
            "DO UPDATE SET spans = ragpulse_trace_spans.spans + excluded.spans"
        )

    def elsewhere(self, trace_ids: Sequence[str]) -> set[str]:
        """Those of these traces of which another replica registered spans."""
        ids = self._ids(trace_ids)
        if not ids:
            return set()
        found = self._query(
            f"SELECT DISTINCT trace_id FROM ragpulse_trace_spans WHERE trace_id IN ({ids}) "
            f"AND replica <> '{self.replica}'"
        )
        return {row[0] for row in found}

    def claim(self, span_counts: Mapping[str, int]) -> dict[str, tuple[int, bool]]:
        """Claim each trace for an assembly with this many spans. Won when no replica has claimed
        it, or the last claim had fewer spans, or the last claim's assembly was never stored (`done`
        stays false when its replica died between claim and commit, or its write failed): by this
        replica at once, by another after STALE_CLAIM_SECONDS. Returns the won traces with the
        revision their assembly is to carry and whether it redoes an unmarked claim (whose rows may
        have been stored after all: the mark is what failed)."""
        if not span_counts:
            return {}
        self._ids(span_counts)
        token = uuid.uuid4().hex
        # In trace id order: replicas claiming overlapping traces lock their rows in the same order,
        # so their upserts wait for each other instead of deadlocking.
        rows = ", ".join(
            f"('{t}', '{self.replica}', {int(span_counts[t])}, 1, '{token}')" for t in sorted(span_counts)
        )
        claims = "ragpulse_trace_claims"
        self._execute(
            f"INSERT INTO {claims} (trace_id, replica, spans, revision, token) "
            f"VALUES {rows} ON CONFLICT (trace_id) DO UPDATE SET replica = excluded.replica, "
            f"spans = excluded.spans, token = excluded.token, claimed_at = now(), done = false, "
            f"redo = NOT {claims}.done, "
            # An assembly that was stored counts; one that never was is redone under its revision.
            f"revision = CASE WHEN {claims}.done THEN {claims}.revision + 1 ELSE {claims}.revision END "
            f"WHERE {claims}.spans < excluded.spans OR (NOT {claims}.done AND ({claims}.replica = "
            f"excluded.replica OR {claims}.claimed_at < now() - interval '{STALE_CLAIM_SECONDS} seconds'))"
        )
        won = self._query(f"SELECT trace_id, revision, redo FROM {claims} WHERE token = '{token}'")
        return {trace_id: (int(revision), bool(redo)) for trace_id, revision, redo in won}

    def mark_assembled(self, trace_ids: Sequence[str]) -> None:
        """These traces' assemblies, claimed by this replica, are stored."""
        self._for_each_chunk(
            trace_ids,
            lambda ids: (
                f"UPDATE ragpulse_trace_claims SET done = true WHERE trace_id IN ({ids}) "
                f"AND replica = '{self.replica}'"
            ),
        )

    def revisions(self, trace_ids: Iterable[str]) -> dict[str, int]:
        """How often each of these traces was assembled and stored (by any replica)."""
        ids = self._ids(trace_ids)
        if not ids:
            return {}
        rows = self._query(
            "SELECT trace_id, CASE WHEN done THEN revision ELSE revision - 1 END "
            f"FROM ragpulse_trace_claims WHERE trace_id IN ({ids})"
        )
        return {trace_id: int(revision) for trace_id, revision in rows if revision}

    def forget(self, trace_ids: Sequence[str]) -> None:
        """Deleted traces: their claims and span counts go too."""
        self._for_each_chunk(
            trace_ids,
            lambda ids: (
                f"DELETE FROM ragpulse_trace_spans WHERE trace_id IN ({ids});"
                f"DELETE FROM ragpulse_trace_claims WHERE trace_id IN ({ids})"
            ),
        )

    def _for_each_chunk(self, trace_ids: Sequence[str], statement: Callable[[str], str]) -> None:
        """`statement(ids)` for every 1,000 of these trace ids (`ids`: a quoted SQL list)."""
        for start in range(0, len(trace_ids), 1000):
            ids = self._ids(trace_ids[start : start + 1000])
            if ids:
                self._execute(statement(ids))

    def is_leader(self) -> bool:
        """Take or renew the lease; True while this replica holds it (checked every third of it).
        Each check is also this replica's heartbeat (`ragpulse_replicas`)."""
        now = time.monotonic()
        if now < self._leader_until - 2 * LEASE_SECONDS / 3:
            return True
        self._execute(
            f"INSERT INTO ragpulse_replicas VALUES ('{self.replica}', now()) "
            "ON CONFLICT (name) DO UPDATE SET seen_at = excluded.seen_at;"
            f"INSERT INTO ragpulse_leases VALUES ('leader', '{self.replica}', "
            f"now() + interval '{LEASE_SECONDS} seconds') "
            "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at "
            "WHERE ragpulse_leases.holder = excluded.holder OR ragpulse_leases.expires_at < now()"
        )
        rows = self._query("SELECT holder FROM ragpulse_leases WHERE name = 'leader'")
        leads = bool(rows) and rows[0][0] == self.replica
        self._leader_until = now + LEASE_SECONDS if leads else 0.0
        return leads

    def departed(self) -> list[str]:
        """Replicas not heard from for DEPARTED_SECONDS (stopped for good, or long gone)."""
        rows = self._query(
            f"SELECT name FROM ragpulse_replicas WHERE name <> '{self.replica}' "
            f"AND seen_at < now() - interval '{DEPARTED_SECONDS} seconds'"
        )
        return sorted(row[0] for row in rows)
