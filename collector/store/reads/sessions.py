"""The reads of sessions (`collector/dashboard/data.py` runs them for `/api/sessions`): a page of
sessions, filtered and sorted, and one session's turns with their scores (docs/sessions.md).

The rows are those of the `sessions` view (`sessions_select`, with the configured idle timeout):
`session_rollups`, which the sessions refresher keeps current, so a page is a filter and a sort of
one row per session, not an aggregation of every turn (seconds on a store of 100,000 sessions).

Each builder returns one SELECT over the tables and views SQL users see; values from the request are
validated by the caller or quoted here (`sql_string`), never pasted raw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from collector.schema.windows import Window
from collector.store.reads.predicates import OUR_EVALUATORS, sql_string, window_sql
from collector.store.schema_sql import DEFAULT_IDLE_TIMEOUT, sessions_select

SessionSort = Literal["worst", "last_activity", "turns"]
SESSION_SORTS: tuple[SessionSort, ...] = ("worst", "last_activity", "turns")
SESSION_STATUSES = ("open", "ended")
# Text shown per turn (a turn's whole text is in its trace).
TURN_TEXT_CHARS = 2000


@dataclass(frozen=True)
class SessionFilter:
    """The session list's filters, sort and page. A session is in the window when its last activity
    is: the conversations that were going on then."""

    window: Window
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT  # `sessions.idle_timeout`: when a session has ended
    service: str | None = None
    status: str | None = None  # open | ended
    user: str | None = None
    sort: SessionSort = "worst"
    descending: bool = True
    limit: int = 50
    offset: int = 0

    def where(self) -> str:
        clauses = [window_sql(self.window, "last_activity")]
        if self.service is not None:
            clauses.append(f"service_name = {sql_string(self.service)}")
        if self.status is not None:
            clauses.append(f"status = {sql_string(self.status)}")
        if self.user is not None:
            clauses.append(f"user_id = {sql_string(self.user)}")
        return " AND ".join(clauses)

    def order_by(self) -> str:
        """The sort, then a stable tie-break (newest activity, then the key) so pages never overlap."""
        direction = "DESC" if self.descending else "ASC"
        if self.sort == "worst":
            # Worst first: most failed turns, then the lowest mean of all scores (unscored last).
            opposite = "ASC" if self.descending else "DESC"
            first = f"failed_turns {direction}, mean_score {opposite} NULLS LAST"
        else:
            first = f"{self.sort} {direction}"
        return f"{first}, last_activity DESC, session_id, service_name"


def session_page_sql(f: SessionFilter) -> str:
    """One page of the filtered sessions, sorted, each row with `total`, the number the filters
    match (counted in the same pass: the sessions are aggregated once)."""
    return (
        f"SELECT *, count(*) OVER () AS total FROM ({sessions_select(f.idle_timeout)}) "
        f"WHERE {f.where()} ORDER BY {f.order_by()} LIMIT {int(f.limit)} OFFSET {int(f.offset)}"
    )


def session_count_sql(f: SessionFilter) -> str:
    """How many sessions the filters match (for a page past the last)."""
    return f"SELECT count(*) AS total FROM ({sessions_select(f.idle_timeout)}) WHERE {f.where()}"


def _key(session_id: str, service: str | None, alias: str = "") -> str:
    prefix = f"{alias}." if alias else ""
    clause = f"{prefix}session_id = {sql_string(session_id)}"
    return clause if service is None else f"{clause} AND {prefix}service_name = {sql_string(service)}"


def session_sql(session_id: str, service: str | None, idle_timeout: float = DEFAULT_IDLE_TIMEOUT) -> str:
    """The session's rows of `sessions`: one per service it exists under (of `service` when given)."""
    rows = sessions_select(idle_timeout)
    return f"SELECT * FROM ({rows}) WHERE {_key(session_id, service)} ORDER BY service_name"


def _turns(session_id: str, service: str) -> str:
    # The traces the view counts as the session's turns (the app's own traffic).
    return f"SELECT trace_id FROM traces WHERE {_key(session_id, service)} AND probe IS NULL"


def turns_sql(session_id: str, service: str) -> str:
    """The session's turns in order (start time, then trace id)."""
    return (
        "SELECT trace_id, start_time, end_time, duration_ms, user_id, "
        f"left(question, {TURN_TEXT_CHARS}) AS question, left(answer, {TURN_TEXT_CHARS}) AS answer, status "
        f"FROM traces WHERE {_key(session_id, service)} AND probe IS NULL "
        "ORDER BY start_time, trace_id"
    )


def turn_scores_sql(session_id: str, service: str) -> str:
    """The scores of the session's turns (every evaluator's; `ours`: whether it counts toward the
    session's failed turns and means; `level`: `session` for the session-level scores, on its last
    turn), by trace and name."""
    return (
        "SELECT trace_id, name, value, status, evaluator, level, "
        f"coalesce(evaluator IN {OUR_EVALUATORS} AND level IS NULL, false) AS ours FROM scores "
        f"WHERE trace_id IN ({_turns(session_id, service)}) ORDER BY trace_id, name, span_id"
    )
