"""Every stored table, defined once: its columns, DuckDB types and Arrow schema come from here.

The DDL that migrations create (`store/schema_sql.py`, `store/migrations.py`), the Arrow schemas
that the decoder and the assembler build (`otlp/batch.py`, `schema/trace_rows.py`, `datasets.py`)
and the columns read back into records (`schema/span_records.py`) are all derived from these
definitions. Adding a column is one edit here plus a migration (`add_columns`);
`tests/collector/store/test_schema_migrations.py` checks that the migrated database has exactly these columns.
"""

from __future__ import annotations

from dataclasses import replace

# What a table is (its columns, Arrow schema, rows) lives in table_model; imported from here as well.
from collector.schema.table_model import Column as Column
from collector.schema.table_model import Table as Table
from collector.schema.table_model import TimeUnit as TimeUnit
from collector.schema.table_model import columns_of as _columns

_KEY = "NOT NULL"
WRITEBACK_SOURCE = "ragpulse"  # span_events.source of the events ragpulse writes back
EVALUATION_EVENT = "gen_ai.evaluation.result"  # the name of those events
# Claims and documents behind a score travel with its event, cut to keep events small.
MAX_EVENT_ITEMS = 20
MAX_EVENT_TEXT = 1_000

SPANS = Table(
    "spans",
    _columns(
        ("trace_id", "VARCHAR", _KEY),
        ("span_id", "VARCHAR", _KEY),
        ("parent_span_id", "VARCHAR"),
        ("name", "VARCHAR"),
        ("kind", "VARCHAR"),
        ("service_name", "VARCHAR"),
        ("start_time", "TIMESTAMP"),
        ("end_time", "TIMESTAMP"),
        ("duration_ms", "DOUBLE"),
        ("status_code", "VARCHAR"),
        ("status_message", "VARCHAR"),
        ("attributes", "JSON"),
        ("resource_attributes", "JSON"),
        ("scope_name", "VARCHAR"),
        ("scope_version", "VARCHAR"),
        ("trace_state", "VARCHAR"),
        ("links", "JSON"),
        ("received_at", "TIMESTAMP"),
    ),
    time_unit="ns",
)

# A span is stored once as users see it, however often it was received: an OTLP client that retries
# an export the store had already committed, or a capture replayed twice, appends every row again
# (to `received_spans`, `received_span_events`), and `spans` and `span_events` are views that show
# the first stored copy of each span, and of each event, and no other. Deduplicating on write was
# measured instead (bench/README.md, "A span stored once"): a key checked on every group commit
# made ingest 64 % slower, with an index that grows with the store in memory (and a lake has no
# indexes); the views cost the queries that read every span instead.
SPAN_KEY = ("trace_id", "span_id")
# An event repeats another when it is of the same span, at the same time, with the same name and
# attributes, whatever its source: a replayed span's events come again with `source = 'replay'`.
EVENT_KEY = ("trace_id", "span_id", "time", "name", "attributes")
# The columns of those keys that are never null (the others of the event key may be, in rows of
# old files).
NOT_NULL_KEY_COLUMNS = ("trace_id", "span_id")


RECEIVED_SPANS = replace(SPANS, name="received_spans")

# `span_events`, as users query it, is a view (`SPAN_EVENTS_VIEW`): the events ragpulse received,
# stored in `received_span_events`, and one `gen_ai.evaluation.result` event per row of `scores`,
# made when read. Until schema 8 the write-back events were stored rows of `span_events` too, a
# second copy of every score (more bytes per trace than its spans) written on the hot path.
SPAN_EVENTS = Table(
    "span_events",
    _columns(
        ("trace_id", "VARCHAR", _KEY),
        ("span_id", "VARCHAR", _KEY),
        ("time", "TIMESTAMP"),
        ("name", "VARCHAR"),
        ("attributes", "JSON"),
        # `otlp` (a span's own event), `log` (sent on /v1/logs), `replay`, `file`; in the view also
        # `ragpulse` (a score written back as a `gen_ai.evaluation.result` event).
        ("source", "VARCHAR"),
        # When it arrived: events sent as logs come apart from their spans, and a restart must know
        # which came after their trace was assembled.
        ("received_at", "TIMESTAMP", "", 3),
    ),
    time_unit="ns",
)

RECEIVED_SPAN_EVENTS = replace(SPAN_EVENTS, name="received_span_events")


TRACES = Table(
    "traces",
    _columns(
        ("trace_id", "VARCHAR", _KEY),
        ("service_name", "VARCHAR"),
        ("root_span_id", "VARCHAR"),
        ("start_time", "TIMESTAMP"),
        ("end_time", "TIMESTAMP"),
        ("duration_ms", "DOUBLE"),
        ("question", "VARCHAR"),
        ("answer", "VARCHAR"),
        ("convention", "VARCHAR"),
        ("status", "VARCHAR"),
        ("sample_decision", "VARCHAR"),
        ("sample_reason", "VARCHAR"),
        ("retrieval_ms", "DOUBLE"),
        ("generation_ms", "DOUBLE"),
        ("input_tokens", "BIGINT"),
        ("output_tokens", "BIGINT"),
        ("span_count", "INTEGER"),
        ("step_count", "INTEGER"),
        ("case_id", "VARCHAR"),
        ("case_match", "VARCHAR"),
        ("expected_documents", "JSON"),
        ("expected_answer", "VARCHAR"),
        ("session_id", "VARCHAR"),
        ("mapping_error", "VARCHAR"),
        ("assembled_at", "TIMESTAMP"),
        ("assembly_reason", "VARCHAR"),
        ("assembly_count", "INTEGER"),
        ("last_received_at", "TIMESTAMP"),
        # Judge work: `pending` until the judge stage has stored its scores (`done`), or why it
        # did not run (`throttled`, `over_budget`); null when the trace is not judge-sampled.
        ("judge_status", "VARCHAR", "", 4),
        ("scored_at", "TIMESTAMP", "", 4),
        # The replica that assembled the trace and owns its judge work (`store.replica`, several
        # replicas on one lake); null with the embedded store.
        ("replica", "VARCHAR", "", 6),
        # Probe traffic (`probes:`): the probe that sent the request and its run; null for the app's
        # own traffic. Read from the `rag.probe` / `rag.probe.run` attributes of the probe's span.
        ("probe", "VARCHAR", "", 7),
        ("probe_run", "VARCHAR", "", 7),
        # Agents: tool calls (retrievals through tools included), retrieval steps, LLM calls.
        ("tool_calls", "INTEGER", "", 9),
        ("tool_errors", "INTEGER", "", 9),
        ("retrieval_rounds", "INTEGER", "", 9),
        ("llm_calls", "INTEGER", "", 9),
        # The `gen_ai.response.id` of the trace's LLM calls, in span order: feedback and evaluation
        # events that name a response instead of a trace are attached through them.
        ("response_ids", "VARCHAR[]", "", 11),
        # The end user the trace served (`user.id`, `enduser.id`, ...: semconv's USER_KEYS).
        ("user_id", "VARCHAR", "", 12),
    ),
)

STEPS = Table(
    "steps",
    _columns(
        ("trace_id", "VARCHAR", _KEY),
        ("span_id", "VARCHAR", _KEY),
        ("parent_span_id", "VARCHAR"),
        ("position", "INTEGER"),
        ("kind", "VARCHAR"),
        ("name", "VARCHAR"),
        ("convention", "VARCHAR"),
        ("model", "VARCHAR"),
        ("provider", "VARCHAR"),
        ("query", "VARCHAR"),
        ("input", "VARCHAR"),
        ("output", "VARCHAR"),
        ("start_time", "TIMESTAMP"),
        ("end_time", "TIMESTAMP"),
        ("duration_ms", "DOUBLE"),
        ("input_tokens", "BIGINT"),
        ("output_tokens", "BIGINT"),
        ("total_tokens", "BIGINT"),
        ("status", "VARCHAR"),
        ("span_ids", "VARCHAR[]"),
        # A tool call's tool (also on a retrieval made through a tool) and its result's characters.
        ("tool_name", "VARCHAR", "", 9),
        ("result_size", "BIGINT", "", 9),
    ),
)

DOCUMENTS = Table(
    "documents",
    _columns(
        ("trace_id", "VARCHAR", _KEY),
        ("span_id", "VARCHAR", _KEY),
        ("stage", "VARCHAR"),
        ("rank", "INTEGER"),
        ("doc_id", "VARCHAR"),
        ("content", "VARCHAR"),
        ("score", "DOUBLE"),
        ("distance", "DOUBLE"),
        ("metadata", "JSON"),
    ),
)

CASES = Table(
    "cases",
    _columns(
        ("case_id", "VARCHAR", "PRIMARY KEY"),
        ("question", "VARCHAR"),
        ("normalized_question", "VARCHAR"),
        ("expected_documents", "JSON"),
        ("expected_answer", "VARCHAR"),
        ("metadata", "JSON"),
        ("source", "VARCHAR"),
        ("loaded_at", "TIMESTAMP"),
    ),
)

SCORES = Table(
    "scores",
    _columns(
        ("trace_id", "VARCHAR", _KEY, 4),
        # The evaluated span: the retrieval span for retrieval and context scores, the LLM span
        # that wrote the answer for faithfulness and citations, the root span for answer scores.
        ("span_id", "VARCHAR", _KEY, 4),
        ("name", "VARCHAR", _KEY, 4),
        ("value", "DOUBLE", "", 4),
        ("status", "VARCHAR", "", 4),
        ("threshold", "DOUBLE", "", 4),
        ("label", "VARCHAR", "", 4),
        ("explanation", "VARCHAR", "", 4),
        ("items", "JSON", "", 4),
        ("judge_provider", "VARCHAR", "", 4),
        ("judge_model", "VARCHAR", "", 4),
        ("judge_temperature", "DOUBLE", "", 4),
        ("prompt_version", "VARCHAR", "", 4),
        ("config_hash", "VARCHAR", "", 4),
        ("judge_input_tokens", "BIGINT", "", 4),
        ("judge_output_tokens", "BIGINT", "", 4),
        ("latency_ms", "DOUBLE", "", 4),
        ("created_at", "TIMESTAMP", "", 4),
        ("service_name", "VARCHAR", "", 4),
        # The minute of the trace's start: the `score_aggregates` bucket the score counts in.
        ("bucket", "TIMESTAMP", "", 4),
        # deterministic | judge (ragpulse's own); external (a `gen_ai.evaluation.result` event the
        # app sent) | human (`POST /api/feedback`)
        ("evaluator", "VARCHAR", "", 4),
        ("revision", "INTEGER", "", 4),  # the trace's assembly count when it was scored
        ("probe", "VARCHAR", "", 7),  # the trace's probe (null: the app's own traffic)
        # Who gave an external or human score: the service that sent the event, the feedback's author.
        ("source", "VARCHAR", "", 11),
        ("feedback_id", "VARCHAR", "", 11),  # the `feedback` row a human or external score comes from
        # `session`: a score of the whole conversation (its trace: the session's last turn), given
        # when the session ended; null: a score of its trace (docs/sessions.md).
        ("level", "VARCHAR", "", 14),
        # What gave the score, so that scores of two versions are told apart: a judge's model and
        # prompt version (`model@prompt`), a deterministic evaluator's ragpulse version and the
        # hash of its config entry (`ragpulse-X.Y.Z#hash`); null before schema 15 and for scores
        # from outside.
        ("evaluator_version", "VARCHAR", "", 15),
        # The `ragpulse rescore` run that gave the score (null: given online, as the trace came).
        ("rescore_run", "VARCHAR", "", 15),
    ),
)

# Scores a rescore replaced: the rows `scores` held before, moved here in the transaction that
# stores their replacements, so `scores` (and every read of it) holds one current row per trace,
# span and score name, and history stays queryable (`scores_all`: both).
SCORE_HISTORY = Table(
    "score_history",
    tuple(replace(c, since=15) for c in SCORES.columns)
    + _columns(
        ("replaced_at", "TIMESTAMP", "", 15),
        ("replaced_by", "VARCHAR", "", 15),  # the rescore run whose score replaced it
    ),
)

# `ragpulse rescore` runs: what each asked for, how far it got, and where to go on from. The cursor
# (the last trace scored, in start-time and trace-id order) moves in the transaction that stores
# that batch's scores: a run killed and started again scores no trace twice and skips none.
RESCORE_RUNS = Table(
    "rescore_runs",
    _columns(
        ("run_id", "VARCHAR", _KEY, 15),
        ("status", "VARCHAR", "", 15),  # running | done | failed | stopped
        ("request", "JSON", "", 15),  # the request as given (`--since 7d`, ...): a rerun matches it
        ("window_start", "TIMESTAMP", "", 15),  # the window resolved when the run started
        ("window_end", "TIMESTAMP", "", 15),
        ("evaluators", "VARCHAR[]", "", 15),  # the score names it gives again
        ("origin", "VARCHAR", "", 15),  # cli | server
        ("traces_total", "BIGINT", "", 15),  # traces in the window when it started
        ("traces_done", "BIGINT", "", 15),
        ("traces_judged", "BIGINT", "", 15),
        ("scores_written", "BIGINT", "", 15),
        ("scores_replaced", "BIGINT", "", 15),
        ("judge_input_tokens", "BIGINT", "", 15),
        ("judge_output_tokens", "BIGINT", "", 15),
        ("cursor_start", "TIMESTAMP", "", 15),
        ("cursor_trace", "VARCHAR", "", 15),
        ("started_at", "TIMESTAMP", "", 15),
        ("updated_at", "TIMESTAMP", "", 15),
        ("finished_at", "TIMESTAMP", "", 15),
        ("error", "VARCHAR", "", 15),
    ),
)

# Scores given from outside, as received: `POST /api/feedback` items (evaluator `human`) and
# evaluation events sent as log records that name a response, not a span (evaluator `external`).
# The row is kept whether or not its trace is here yet: its score row in `scores` is made when both
# are, and made again whenever the trace is assembled again. One row per `feedback_id` (a repeated
# id replaces the row).
FEEDBACK = Table(
    "feedback",
    _columns(
        ("feedback_id", "VARCHAR", _KEY, 11),
        ("trace_id", "VARCHAR", "", 11),  # given, or found through `response_id`
        ("response_id", "VARCHAR", "", 11),
        ("span_id", "VARCHAR", "", 11),  # the span it is about (null: the trace's root span)
        ("name", "VARCHAR", _KEY, 11),
        ("value", "DOUBLE", "", 11),
        ("label", "VARCHAR", "", 11),
        ("status", "VARCHAR", "", 11),  # pass | fail | error, read from the label or value; or null
        ("comment", "VARCHAR", "", 11),
        ("author", "VARCHAR", "", 11),
        ("evaluator", "VARCHAR", "", 11),  # human | external
        ("created_at", "TIMESTAMP", "", 11),
        ("received_at", "TIMESTAMP", "", 11),
    ),
)

# One row per minute x service x score name x probe (null: the app's own traffic), and x each slice
# dimension (`monitoring.dimensions`, columns added when declared): rows are upserted by a join on
# the key columns, not by a constraint, so the key can grow.
SCORE_AGGREGATES = Table(
    "score_aggregates",
    _columns(
        ("bucket", "TIMESTAMP", "", 4),
        ("service_name", "VARCHAR", "", 4),
        ("name", "VARCHAR", "", 4),
        ("n", "BIGINT", "", 4),
        ("n_pass", "BIGINT", "", 4),
        ("n_fail", "BIGINT", "", 4),
        ("n_error", "BIGINT", "", 4),
        ("n_skipped", "BIGINT", "", 4),
        ("sum", "DOUBLE", "", 4),  # of the values (pass and fail scores have one)
        ("sum_sq", "DOUBLE", "", 4),
        ("min", "DOUBLE", "", 4),
        ("max", "DOUBLE", "", 4),
        ("updated_at", "TIMESTAMP", "", 4),
        ("probe", "VARCHAR", "", 7),
    ),
)
# The fixed part of the key; a store adds the dimension columns it finds (`Store.aggregate_key`).
SCORE_AGGREGATE_KEY = ("bucket", "service_name", "name", "probe")

# Evaluation events waiting to be exported over OTLP (`exporters.otlp.endpoint`): written in the
# transaction that stores their scores, deleted once the downstream has acknowledged them.
EVALUATION_OUTBOX = Table(
    "evaluation_outbox",
    _columns(
        ("event_id", "VARCHAR", _KEY, 4),
        ("trace_id", "VARCHAR", _KEY, 4),
        ("span_id", "VARCHAR", _KEY, 4),  # the evaluated span: the evaluation span's parent
        ("time", "TIMESTAMP", "", 4),
        ("name", "VARCHAR", "", 4),
        ("attributes", "JSON", "", 4),
        ("evaluator", "VARCHAR", "", 4),
        ("revision", "INTEGER", "", 4),
        ("created_at", "TIMESTAMP", "", 4),
        ("replica", "VARCHAR", "", 6),  # the replica that exports it (null: the embedded store)
    ),
)

# Alerts (`monitoring.alerts`): the current state of each rule (and service, for rules that watch
# each service apart), every change as an event, and the notifications of each event to each
# webhook, kept after delivery as a record of what was sent when.
ALERTS = Table(
    "alerts",
    _columns(
        ("alert", "VARCHAR", _KEY, 5),
        ("service_name", "VARCHAR", "", 5),  # null: every service together
        ("state", "VARCHAR", "", 5),  # ok | firing
        ("severity", "VARCHAR", "", 5),
        ("score", "VARCHAR", "", 5),
        ("condition", "VARCHAR", "", 5),
        ("value", "DOUBLE", "", 5),
        ("n", "BIGINT", "", 5),
        ("started_at", "TIMESTAMP", "", 5),  # when the current (or last) incident started
        ("resolved_at", "TIMESTAMP", "", 5),
        ("last_notified_at", "TIMESTAMP", "", 5),
        ("evaluated_at", "TIMESTAMP", "", 5),
        # The slice of a rule that watches each value of a dimension apart (`by`), as `name=value`;
        # null: the rule's whole scope.
        ("slice", "VARCHAR", "", 7),
    ),
)
ALERT_EVENTS = Table(
    "alert_events",
    _columns(
        ("event_id", "VARCHAR", _KEY, 5),
        ("time", "TIMESTAMP", "", 5),
        ("alert", "VARCHAR", _KEY, 5),
        ("service_name", "VARCHAR", "", 5),
        ("state", "VARCHAR", "", 5),  # firing | resolved
        ("repeat", "BOOLEAN", "", 5),  # a reminder of an incident still firing
        ("severity", "VARCHAR", "", 5),
        ("score", "VARCHAR", "", 5),
        ("condition", "VARCHAR", "", 5),
        ("value", "DOUBLE", "", 5),
        ("n", "BIGINT", "", 5),
        ("window_seconds", "DOUBLE", "", 5),
        ("started_at", "TIMESTAMP", "", 5),
        ("message", "VARCHAR", "", 5),
        ("slice", "VARCHAR", "", 7),
    ),
)
ALERT_NOTIFICATIONS = Table(
    "alert_notifications",
    _columns(
        ("event_id", "VARCHAR", _KEY, 5),
        ("webhook", "VARCHAR", _KEY, 5),
        ("payload", "JSON", "", 5),
        ("created_at", "TIMESTAMP", "", 5),
        ("attempts", "INTEGER", "", 5),
        ("next_attempt_at", "TIMESTAMP", "", 5),
        ("delivered_at", "TIMESTAMP", "", 5),  # null: not delivered yet
        ("last_error", "VARCHAR", "", 5),
    ),
)

# Judge canary runs (`monitoring.canaries`): accuracy and verdicts of each run on the same pairs.
CANARY_RUNS = Table(
    "canary_runs",
    _columns(
        ("run_id", "VARCHAR", _KEY, 5),
        ("started_at", "TIMESTAMP", "", 5),
        ("finished_at", "TIMESTAMP", "", 5),
        ("judge_model", "VARCHAR", "", 5),
        ("status", "VARCHAR", "", 5),  # done | throttled | over_budget
        ("pairs", "INTEGER", "", 5),  # (case, evaluator) pairs judged
        ("correct", "INTEGER", "", 5),
        ("errors", "INTEGER", "", 5),
        ("accuracy", "DOUBLE", "", 5),  # correct / pairs: an error is never correct
        ("pass_share", "DOUBLE", "", 5),  # share of pass among the verdicts given
        ("shift", "DOUBLE", "", 5),  # share of verdicts unlike the first run's on the same pairs
        ("verdicts", "JSON", "", 5),  # {evaluator: {pass, fail, error}}
        ("results", "JSON", "", 5),  # [{case, evaluator, known, judged}]
    ),
)

# Probe runs (`probes:`): golden questions sent to the app on a schedule; one row per run, written
# when it starts and completed when its traces have arrived (or the wait for them ran out).
PROBE_RUNS = Table(
    "probe_runs",
    _columns(
        ("run_id", "VARCHAR", _KEY, 7),
        ("probe", "VARCHAR", _KEY, 7),
        ("started_at", "TIMESTAMP", "", 7),
        ("finished_at", "TIMESTAMP", "", 7),  # null while running
        ("status", "VARCHAR", "", 7),  # running | done | failed
        ("cases", "INTEGER", "", 7),  # questions sent
        ("answered", "INTEGER", "", 7),  # requests the app answered (2xx)
        ("errors", "INTEGER", "", 7),  # requests that failed (status, timeout, refused)
        ("traces_received", "INTEGER", "", 7),  # requests whose trace arrived from the app
        ("missing_traces", "INTEGER", "", 7),  # requests whose trace never arrived
        ("results", "JSON", "", 7),  # [{case_id, trace_id, http_status, latency_ms, error, ...}]
        ("summary", "JSON", "", 7),  # {score name: {n, mean, pass_rate, ...}} when it finished
        ("error", "VARCHAR", "", 7),  # why a run failed as a whole (cases unreadable, ...)
    ),
)

# A person's verdict on a score ragpulse gave (`POST /api/annotations`, the dashboard's review
# keys): one row per trace, score name and author (a later verdict of the same author replaces it),
# with a copy of the score it judged, so agreement stays computable after the trace is deleted.
# Kept like aggregates: retention deletes traces, not the labels people gave.
ANNOTATIONS = Table(
    "annotations",
    _columns(
        ("annotation_id", "VARCHAR", _KEY, 11),
        ("trace_id", "VARCHAR", _KEY, 11),
        ("name", "VARCHAR", _KEY, 11),  # the score's name
        ("author", "VARCHAR", "", 11),
        ("human_status", "VARCHAR", "", 11),  # pass | fail
        ("human_value", "DOUBLE", "", 11),
        ("claims", "JSON", "", 11),  # [{index, ok}]: the person's verdict on each claim of the score
        ("comment", "VARCHAR", "", 11),
        # Where the reviewer took it from: `random` (the unbiased sample agreement is estimated on),
        # `contested` (borderline and disputed scores), or null (a trace opened by hand).
        ("queue", "VARCHAR", "", 11),
        ("created_at", "TIMESTAMP", "", 11),
        ("service_name", "VARCHAR", "", 11),
        # The score judged, as it was: its span, status, value, evaluator, judge model and prompt.
        ("score_span_id", "VARCHAR", "", 11),
        ("score_status", "VARCHAR", "", 11),
        ("score_value", "DOUBLE", "", 11),
        ("score_evaluator", "VARCHAR", "", 11),
        ("judge_model", "VARCHAR", "", 11),
        ("prompt_version", "VARCHAR", "", 11),
        ("score_items", "JSON", "", 11),
        ("score_created_at", "TIMESTAMP", "", 11),
    ),
)

# A conversation's figures (`sessions`, the view users query, adds its status): one row per session
# id and service, computed again from `traces` and `scores` shortly after a write touches one of its
# turns (the sessions refresher), so a list of sessions is read, not aggregated, per request.
SESSION_ROLLUPS = Table(
    "session_rollups",
    _columns(
        ("session_id", "VARCHAR", "", 13),
        ("service_name", "VARCHAR", "", 13),
        ("user_id", "VARCHAR", "", 13),  # the user of its latest turn that names one
        ("turns", "BIGINT", "", 13),
        ("started_at", "TIMESTAMP", "", 13),
        ("last_activity", "TIMESTAMP", "", 13),
        ("failed_turns", "BIGINT", "", 13),  # turns with a failed score of ragpulse's evaluators
        ("mean_score", "DOUBLE", "", 13),
        ("score_means", "MAP(VARCHAR, DOUBLE)", "", 13),
        ("score_fails", "MAP(VARCHAR, BIGINT)", "", 13),
        ("refreshed_at", "TIMESTAMP", "", 13),
    ),
)

# The sessions whose session-level scores were given, and at which state of the session: scored
# again once it has ended after a later turn (or a late span changed one of its turns).
SCORED_SESSIONS = Table(
    "scored_sessions",
    _columns(
        ("session_id", "VARCHAR", "", 14),
        ("service_name", "VARCHAR", "", 14),
        ("last_activity", "TIMESTAMP", "", 14),  # the session's last activity when it was scored
        ("turns", "BIGINT", "", 14),
        ("scored_at", "TIMESTAMP", "", 14),
    ),
)

# The tables of the latest schema (`spans` and `span_events` are views over them).
ALL_TABLES: tuple[Table, ...] = (
    RECEIVED_SPANS,
    RECEIVED_SPAN_EVENTS,
    TRACES,
    STEPS,
    DOCUMENTS,
    CASES,
    SCORES,
    SCORE_AGGREGATES,
    EVALUATION_OUTBOX,
    ALERTS,
    ALERT_EVENTS,
    ALERT_NOTIFICATIONS,
    CANARY_RUNS,
    PROBE_RUNS,
    FEEDBACK,
    ANNOTATIONS,
    SESSION_ROLLUPS,
    SCORED_SESSIONS,
    SCORE_HISTORY,
    RESCORE_RUNS,
)

# What one row of each table users query is (`spans` and `span_events` are views over the received
# copies, each span and event once): the MCP tool `describe_tables` and `ragpulse://tables` say it.
MEANINGS: dict[str, str] = {
    "spans": "a span as received, once however often it was delivered",
    "span_events": "a span event, once; `source = 'ragpulse'` rows are the scores written back",
    "received_spans": "every received copy of a span (retries and replays included)",
    "received_span_events": "every received copy of a span event",
    "traces": "an assembled trace: question, answer, convention, timings, tokens, sampling, case",
    "steps": "a step of a trace: retrieval, rerank, llm, tool, agent, ... in order",
    "documents": "a document a retrieval or rerank step returned, with its rank and score",
    "cases": "a golden case: a question with its expected documents and answer",
    "scores": "a score of a trace: value, status, threshold, explanation, items, judge provenance",
    "score_aggregates": "per minute, service, score, probe and slice: counts and sums of the scores",
    "evaluation_outbox": "an evaluation event waiting for export over OTLP",
    "alerts": "an alert rule's state per service",
    "alert_events": "an alert firing, reminding or resolving",
    "alert_notifications": "a notification of an alert event to a webhook, and its delivery",
    "canary_runs": "a judge canary run: accuracy against reference verdicts",
    "probe_runs": "a probe run: its cases, the traces they made and their summary",
    "feedback": "a score given from outside (user feedback, an app's evaluation event), as received",
    "annotations": "a person's pass/fail verdict on a score ragpulse gave, with a copy of that score",
    "session_rollups": "a session's figures as last computed (the `sessions` view adds its status)",
    "scored_sessions": "a session whose session-level scores were given, and its last activity then",
    "score_history": "a score a `ragpulse rescore` run replaced, with when and by which run",
    "scores_all": "every score ever given: the current ones (`scores`) and those replaced (`score_history`)",
    "rescore_runs": "a `ragpulse rescore` run: its request, window, progress and cursor",
    "ragpulse_schema": "an applied schema migration",
}
