"""The review queues' reads: which traces a reviewer labels next, for one score name.

- `random`: a uniform sample of the window's traces that have a pass or fail of that score from one
  of ragpulse's evaluators, minus those the reviewer has already judged. Drawn without looking at
  the score, so the agreement measured on it is the evaluator's (docs/feedback.md).
- `contested`: the scores worth a second look, nearest the line first: a value within `margin` of
  its threshold (borderline), a user's feedback or an app's own score on the trace that says the
  opposite (disputed), or another reviewer's verdict that differs from the score (contested).

The window is on the traces' start minute (`scores.bucket`), as on the dashboard.
"""

from __future__ import annotations

from collector.schema.windows import Window
from collector.store.reads.predicates import OUR_EVALUATORS, OUTSIDE_EVALUATORS, sql_string, window_sql

# Scores people review: those ragpulse gave (not users' feedback or apps' own scores).
_OURS = f"s.evaluator IN {OUR_EVALUATORS} AND s.status IN ('pass', 'fail')"


def _candidates(name: str, window: Window, service: str | None, author: str) -> str:
    """One row per trace with a reviewable score `name` in the window that `author` has not judged:
    the latest such score of the trace (a trace scored again keeps its newest verdict)."""
    where = [
        f"s.name = {sql_string(name)}",
        _OURS,
        window_sql(window.whole_minutes(), "s.bucket"),
        "NOT EXISTS (SELECT 1 FROM annotations a WHERE a.trace_id = s.trace_id "
        f"AND a.name = s.name AND a.author = {sql_string(author)})",
    ]
    if service is not None:
        where.append(f"s.service_name = {sql_string(service)}")
    return (
        "SELECT s.trace_id, s.name, s.status, s.value, s.threshold, s.evaluator, s.judge_model, "
        "s.prompt_version, s.bucket FROM scores s WHERE "
        + " AND ".join(where)
        + " QUALIFY row_number() OVER (PARTITION BY s.trace_id ORDER BY s.created_at DESC) = 1"
    )


def random_queue_sql(name: str, window: Window, service: str | None, author: str, limit: int) -> str:
    """Up to `limit` traces of the random queue, in a uniformly random order, and (on every row)
    how many traces the queue holds in all."""
    return (
        "SELECT c.*, NULL AS reason, count(*) OVER () AS remaining "
        f"FROM ({_candidates(name, window, service, author)}) c ORDER BY random() LIMIT {int(limit)}"
    )


def contested_queue_sql(
    name: str, window: Window, service: str | None, author: str, limit: int, margin: float
) -> str:
    """Up to `limit` traces of the contested queue, nearest the line first (disputed ones, then by
    distance to the threshold), each with the `reason` it is there, and the queue's size."""
    opposite = "CASE c.status WHEN 'pass' THEN 'fail' ELSE 'pass' END"
    users = (
        "(SELECT min(f.name) FROM scores f WHERE f.trace_id = c.trace_id "
        f"AND f.evaluator IN {OUTSIDE_EVALUATORS} AND f.status = {opposite})"
    )
    reviewers = (
        "(SELECT count(*) FROM annotations a WHERE a.trace_id = c.trace_id AND a.name = c.name "
        "AND a.human_status <> c.status)"
    )
    distance = "abs(c.value - c.threshold)"
    borderline = f"c.value IS NOT NULL AND c.threshold IS NOT NULL AND {distance} <= {float(margin)!r}"
    return f"""
WITH c AS ({_candidates(name, window, service, author)}),
why AS (
    SELECT c.*, {users} AS disputed_by, {reviewers} AS reviewers_against,
        CASE WHEN {borderline} THEN {distance} END AS distance
    FROM c
),
queued AS (
    SELECT * EXCLUDE (disputed_by, reviewers_against, distance),
        concat_ws('; ',
            CASE WHEN reviewers_against > 0 THEN 'another reviewer said ' ||
                CASE status WHEN 'pass' THEN 'fail' ELSE 'pass' END END,
            CASE WHEN disputed_by IS NOT NULL THEN 'feedback ' || disputed_by || ' says ' ||
                CASE status WHEN 'pass' THEN 'fail' ELSE 'pass' END END,
            CASE WHEN distance IS NOT NULL THEN 'value ' || round(value, 3) || ' near its threshold ' ||
                round(threshold, 3) END) AS reason,
        (reviewers_against > 0 OR disputed_by IS NOT NULL) AS disputed, distance
    FROM why
    WHERE reviewers_against > 0 OR disputed_by IS NOT NULL OR distance IS NOT NULL
)
SELECT * EXCLUDE (disputed, distance), count(*) OVER () AS remaining FROM queued
ORDER BY disputed DESC, distance NULLS LAST, trace_id LIMIT {int(limit)}
"""


def reviewable_names_sql(window: Window, service: str | None) -> str:
    """The score names that can be reviewed in the window, with how many traces each."""
    where = [_OURS, window_sql(window.whole_minutes(), "s.bucket")]
    if service is not None:
        where.append(f"s.service_name = {sql_string(service)}")
    return (
        "SELECT s.name, count(DISTINCT s.trace_id) AS traces, "
        "count(DISTINCT s.trace_id) FILTER (s.evaluator = 'judge') AS judged "
        f"FROM scores s WHERE {' AND '.join(where)} GROUP BY s.name ORDER BY judged DESC, s.name"
    )


def feedback_names_sql(window: Window, service: str | None) -> str:
    """The names of the feedback users (and apps) gave in the window, the most given first."""
    where = [
        f"evaluator IN {OUTSIDE_EVALUATORS}",
        "status IN ('pass', 'fail')",
        window_sql(window, "created_at"),
    ]
    if service is not None:
        where.append(f"service_name = {sql_string(service)}")
    return (
        f"SELECT name, count(*) AS n FROM scores WHERE {' AND '.join(where)} "
        "GROUP BY name ORDER BY n DESC, name"
    )


def trace_annotations_sql(trace_id: str) -> str:
    """The verdicts people gave on a trace's scores, newest first."""
    return (
        "SELECT name, author, human_status, human_value, claims, comment, queue, created_at, "
        "score_status, score_value FROM annotations "
        f"WHERE trace_id = {sql_string(trace_id)} ORDER BY created_at DESC"
    )
