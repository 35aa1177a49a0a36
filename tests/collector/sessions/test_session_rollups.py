"""The sessions' rows kept as turns and scores change (`session_rollups`, read through `sessions`):
on a real DuckDB file, each write the store takes (assembly, a late span's re-assembly, the judge's
scores, retention's deletions) changes the session's row at the next refresh and not before; a
process killed before its refresh is caught up at start; and a service stopped cleanly leaves its
last turns counted."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

from collector.schema.tables import DOCUMENTS, EVALUATION_OUTBOX, SCORES, STEPS, TRACES
from collector.schema.trace_rows import TraceTables
from collector.service import BackgroundService
from collector.sessions.refresher import CATCH_UP_SECONDS
from collector.store.duckdb_store import DuckDBStore
from tests.support.helpers import (
    emit_rag_request,
    fast_assembler,
    make_config,
    sdk_tracer_provider,
    sql,
    wait_for,
)

NOW = datetime.now(UTC).replace(tzinfo=None, microsecond=0)  # stored times are naive UTC


def turn_rows(
    ids: Sequence[str],
    session: str | None,
    service: str = "shop",
    probe: str | None = None,
    judged: bool = False,
) -> pa.Table:
    """`traces` rows of these turns, a minute apart, as assembly writes them."""
    n = len(ids)
    starts = [NOW + timedelta(minutes=i) for i in range(n)]
    return TRACES.arrow_table(
        {
            "trace_id": list(ids),
            "service_name": [service] * n,
            "session_id": [session] * n,
            "user_id": ["u-1"] * n,
            "start_time": starts,
            "end_time": [s + timedelta(seconds=2) for s in starts],
            "probe": [probe] * n,
            "assembled_at": [datetime.now(UTC).replace(tzinfo=None)] * n,
            "assembly_count": [1] * n,
            "judge_status": ["pending" if judged else None] * n,
        },
        n,
    )


def score_rows(values: dict[str, float], evaluator: str = "deterministic") -> pa.Table:
    """A `faithfulness` score per trace (pass from 0.5)."""
    n = len(values)
    return SCORES.arrow_table(
        {
            "trace_id": list(values),
            "span_id": ["0" * 16] * n,
            "name": ["faithfulness"] * n,
            "value": list(values.values()),
            "status": ["pass" if v >= 0.5 else "fail" for v in values.values()],
            "service_name": ["shop"] * n,
            "bucket": [NOW] * n,
            "created_at": [NOW] * n,
            "evaluator": [evaluator] * n,
            "revision": [1] * n,
        },
        n,
    )


def write(
    store: DuckDBStore, traces: pa.Table, scores: pa.Table | None = None, replace: Sequence[str] = ()
) -> None:
    empty = STEPS.arrow_schema().empty_table(), DOCUMENTS.arrow_schema().empty_table()
    store.write_traces(TraceTables(traces, *empty, scores=scores), replace)


def sessions(store: DuckDBStore) -> list[tuple[object, ...]]:
    return store.query(
        "SELECT session_id, service_name, turns, failed_turns, mean_score FROM sessions ORDER BY ALL", 100, 10
    ).rows


def test_assembled_turns_count_at_the_next_refresh(tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "s.duckdb") as store:
        write(store, turn_rows(["t1", "t2", "t3"], "s1"), score_rows({"t1": 1.0, "t2": 0.0, "t3": 0.5}))
        write(store, turn_rows(["p1"], "s1", probe="canary"))  # a probe's request is no turn
        write(store, turn_rows(["n1"], None))  # no session id: no session
        write(store, turn_rows(["o1"], "s1", service="shop-2"))  # the same id under another service
        assert sessions(store) == []  # not before the refresh
        assert store.refresh_sessions() == 2
        assert sessions(store) == [("s1", "shop", 3, 1, 0.5), ("s1", "shop-2", 1, 0, None)]
        assert store.refresh_sessions() == 0  # nothing written since
        store.define_sessions_view(7 * 86400)  # a week: more than an INTERVAL literal holds
        assert store.query("SELECT DISTINCT status FROM sessions", 10, 10).rows == [("open",)]


def test_the_judges_scores_a_late_span_and_deletions_change_the_session(tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "s.duckdb") as store:
        write(store, turn_rows(["t1", "t2"], "s1", judged=True))
        store.refresh_sessions()
        assert sessions(store) == [("s1", "shop", 2, 0, None)]
        # The judge's verdicts, later: a failing one makes its turn fail.
        revisions = pa.table({"trace_id": ["t1", "t2"], "revision": pa.array([1, 1], pa.int32())})
        outbox = EVALUATION_OUTBOX.arrow_schema().empty_table()
        assert store.write_judge_scores(revisions, score_rows({"t1": 0.2, "t2": 0.9}, "judge"), outbox) == 2
        assert store.refresh_sessions() == 1
        assert sessions(store) == [("s1", "shop", 2, 1, 0.55)]
        # A late span re-assembles t2 under another session id: it moves.
        write(store, turn_rows(["t2"], "s2"), replace=["t2"])
        assert store.refresh_sessions() == 2
        assert sessions(store) == [("s1", "shop", 1, 1, 0.2), ("s2", "shop", 1, 0, None)]
        # Retention deletes turns: a session with none left has no row.
        store.delete_traces(["t2"])
        assert store.refresh_sessions() == 1
        assert sessions(store) == [("s1", "shop", 1, 1, 0.2)]


def test_a_process_killed_before_its_refresh_is_caught_up_at_start(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    with DuckDBStore(path) as store:
        write(store, turn_rows(["t1"], "s1"))
        store.refresh_sessions()
        write(store, turn_rows(["t2", "t3"], "s2"))  # committed; its session's refresh never ran
    with DuckDBStore(path) as store:
        assert store.refresh_sessions() == 0  # this process knows of no write
        assert sessions(store) == [("s1", "shop", 1, 0, None)]
        assert store.refresh_sessions(catch_up=CATCH_UP_SECONDS) == 2  # s1 and s2: written since
        assert sessions(store) == [("s1", "shop", 1, 0, None), ("s2", "shop", 2, 0, None)]


def test_a_clean_stop_counts_the_last_turns(tmp_path: Path) -> None:
    # Rounds an hour apart: only the first (at start) and the last (at stop) run.
    config = make_config(tmp_path, assembler=fast_assembler(), sessions={"refresh_interval": 3600})
    with BackgroundService(config) as svc:
        provider = sdk_tracer_provider(svc, "shop")

        def mark_root() -> None:
            from opentelemetry import trace

            trace.get_current_span().set_attribute("session.id", "late-chat")

        emit_rag_request(
            provider.get_tracer("t"), "Do you ship?", "We ship.", "We ship.", before_root_ends=mark_root
        )
        provider.shutdown()
        wait_for(lambda: sql(svc, "SELECT count(*) AS n FROM scores")[0]["n"], lambda n: n > 0, what="scores")
        assert sql(svc, "SELECT count(*) AS n FROM sessions") == [{"n": 0}]  # the next round is an hour away
    with DuckDBStore(config.store.path, read_only=True) as store:
        assert store.query("SELECT session_id, turns FROM sessions", 10, 10).rows == [("late-chat", 1)]
