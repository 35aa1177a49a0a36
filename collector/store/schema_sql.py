"""The SQL that makes the schema of `collector/schema/tables.py`: each table's `CREATE TABLE`, and
the views users query (`spans` and `span_events`: the first stored copy of each span and event,
and a write-back event per score; `sessions`: the traces of each conversation together)."""

from __future__ import annotations

from collections.abc import Sequence

from collector.schema.tables import (
    EVALUATION_EVENT,
    EVENT_KEY,
    MAX_EVENT_ITEMS,
    MAX_EVENT_TEXT,
    NOT_NULL_KEY_COLUMNS,
    SCORE_HISTORY,
    SCORES,
    SPAN_EVENTS,
    SPAN_KEY,
    SPANS,
    WRITEBACK_SOURCE,
    Column,
    Table,
)
from collector.store.reads.predicates import OUR_EVALUATORS


def column_ddl(column: Column) -> str:
    """`name TYPE constraint`, as `CREATE TABLE` and `ADD COLUMN` take it."""
    return f"{column.name} {column.sql_type} {column.constraint}".strip()


def create_table_sql(table: Table, version: int | None = None) -> str:
    """`CREATE TABLE` with every column, or those that existed at schema `version`."""
    columns = [c for c in table.columns if version is None or c.since <= version]
    body = ",\n    ".join(column_ddl(c) for c in columns)
    return f"CREATE TABLE {table.name} (\n    {body}\n);"


def first_copies_sql(table: str, key: tuple[str, ...], columns: Sequence[str]) -> str:
    """SQL: `columns` of the rows of `table` that no row stored before them repeats on `key` (a
    lower `rowid`: an earlier commit, or in one commit a row written before). The copy kept is the
    one acknowledged first, which assembly read; a row id keeps its order through deletions and
    compaction, on the file and on a lake, so the same copy is kept every time.

    A join, not a window: a filter on any column of the outer query is applied to the rows before
    their earlier copies are looked for (a window makes every filter but one on the key wait for
    it, and carries every column read through it: several times slower for queries over all spans,
    and out of memory under `store.memory_limit` for one reading the attributes), and a filter on
    `trace_id` reaches both sides, so a trace's spans are read as fast as before."""
    on = " AND ".join(
        f"d.{c} = r.{c}" if c in NOT_NULL_KEY_COLUMNS else f"d.{c} IS NOT DISTINCT FROM r.{c}" for c in key
    )
    return (
        f"SELECT {', '.join('r.' + c for c in columns)} FROM {table} r "
        f"LEFT JOIN {table} d ON {on} AND d.rowid < r.rowid WHERE d.rowid IS NULL"
    )


def first_stored(key: tuple[str, ...], alias: str) -> str:
    """SQL: a QUALIFY clause keeping the first stored row of each `key` among rows already chosen
    (`alias`: a few traces' rows, for assembly), as `first_copies_sql` keeps it among all rows."""
    partition = ", ".join(f"{alias}.{column}" for column in key)
    return f"QUALIFY row_number() OVER (PARTITION BY {partition} ORDER BY {alias}.rowid) = 1"


SPANS_VIEW = (
    "CREATE OR REPLACE VIEW spans AS\n"
    + first_copies_sql("received_spans", SPAN_KEY, SPANS.column_names)
    + ";"
)


def _clipped(text: str) -> str:
    """SQL: `text` cut to `MAX_EVENT_TEXT` characters, as `scoring._clip` cuts it."""
    return (
        f"CASE WHEN length({text}) <= {MAX_EVENT_TEXT} THEN {text} "
        f"ELSE substring({text}, 1, {MAX_EVENT_TEXT - 1}) || '…' END"
    )


_ITEMS_TYPE = """'[{"text": "VARCHAR", "ok": "BOOLEAN", "evidence": "VARCHAR"}]'"""

# The received events as schema 8 showed them: every stored row (migration 8 keeps this text).
EVERY_RECEIVED_EVENT = "received_span_events"
# Since schema 10: the first stored copy of each event. No received event has the write-back source
# (every decoder sets its own; migration 8 deleted the stored write-back events), and saying so
# lets a filter `source = 'ragpulse'` skip the received events, and the search for their copies,
# at once.
FIRST_RECEIVED_EVENTS = (
    f"({first_copies_sql('received_span_events', EVENT_KEY, SPAN_EVENTS.column_names)}) "
    f"WHERE source <> '{WRITEBACK_SOURCE}'"
)


# The scores schemas 8 to 10 wrote back: every row.
EVERY_SCORE = "scores"
# Since schema 11: every score but the external ones, which are the app's own events, received
# already (`evaluator = 'external'`); a human score (feedback) is written back like ragpulse's own.
WRITTEN_BACK_SCORES = "scores WHERE evaluator IS DISTINCT FROM 'external'"


def span_events_view(received: str = FIRST_RECEIVED_EVENTS, scores: str = WRITTEN_BACK_SCORES) -> str:
    """`CREATE VIEW span_events`: the `received` events (what follows FROM), and the write-back event
    of each of the `scores` (what follows FROM), with the attributes `scoring.event_attributes`
    gives the event it exports (tests hold the two equal): nulls are left out (`json_merge_patch`
    drops them)."""
    return f"""CREATE OR REPLACE VIEW span_events AS
SELECT trace_id, span_id, time, name, attributes, source, received_at FROM {received}
UNION ALL
SELECT trace_id, span_id, created_at AS time, '{EVALUATION_EVENT}' AS name,
    json_merge_patch('{{}}', json_object(
        'gen_ai.evaluation.name', name,
        'gen_ai.evaluation.score.label', coalesce(nullif(label, ''), status),
        'ragpulse.status', status,
        'ragpulse.evaluator', evaluator,
        'ragpulse.revision', revision,
        'gen_ai.evaluation.score.value', value,
        'gen_ai.evaluation.explanation', {_clipped("nullif(explanation, '')")},
        'error.type', CASE WHEN status = 'error' THEN coalesce(nullif(label, ''), 'error') END,
        'ragpulse.threshold', threshold,
        'ragpulse.judge.model', nullif(judge_model, ''),
        'ragpulse.prompt_version', nullif(prompt_version, ''),
        'ragpulse.items', CASE WHEN json_array_length(items) > 0 THEN to_json(list_transform(
            from_json(items, {_ITEMS_TYPE})[1:{MAX_EVENT_ITEMS}],
            i -> {{'text': {_clipped("i.text")}, 'ok': i.ok, 'evidence': {_clipped("i.evidence")}}}
        ))::VARCHAR END
    )) AS attributes,
    '{WRITEBACK_SOURCE}' AS source, created_at AS received_at
FROM {scores};"""


SPAN_EVENTS_VIEW = span_events_view()


# `sessions.idle_timeout`'s default: a session with no new turn for this long has ended.
DEFAULT_IDLE_TIMEOUT = 1800.0


def sessions_view(idle_timeout: float = DEFAULT_IDLE_TIMEOUT) -> str:
    """`CREATE VIEW sessions`: the rows of `session_rollups` with their status (docs/sessions.md).
    `status` is `ended` once `last_activity` is older than `idle_timeout` seconds: a view cannot
    read the config, so the store defines it again with the configured value when it opens
    (`Store.define_sessions_view`)."""
    return f"CREATE OR REPLACE VIEW sessions AS\n{sessions_select(idle_timeout)};"


def sessions_select(idle_timeout: float) -> str:
    """The SELECT of the `sessions` view: `session_rollups` with each session's status now."""
    if not idle_timeout > 0:
        raise ValueError("idle_timeout: seconds, more than 0")
    # `to_microseconds`: an INTERVAL literal holds at most 2^31 - 1 microseconds (36 minutes).
    idle = f"to_microseconds({round(idle_timeout * 1_000_000)})"
    return (
        "SELECT session_id, service_name, user_id, turns, started_at, last_activity,\n"
        f"    CASE WHEN last_activity < now()::TIMESTAMP - {idle} THEN 'ended' ELSE 'open' END AS status,\n"
        "    failed_turns, mean_score, score_means, score_fails\n"
        "FROM session_rollups WHERE session_id IS NOT NULL"
    )


def session_rollup_select(keys: str | None = None, session_level: bool = True) -> str:
    """The rows of `session_rollups` (but `refreshed_at`) computed from `traces` and `scores`: the
    turns and their times from `traces` (the app's own traffic with a session id), the scores
    given by ragpulse's own evaluators. `keys`: a query of `(session_id, service_name)` rows (SQL,
    already validated or quoted): only those sessions are computed, every turn of theirs counted;
    None: every session (the migration that made the table). Session-level scores (`level`, schema
    14; `session_level` false before it) are left out: a session's figures are its turns'."""
    narrowed, of_turns = "", ""
    of_level = " AND level IS NULL" if session_level else ""
    if keys is not None:
        narrowed = f" AND (session_id, service_name) IN ({keys})"
        of_turns = "\n        AND trace_id IN (SELECT trace_id FROM turns)"
    # Shaped for a `store.memory_limit` of 128 MB (half the default) over hundreds of thousands of
    # turns: the scores are summed per trace and per name apart, each joined to the turns' keys alone, and the
    # maps are built from unsorted lists (a sorted list aggregate holds every row in memory and ran
    # out of it on 500,000 turns; bench/sessions.py).
    return f"""WITH turns AS (
    SELECT trace_id, session_id, service_name, user_id, start_time,
        coalesce(end_time, start_time) AS last_at
    FROM traces WHERE session_id IS NOT NULL AND probe IS NULL{narrowed}
), applied AS (
    -- ragpulse's own scores that applied: people's and apps' scores make no turn fail
    SELECT trace_id, name, value, status FROM scores
    WHERE evaluator IN {OUR_EVALUATORS} AND status IN ('pass', 'fail'){of_level}{of_turns}
), per_trace AS (
    SELECT trace_id, bool_or(status = 'fail') AS failed, sum(value) AS total, count(value) AS n
    FROM applied GROUP BY trace_id
), per_name AS (
    SELECT t.session_id, t.service_name, a.name, avg(a.value) AS mean,
        count(*) FILTER (WHERE a.status = 'fail') AS fails
    FROM (SELECT trace_id, session_id, service_name FROM turns) t JOIN applied a USING (trace_id)
    GROUP BY ALL
), names AS (
    SELECT session_id, service_name,
        map(list(name), list(mean)) AS score_means, map(list(name), list(fails)) AS score_fails
    FROM per_name GROUP BY ALL
), per_session AS (
    SELECT t.session_id, t.service_name,
        arg_max(t.user_id, t.start_time) FILTER (WHERE t.user_id IS NOT NULL) AS user_id,
        count(*) AS turns, min(t.start_time) AS started_at, max(t.last_at) AS last_activity,
        count(*) FILTER (WHERE p.failed) AS failed_turns, sum(p.total) / nullif(sum(p.n), 0) AS mean_score
    FROM turns t LEFT JOIN per_trace p USING (trace_id) GROUP BY ALL
)
SELECT s.session_id, s.service_name, s.user_id, s.turns, s.started_at, s.last_activity,
    s.failed_turns, s.mean_score,
    coalesce(n.score_means, MAP {{}}::MAP(VARCHAR, DOUBLE)) AS score_means,
    coalesce(n.score_fails, MAP {{}}::MAP(VARCHAR, BIGINT)) AS score_fails
FROM per_session s LEFT JOIN names n USING (session_id, service_name)"""


def refresh_session_rollups_sql(keys: str) -> str:
    """Replace the rows of the sessions `keys` names (a query of `(session_id, service_name)` rows)
    with rows computed afresh; a session with no turn left loses its row."""
    delete = f"DELETE FROM session_rollups WHERE (session_id, service_name) IN ({keys});"
    return f"{delete}\n{fill_session_rollups(keys)}"


def fill_session_rollups(keys: str | None = None, session_level: bool = True) -> str:
    """Add the rows of these sessions (`session_rollup_select`'s `keys`), computed now."""
    rows = session_rollup_select(keys, session_level)
    return f"INSERT INTO session_rollups SELECT *, now()::TIMESTAMP AS refreshed_at FROM ({rows});"


SESSIONS_VIEW = sessions_view()

# The rollups of every session, computed once (the migration that made `session_rollups`).
FILL_SESSION_ROLLUPS_13 = fill_session_rollups(session_level=False)

# Every score ever given (schema 15): the current rows of `scores` (`replaced_at` null) and the rows
# rescore runs replaced (`score_history`). The columns are named, so that the dimension columns
# `scores` gains (`monitoring.dimensions`) do not change the view's shape.
_HISTORY_ONLY = tuple(c for c in SCORE_HISTORY.column_names if c not in SCORES.column_names)
SCORES_ALL_VIEW = (
    "CREATE OR REPLACE VIEW scores_all AS\n"
    f"SELECT {', '.join(SCORES.column_names)}, "
    + ", ".join(f"NULL::{SCORE_HISTORY.column(c).sql_type} AS {c}" for c in _HISTORY_ONLY)
    + " FROM scores\nUNION ALL\n"
    f"SELECT {', '.join(SCORE_HISTORY.column_names)} FROM score_history;"
)
