"""The conversation before a trace, as its judge is shown it (docs/sessions.md, "Multi-turn
judging"): the judge stage (through `Store.earlier_turns`), and `ragpulse datasets export --labels`
and `ragpulse align` (through their `SqlRunner`), which must show a judge what the service's judge
was shown, run this one SELECT."""

from __future__ import annotations

from collections.abc import Sequence

from collector.store.reads.predicates import sql_string


def earlier_turns_sql(trace_ids: Sequence[str], turns: int) -> str:
    """For each of these traces with a session id: the last `turns` turns of its session (the same
    service, the app's own traffic) that started before it (ties: the smaller trace id first),
    oldest first: `trace_id, question, answer`."""
    ids = ", ".join(sql_string(t) for t in trace_ids) or "NULL"
    return f"""WITH asked AS (
    SELECT trace_id, session_id, service_name, start_time FROM traces
    WHERE trace_id IN ({ids}) AND session_id IS NOT NULL AND start_time IS NOT NULL
), earlier AS (
    SELECT a.trace_id, t.question, t.answer,
        row_number() OVER (PARTITION BY a.trace_id ORDER BY t.start_time DESC, t.trace_id DESC) AS back
    FROM asked a JOIN traces t ON t.session_id = a.session_id AND t.service_name = a.service_name
        AND t.probe IS NULL
        AND (t.start_time < a.start_time OR (t.start_time = a.start_time AND t.trace_id < a.trace_id))
)
SELECT trace_id, question, answer FROM earlier WHERE back <= {int(turns)} ORDER BY trace_id, back DESC"""


def turns_by_trace(
    rows: Sequence[tuple[str, str | None, str | None]],
) -> dict[str, list[tuple[str | None, str | None]]]:
    """The rows of `earlier_turns_sql` as each trace's earlier (question, answer) turns, oldest first."""
    found: dict[str, list[tuple[str | None, str | None]]] = {}
    for trace_id, question, answer in rows:
        found.setdefault(trace_id, []).append((question, answer))
    return found
