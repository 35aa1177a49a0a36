"""The sessions refresher: every `sessions.refresh_interval` seconds, the rows of `sessions` whose
turns or scores were written since are computed again (`Store.refresh_sessions`), so that a list
of sessions is read from `session_rollups` instead of aggregated from every turn per request; then
the sessions that ended (`sessions.idle_timeout`) get their session-level scores
(`collector/sessions/scores.py`), on a lake by the replica that leads only; with
`sessions.conversation_resolved`, also the judge's score of each conversation (`use_judge`): fewer
sessions a look then (`JUDGED_PER_SLOT` per judge call slot), their calls made at once, within the
judge's budget (a session the budget refuses gets no judge score).

It starts before the assembler and the judge and stops after them, with a last round, so a clean
stop leaves `sessions` current. Its first round also computes again the sessions touched shortly
before the last recorded refresh (`CATCH_UP_SECONDS`): what a process that was killed before its
round had written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from collector.background import BackgroundWorker
from collector.lifecycle import remaining
from collector.processors.sampler import JudgeBudget
from collector.schema.tables import SCORES
from collector.sessions.config import SessionsConfig
from collector.sessions.scores import Session, Turn, judge_row, session_score_rows
from collector.store.base import SessionRollups
from evaluators.conversation import NAME as RESOLVED
from evaluators.conversation import Conversation
from evaluators.scores import Score

if TYPE_CHECKING:
    from collector.processors.redaction import Redactor

log = logging.getLogger(__name__)

# At start, the sessions with a turn assembled or scored this long before the last recorded refresh
# are computed again: a write commits a few seconds at most after the time it stamps on its rows.
CATCH_UP_SECONDS = 300.0
# Sessions given their session-level scores per round (more wait for the next round).
SCORED_PER_ROUND = 500
# With the judge: sessions a look per judge call slot (the calls hold the refresher's thread).
JUDGED_PER_SLOT = 4


@dataclass
class SessionJudge:
    """The judge's session score (`conversation_resolved`): the evaluator, the shared budget, how
    many calls at once, and the redactor the judge's inputs go through (`redaction.apply_to`)."""

    evaluate: Callable[[Conversation], Score]
    budget: JudgeBudget
    max_concurrency: int
    redactor: Redactor | None = None
    clock: Callable[[], float] = time.monotonic


class SessionRefresher(BackgroundWorker):
    """Keeps `session_rollups` current (see the module's docstring)."""

    def __init__(self, store: SessionRollups, config: SessionsConfig) -> None:
        super().__init__("ragpulse-sessions")
        self._store = store
        self._config = config
        self._interval = config.refresh_interval
        self._caught_up = False
        # Ended sessions are looked for this often: a few times per idle timeout, at most every 30 s.
        self._score_every = max(self._interval, min(30.0, config.idle_timeout / 4))
        self._scored_at = float("-inf")  # monotonic time of the last look
        self._judge: SessionJudge | None = None
        self._stopping_round = False

    def use_judge(self, judge: SessionJudge) -> None:
        """Give ended sessions the judge's `conversation_resolved` too (set once the judge is built)."""
        self._judge = judge

    def _run(self) -> None:
        self._run_every(
            self._interval,
            self.run_once,
            log,
            "computing the sessions failed; retrying at the next round",
            absorb=lambda exc: self._store.health.absorb(exc, "sessions"),
        )

    def run_once(self) -> int:
        """One round; returns how many sessions were computed."""
        if not self._caught_up:
            computed = self._store.refresh_sessions(catch_up=CATCH_UP_SECONDS)
            self._caught_up = True
        else:
            computed = self._store.refresh_sessions()
        due = time.monotonic() - self._scored_at >= self._score_every
        # The last round at stop leaves judged sessions to the next start: the judge's client is
        # closed by then (stopped before this), and its calls would be errors.
        due = due and not (self._stopping_round and self._judge is not None)
        if self._config.scores and due and (not self._store.shared or self._store.is_leader()):
            self._scored_at = time.monotonic()
            self.score_ended()
        return computed

    def score_ended(self) -> int:
        """Give the sessions that ended their session-level scores; returns how many were scored
        (a session whose turns changed between the read and the write waits for the next look)."""
        judge = self._judge
        limit = SCORED_PER_ROUND if judge is None else JUDGED_PER_SLOT * judge.max_concurrency
        keys = self._store.sessions_to_score(self._config.idle_timeout, limit)
        if not keys:
            return 0
        found = sessions_of(self._store.session_turns(keys))
        now = datetime.now(UTC).replace(tzinfo=None)
        rows = [row for session in found for row in session_score_rows(session, now)]
        if judge is not None:
            rows += judged_rows(judge, found, now)
        checks = pa.table(
            {
                "session_id": pa.array([s.session_id for s in found], pa.string()),
                "service_name": pa.array([s.service_name for s in found], pa.string()),
                "turns": pa.array([len(s.turns) for s in found], pa.int64()),
                "last_activity": pa.array([s.last_activity for s in found], pa.timestamp("us")),
                "revisions": pa.array([sum(t.revision for t in s.turns) for s in found], pa.int64()),
                "last_trace_id": pa.array([s.turns[-1].trace_id for s in found], pa.string()),
            }
        )
        scores = SCORES.rows_table(rows)
        return self._store.write_session_scores(keys, checks, scores)

    def stop(self, deadline: float | None = None) -> None:
        """Stop the rounds, then run a last one: what the stages stopped before it wrote."""
        super().stop(deadline)
        self._stopping_round = True
        if remaining(deadline, 15.0) > 0:
            try:
                self.run_once()
            except Exception as exc:
                if not self._store.health.absorb(exc, "sessions"):
                    log.exception("computing the sessions at stop failed")


def sessions_of(rows: Sequence[dict[str, Any]]) -> list[Session]:
    """`Store.session_turns` rows (in order) as sessions."""
    grouped: dict[tuple[str, str], list[Turn]] = {}
    for row in rows:
        grouped.setdefault((row["session_id"], row["service_name"]), []).append(
            Turn(
                trace_id=row["trace_id"],
                root_span_id=row["root_span_id"],
                start_time=row["start_time"],
                end_time=row["end_time"],
                question=row["question"],
                revision=int(row["revision"]),
                failing=tuple(row["failing"]),
                answer=row["answer"],
            )
        )
    return [Session(key[0], key[1], tuple(turns)) for key, turns in grouped.items()]


def judged_rows(judge: SessionJudge, found: Sequence[Session], now: datetime) -> list[dict[str, object]]:
    """The judge's `conversation_resolved` rows of these sessions, the calls made at once; a session
    the budget refuses gets none (it is scored without it)."""
    admitted = [s for s in found if judge.budget.admit(1, judge.clock()) is None]
    if not admitted:
        return []

    def conversation(session: Session) -> list[tuple[str | None, str | None]]:
        turns = [(t.question, t.answer) for t in session.turns]
        if judge.redactor is None:
            return turns
        redact = judge.redactor.redact
        return [(q and redact(q), a and redact(a)) for q, a in turns]

    with ThreadPoolExecutor(judge.max_concurrency, thread_name_prefix="ragpulse-session-judge") as pool:
        scores = list(pool.map(lambda s: _judged(judge, conversation(s)), admitted))
    for score in scores:
        judge.budget.used_tokens(score.judge_tokens, judge.clock())
    return [judge_row(session, score, now) for session, score in zip(admitted, scores, strict=True)]


def _judged(judge: SessionJudge, conversation: Conversation) -> Score:
    try:
        return judge.evaluate(conversation)
    except Exception as exc:  # a scorer bug: fail closed, never a missing or passing score
        log.exception("the judge's conversation_resolved failed")
        return Score.fail_error(RESOLVED, "evaluator_error", f"the evaluator raised {exc!r}")
