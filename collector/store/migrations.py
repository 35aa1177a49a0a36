"""Versioned schema migrations. Each entry runs once, in order, inside one transaction.

The tables' current shape is defined in `tables.py`, each column with the schema version that
added it; the SQL here is how a database file gets there. To add a column: add it in `tables.py`
with the next version as its `since`, then append a migration made with `add_columns`. A new
table: define it (every column `since` the new version) and create it with `create_tables`.
Never edit a migration that has shipped (files in the field carry it). The first two are kept as
the SQL they shipped with. `spans` and `span_events` are views (schema 10): a column of spans is
added to `received_spans` (`RECEIVED_SPANS`), and the migration then creates `SPANS_VIEW` again.
`sessions` is a view over `traces` and `scores` (schema 12), then over `session_rollups` (13).
"""

from __future__ import annotations

from collector.schema.tables import (
    ALERT_EVENTS,
    ALERT_NOTIFICATIONS,
    ALERTS,
    ANNOTATIONS,
    CANARY_RUNS,
    EVALUATION_OUTBOX,
    FEEDBACK,
    PROBE_RUNS,
    RESCORE_RUNS,
    SCORE_AGGREGATES,
    SCORE_HISTORY,
    SCORED_SESSIONS,
    SCORES,
    SESSION_ROLLUPS,
    SPAN_EVENTS,
    STEPS,
    TRACES,
    WRITEBACK_SOURCE,
    Table,
)
from collector.store.schema_sql import (
    EVERY_RECEIVED_EVENT,
    EVERY_SCORE,
    FILL_SESSION_ROLLUPS_13,
    SCORES_ALL_VIEW,
    SESSIONS_VIEW,
    SPAN_EVENTS_VIEW,
    SPANS_VIEW,
    column_ddl,
    create_table_sql,
    span_events_view,
)


def create_tables(version: int, *tables: Table) -> str:
    """`CREATE TABLE` for tables defined in `tables.py`, with the columns they had at `version`."""
    return "\n".join(create_table_sql(table, version) for table in tables)


def add_columns(table: Table, *names: str) -> str:
    """`ALTER TABLE ... ADD COLUMN` for columns already defined in `tables.py`."""
    return "\n".join(f"ALTER TABLE {table.name} ADD COLUMN {column_ddl(table.column(n))};" for n in names)


# The sessions view as schema 12 shipped it (aggregated from `traces` and `scores` on every read);
# schema 13 replaces it with `SESSIONS_VIEW`, over `session_rollups`.
SESSIONS_VIEW_12 = """
CREATE OR REPLACE VIEW sessions AS
WITH turns AS (
    SELECT trace_id, session_id, service_name, user_id, start_time,
        coalesce(end_time, start_time) AS last_at
    FROM traces WHERE session_id IS NOT NULL AND probe IS NULL
), applied AS (
    -- ragpulse's own scores that applied: people's and apps' scores make no turn fail
    SELECT trace_id, name, value, status FROM scores
    WHERE evaluator IN ('deterministic', 'judge') AND status IN ('pass', 'fail')
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
    CASE WHEN s.last_activity < now()::TIMESTAMP - INTERVAL 1800000000 MICROSECOND
        THEN 'ended' ELSE 'open' END AS status,
    s.failed_turns, s.mean_score,
    coalesce(n.score_means, MAP {}::MAP(VARCHAR, DOUBLE)) AS score_means,
    coalesce(n.score_fails, MAP {}::MAP(VARCHAR, BIGINT)) AS score_fails
FROM per_session s LEFT JOIN names n USING (session_id, service_name);
"""


MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "spans and span events",
        """
        CREATE TABLE spans (
            trace_id VARCHAR NOT NULL,
            span_id VARCHAR NOT NULL,
            parent_span_id VARCHAR,
            name VARCHAR,
            kind VARCHAR,
            service_name VARCHAR,
            start_time TIMESTAMP,
            end_time TIMESTAMP,
            duration_ms DOUBLE,
            status_code VARCHAR,
            status_message VARCHAR,
            attributes JSON,
            resource_attributes JSON,
            scope_name VARCHAR,
            scope_version VARCHAR,
            trace_state VARCHAR,
            links JSON,
            received_at TIMESTAMP
        );
        CREATE TABLE span_events (
            trace_id VARCHAR NOT NULL,
            span_id VARCHAR NOT NULL,
            time TIMESTAMP,
            name VARCHAR,
            attributes JSON,
            source VARCHAR
        );
        """,
    ),
    (
        2,
        "assembled traces, steps, documents and golden cases",
        """
        CREATE TABLE traces (
            trace_id VARCHAR NOT NULL,
            service_name VARCHAR,
            root_span_id VARCHAR,
            start_time TIMESTAMP,
            end_time TIMESTAMP,
            duration_ms DOUBLE,
            question VARCHAR,
            answer VARCHAR,
            convention VARCHAR,
            status VARCHAR,
            sample_decision VARCHAR,
            sample_reason VARCHAR,
            retrieval_ms DOUBLE,
            generation_ms DOUBLE,
            input_tokens BIGINT,
            output_tokens BIGINT,
            span_count INTEGER,
            step_count INTEGER,
            case_id VARCHAR,
            case_match VARCHAR,
            expected_documents JSON,
            expected_answer VARCHAR,
            session_id VARCHAR,
            mapping_error VARCHAR,
            assembled_at TIMESTAMP,
            assembly_reason VARCHAR,
            assembly_count INTEGER,
            last_received_at TIMESTAMP
        );
        CREATE TABLE steps (
            trace_id VARCHAR NOT NULL,
            span_id VARCHAR NOT NULL,
            parent_span_id VARCHAR,
            position INTEGER,
            kind VARCHAR,
            name VARCHAR,
            convention VARCHAR,
            model VARCHAR,
            provider VARCHAR,
            query VARCHAR,
            input VARCHAR,
            output VARCHAR,
            start_time TIMESTAMP,
            end_time TIMESTAMP,
            duration_ms DOUBLE,
            input_tokens BIGINT,
            output_tokens BIGINT,
            total_tokens BIGINT,
            status VARCHAR,
            span_ids VARCHAR[]
        );
        CREATE TABLE documents (
            trace_id VARCHAR NOT NULL,
            span_id VARCHAR NOT NULL,
            stage VARCHAR,
            rank INTEGER,
            doc_id VARCHAR,
            content VARCHAR,
            score DOUBLE,
            distance DOUBLE,
            metadata JSON
        );
        CREATE TABLE cases (
            case_id VARCHAR PRIMARY KEY,
            question VARCHAR,
            normalized_question VARCHAR,
            expected_documents JSON,
            expected_answer VARCHAR,
            metadata JSON,
            source VARCHAR,
            loaded_at TIMESTAMP
        );
        """,
    ),
    (
        3,
        "when each span event was received",
        # Events sent as logs arrive apart from their spans: a restart must know which came after
        # their trace was assembled (`Store.pending_trace_ids`). NULL for rows stored before.
        add_columns(SPAN_EVENTS, "received_at"),
    ),
    (
        4,
        "online scoring: scores, their aggregates, the evaluation outbox, judge status of traces",
        create_tables(4, SCORES, SCORE_AGGREGATES, EVALUATION_OUTBOX)
        + "\n"
        + add_columns(TRACES, "judge_status", "scored_at"),
    ),
    (
        5,
        "monitoring: alerts, their events and notifications, and judge canary runs",
        create_tables(5, ALERTS, ALERT_EVENTS, ALERT_NOTIFICATIONS, CANARY_RUNS),
    ),
    (
        6,
        "scale-out: the replica that assembled each trace and exports each evaluation event",
        add_columns(TRACES, "replica") + "\n" + add_columns(EVALUATION_OUTBOX, "replica"),
    ),
    (
        7,
        "slices and probes: probe traffic marked in traces, scores, aggregates; alerts by slice; probe runs",
        "\n".join(
            (
                add_columns(TRACES, "probe", "probe_run"),
                add_columns(SCORES, "probe"),
                add_columns(SCORE_AGGREGATES, "probe"),
                add_columns(ALERTS, "slice"),
                add_columns(ALERT_EVENTS, "slice"),
                create_tables(7, PROBE_RUNS),
            )
        ),
    ),
    (
        8,
        "write-back events made from scores when read: span_events becomes a view",
        # The received events keep their rows under a new name; the stored write-back events go
        # (the view makes each again from its score, with the same attributes).
        "ALTER TABLE span_events RENAME TO received_span_events;\n"
        f"DELETE FROM received_span_events WHERE source = '{WRITEBACK_SOURCE}';\n"
        + span_events_view(EVERY_RECEIVED_EVENT, EVERY_SCORE),
    ),
    (
        9,
        "agents: tool calls and errors, retrieval rounds, LLM calls per trace; tool and result size per step",
        add_columns(TRACES, "tool_calls", "tool_errors", "retrieval_rounds", "llm_calls")
        + "\n"
        + add_columns(STEPS, "tool_name", "result_size"),
    ),
    (
        10,
        "a span stored once: spans and span_events show the first stored copy of each span and event",
        # The rows stay as they are, copies included (the views leave the later copies out), and the
        # span writer appends to the table under its new name: nothing is rewritten.
        "ALTER TABLE spans RENAME TO received_spans;\n"
        + SPANS_VIEW
        + "\n"
        + span_events_view(scores=EVERY_SCORE),
    ),
    (
        11,
        "people in the loop: feedback, external scores, annotations; who gave a score; a trace's responses",
        "\n".join(
            (
                create_tables(11, FEEDBACK, ANNOTATIONS),
                add_columns(SCORES, "source", "feedback_id"),
                add_columns(TRACES, "response_ids"),
                # The app's own evaluation events are received events already: not written back.
                SPAN_EVENTS_VIEW,
            )
        ),
    ),
    (
        12,
        "sessions: the user of each trace, and the sessions view",
        # The view with the default idle timeout; the store defines it again with the configured
        # one when it opens (`Store.define_sessions_view`).
        add_columns(TRACES, "user_id") + "\n" + SESSIONS_VIEW_12,
    ),
    (
        13,
        "sessions kept as they change: session_rollups, read by the sessions view",
        # Computed once here for the sessions stored so far; then the sessions refresher computes a
        # session again after each write that touches one of its turns.
        "\n".join((create_tables(13, SESSION_ROLLUPS), FILL_SESSION_ROLLUPS_13, SESSIONS_VIEW)),
    ),
    (
        14,
        "session-level scores: scores.level, and the sessions scored",
        # The sessions stored before count as scored: their scores would land in old minutes'
        # aggregates (re-scoring history is `ragpulse rescore`'s to do).
        add_columns(SCORES, "level")
        + "\n"
        + create_tables(14, SCORED_SESSIONS)
        + "\nINSERT INTO scored_sessions SELECT session_id, service_name, last_activity, turns, "
        "now()::TIMESTAMP FROM session_rollups WHERE session_id IS NOT NULL;",
    ),
    (
        15,
        "re-scoring history: evaluator versions, rescore runs, and the scores they replaced",
        "\n".join(
            (
                add_columns(SCORES, "evaluator_version", "rescore_run"),
                create_tables(15, SCORE_HISTORY, RESCORE_RUNS),
                SCORES_ALL_VIEW,
            )
        ),
    ),
]

LATEST_VERSION = MIGRATIONS[-1][0]
