"""Session-level scores (docs/sessions.md): given once a session has ended, on its last turn, counted
in the aggregates once, given again when a later turn or a late span changes the session (not when
retention deletes turns); end to end through the real SDK with the idle timeout; and the pure rules
(repeated questions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace

from collector.schema.tables import DOCUMENTS, SCORES, STEPS, TRACES
from collector.schema.trace_rows import TraceTables
from collector.service import BackgroundService
from collector.sessions.config import SessionsConfig
from collector.sessions.refresher import SessionRefresher
from collector.sessions.scores import Turn, repeats
from collector.store.duckdb_store import DuckDBStore
from tests.support.helpers import (
    emit_rag_request,
    fast_assembler,
    make_config,
    sdk_tracer_provider,
    sql,
    wait_for,
)

HOUR_AGO = datetime.now(UTC).replace(tzinfo=None, microsecond=0) - timedelta(hours=1)


def write_turns(
    store: DuckDBStore, ids: Sequence[str], questions: Sequence[str], failing: set[str], start: int = 0
) -> None:
    """Turns of session `chat` a minute apart from an hour ago, each with a faithfulness score
    (failing for the ids in `failing`), through the store's own write path."""
    n = len(ids)
    starts = [HOUR_AGO + timedelta(minutes=start + i) for i in range(n)]
    traces = TRACES.arrow_table(
        {
            "trace_id": list(ids),
            "root_span_id": [f"root-{t}" for t in ids],
            "service_name": ["shop"] * n,
            "session_id": ["chat"] * n,
            "start_time": starts,
            "end_time": [s + timedelta(seconds=2) for s in starts],
            "question": list(questions),
            "assembly_count": [1] * n,
        },
        n,
    )
    scores = SCORES.arrow_table(
        {
            "trace_id": list(ids),
            "span_id": [f"root-{t}" for t in ids],
            "name": ["faithfulness"] * n,
            "value": [0.0 if t in failing else 1.0 for t in ids],
            "status": ["fail" if t in failing else "pass" for t in ids],
            "service_name": ["shop"] * n,
            "bucket": [s.replace(second=0) for s in starts],
            "created_at": starts,
            "evaluator": ["deterministic"] * n,
            "revision": [1] * n,
        },
        n,
    )
    empty = STEPS.arrow_schema().empty_table(), DOCUMENTS.arrow_schema().empty_table()
    store.write_traces(TraceTables(traces, *empty, scores=scores), [])


def session_scores(store: DuckDBStore) -> dict[str, tuple[Any, ...]]:
    rows = store.query(
        "SELECT name, trace_id, span_id, value, status, label, items FROM scores WHERE level = 'session'",
        100,
        10,
    ).rows
    return {
        name: (trace_id, span_id, value, status, label, json.loads(items))
        for name, trace_id, span_id, value, status, label, items in rows
    }


def aggregate_n(store: DuckDBStore, name: str) -> int:
    rows = store.query(f"SELECT coalesce(sum(n), 0) FROM score_aggregates WHERE name = '{name}'", 1, 10).rows
    return int(rows[0][0])


def test_an_ended_session_is_scored_once_and_again_when_it_changes(tmp_path: Path) -> None:
    questions = ["How do I return shoes?", "What colours do you have?", "How do I return my shoes?"]
    with DuckDBStore(tmp_path / "s.duckdb") as store:
        write_turns(store, ["t1", "t2", "t3"], questions, failing={"t1"})
        store.refresh_sessions()
        keeper = SessionRefresher(store, SessionsConfig(idle_timeout=600))
        assert keeper.score_ended() == 1
        scores = session_scores(store)
        assert set(scores) == {"session.turns", "session.failed_turns", "session.repeated_question"}
        assert scores["session.turns"][:5] == ("t3", "root-t3", None, "pass", "3")
        assert scores["session.failed_turns"][2:5] == (pytest.approx(2 / 3), "fail", "1/3 failed")
        assert scores["session.failed_turns"][5] == [
            {"text": "turn 1: How do I return shoes?", "ok": False, "evidence": "failed: faithfulness"}
        ]
        assert scores["session.repeated_question"][2:4] == (pytest.approx(2 / 3), "fail")
        assert scores["session.repeated_question"][5][0]["evidence"] == "repeats turn 1"
        assert aggregate_n(store, "session.failed_turns") == 1
        assert keeper.score_ended() == 0  # scored at this state already
        # A later turn: the session is scored again when it ends, on its new last turn, once.
        write_turns(store, ["t4"], ["Thanks, that helps"], failing=set(), start=10)
        store.refresh_sessions()
        # The session's figures are its turns': t3's failing session score makes no turn fail.
        figures = "SELECT turns, failed_turns, map_keys(score_means) FROM sessions"
        assert store.query(figures, 10, 10).rows == [(4, 1, ["faithfulness"])]
        assert keeper.score_ended() == 1
        scores = session_scores(store)
        assert scores["session.turns"][:5] == ("t4", "root-t4", None, "pass", "4")
        assert scores["session.failed_turns"][2] == pytest.approx(3 / 4)
        assert aggregate_n(store, "session.failed_turns") == 1
        # Retention deletes the last turn with its scores; the aggregates keep what was counted, and
        # the session is not scored again (that would count it twice).
        store.delete_traces(["t4"])
        store.refresh_sessions()
        assert keeper.score_ended() == 0
        assert session_scores(store) == {} and aggregate_n(store, "session.failed_turns") == 1
        # A session still open is not scored.
        assert SessionRefresher(store, SessionsConfig(idle_timeout=86400)).score_ended() == 0


def test_a_late_span_re_assembling_the_last_turn_brings_its_session_scores_back(tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "s.duckdb") as store:
        write_turns(store, ["t1", "t2"], ["Shoes?", "Socks?"], failing=set())
        store.refresh_sessions()
        keeper = SessionRefresher(store, SessionsConfig(idle_timeout=600))
        keeper.score_ended()
        # Re-assembled (the same times): its scores, the session's among them, are replaced.
        start = HOUR_AGO + timedelta(minutes=1)
        columns = {
            "trace_id": ["t2"],
            "service_name": ["shop"],
            "session_id": ["chat"],
            "root_span_id": ["root-t2"],
            "start_time": [start],
            "end_time": [start + timedelta(seconds=2)],
            "question": ["Socks?"],
            "assembly_count": [2],
        }
        row = TRACES.arrow_table(columns, 1)
        empty = STEPS.arrow_schema().empty_table(), DOCUMENTS.arrow_schema().empty_table()
        store.write_traces(TraceTables(row, *empty), ["t2"])
        assert session_scores(store) == {}
        store.refresh_sessions()
        assert keeper.score_ended() == 1
        assert session_scores(store)["session.turns"][:2] == ("t2", "root-t2")


def test_repeated_questions_are_the_nearly_same_words_again() -> None:
    def turns(*questions: str | None) -> list[Turn]:
        return [Turn(f"t{i}", None, HOUR_AGO, None, q, 1, ()) for i, q in enumerate(questions)]

    assert repeats(turns("How do I return shoes?", "Colours?", "how do I return the shoes")) == [(3, 1)]
    assert repeats(turns("Return shoes", "Return socks")) == []  # half the words: another question
    assert repeats(turns("Hi", "Hello")) == []
    # The same words again count however few; a near match needs two content words each.
    assert repeats(turns(None, "Where is my parcel?", "where is my parcel", "Where's my parcel?")) == [(3, 2)]
    assert repeats(turns("Hi!", "hi")) == [(2, 1)]


def test_a_session_that_ended_is_scored_and_written_back_end_to_end(tmp_path: Path) -> None:
    idle = 1.5
    config = make_config(
        tmp_path, assembler=fast_assembler(), sessions={"idle_timeout": idle, "refresh_interval": 0.2}
    )
    with BackgroundService(config) as svc:
        provider = sdk_tracer_provider(svc, "shop")
        sent = []
        for question in ("Do you ship to Norway?", "Do you ship to Norway at all?"):

            def mark_root() -> None:
                trace.get_current_span().set_attributes({"session.id": "chat-9", "user.id": "u-9"})

            answer = "Yes, we ship to Norway in 5-7 days."
            sent.append(
                emit_rag_request(
                    provider.get_tracer("t"), question, "We ship to Norway in 5-7 days.", answer, mark_root
                )
            )
        provider.shutdown()
        found = wait_for(
            lambda: sql(
                svc, "SELECT name, status, trace_id FROM scores WHERE level = 'session' ORDER BY name"
            ),
            lambda rows: len(rows) == 3,
            timeout=idle + 20,
            what="the session's scores once it ended",
        )
        events = sql(
            svc,
            "SELECT json_extract_string(attributes, '$.\"gen_ai.evaluation.name\"') AS score "
            "FROM span_events "
            f"WHERE source = 'ragpulse' AND trace_id = '{sent[-1]}' AND name = 'gen_ai.evaluation.result' "
            "AND score LIKE 'session.%' ORDER BY 1",
        )
    assert [(r["name"], r["status"]) for r in found] == [
        ("session.failed_turns", "pass"),
        ("session.repeated_question", "fail"),  # the user asked again
        ("session.turns", "pass"),
    ]
    assert {r["trace_id"] for r in found} == {sent[-1]}
    assert [e["score"] for e in events] == [
        "session.failed_turns",
        "session.repeated_question",
        "session.turns",
    ]


class _TurnArrivesMeanwhile(DuckDBStore):
    """A store where a turn is written between the read of a session's turns and its scores' write."""

    def session_turns(self, keys: Sequence[tuple[str, str]]) -> list[dict[str, object]]:
        turns = super().session_turns(keys)
        write_turns(self, ["late"], ["One more thing"], failing=set(), start=20)
        return turns


def test_scores_read_from_turns_that_changed_meanwhile_are_not_written(tmp_path: Path) -> None:
    with _TurnArrivesMeanwhile(tmp_path / "s.duckdb") as store:
        write_turns(store, ["t1", "t2"], ["Shoes?", "Socks?"], failing=set())
        store.refresh_sessions()
        keeper = SessionRefresher(store, SessionsConfig(idle_timeout=600))
        assert keeper.score_ended() == 0  # the session changed: nothing written
        assert session_scores(store) == {}


def test_a_session_waits_for_its_turns_judge_verdicts(tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "s.duckdb") as store:
        write_turns(store, ["t1", "t2"], ["Shoes?", "Socks?"], failing=set())
        with store._cursor() as con:  # the judge has not given t2's verdicts yet
            con.execute("UPDATE traces SET judge_status = 'pending' WHERE trace_id = 't2'")
        store.refresh_sessions()
        keeper = SessionRefresher(store, SessionsConfig(idle_timeout=600))
        assert keeper.score_ended() == 0
        with store._cursor() as con:
            con.execute("UPDATE traces SET judge_status = 'done' WHERE trace_id = 't2'")
        assert keeper.score_ended() == 1


def test_a_session_whose_turns_are_all_gone_loses_its_row_and_is_not_scored(tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "s.duckdb") as store:
        write_turns(store, ["t1"], ["Shoes?"], failing=set())
        store.refresh_sessions()
        store.delete_traces(["t1"])  # and the process stops before its next refresh...
        store._touched.take()
        keeper = SessionRefresher(store, SessionsConfig(idle_timeout=600))
        assert keeper.score_ended() == 0
        assert session_scores(store) == {}
        assert store.query("SELECT count(*) FROM sessions", 1, 10).rows == [(0,)]


def test_times_are_utc_whatever_the_machines_time_zone(tmp_path: Path) -> None:
    """Stored times are naive UTC; so must `now()` be in SQL (a session's status, the refresher)."""
    script = (
        "import sys\nfrom datetime import UTC, datetime\n"
        "from collector.store.duckdb_store import DuckDBStore\n"
        "with DuckDBStore(sys.argv[1]) as s:\n"
        "    ((now,),) = s.query('SELECT now()::TIMESTAMP', 1, 5).rows\n"
        "print(abs((now - datetime.now(UTC).replace(tzinfo=None)).total_seconds()))"
    )
    for zone in ("America/New_York", "Asia/Tokyo"):
        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / f"{zone.replace('/', '-')}.duckdb")],
            env={**os.environ, "TZ": zone},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert float(done.stdout) < 60, (zone, done.stdout)
