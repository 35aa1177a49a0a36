"""Feedback in a DuckDB database (both backends): the `feedback` rows kept, the `scores` rows made
from them whenever a feedback row and its assembled trace are both stored, and people's verdicts on
scores (`annotations`).

A feedback row names its trace by id or by a response id (`traces.response_ids`). Its score row is
made when the feedback is written, if its trace is assembled already, and again each time the trace
is assembled (an assembly replaces every score of the trace): so feedback that comes before its
trace, or days after, is attached either way, and survives re-assembly. A response id is resolved to
its trace once, and the trace id is then kept on the feedback row (retention deletes it with its
trace).
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from collector.schema.tables import ANNOTATIONS, SCORES
from collector.store.duckdb_rows import arrow_table, insert_rows, quoted, registered
from collector.store.reads.predicates import OUR_EVALUATORS

# What a `scores` row of a feedback row `f` on its trace `t` holds; the other columns are null.
_SCORE_OF_FEEDBACK = {
    "trace_id": "t.trace_id",
    # The span named, else the root; a trace without a root (only orphaned spans came) has its
    # scores under no span, as `scoring.evaluated_span` leaves them.
    "span_id": "coalesce(f.span_id, t.root_span_id, '')",
    "name": "f.name",
    "value": "f.value",
    "status": "f.status",
    "label": "f.label",
    "explanation": "f.comment",
    "items": "'[]'",
    "created_at": "f.created_at",
    "service_name": "t.service_name",
    "bucket": "date_trunc('minute', coalesce(t.start_time, f.created_at))",
    "evaluator": "f.evaluator",
    "revision": "t.assembly_count",
    "source": "f.author",
    "feedback_id": "f.feedback_id",
}


def _select_scores(feedback: str, traces: str) -> str:
    """SQL: the `scores` rows (every column, in order) of the rows of `feedback` whose trace is in
    `traces` (a table or registered Arrow table with `trace_id`, `root_span_id`, `service_name`,
    `start_time`, `assembly_count`)."""
    columns = ", ".join(
        f"{_SCORE_OF_FEEDBACK.get(c.name, f'NULL::{c.sql_type}')} AS {c.name}" for c in SCORES.columns
    )
    return f"SELECT {columns} FROM {feedback} f JOIN {traces} t ON t.trace_id = f.trace_id"


def _as_scores(rows: pa.Table) -> pa.Table:
    return rows.cast(SCORES.arrow_schema())


def resolve_responses(con: duckdb.DuckDBPyConnection, feedback: pa.Table) -> pa.Table:
    """`feedback` rows with the trace id of those that name a response filled in, where a stored
    trace has that response (the others keep a null trace id, and wait for their trace)."""
    unresolved = pc.is_null(feedback["trace_id"])
    if not pc.any(unresolved).as_py():
        return feedback
    with registered(con, "_responses", feedback.filter(unresolved).select(["response_id"])):
        found = dict(
            con.execute(
                "SELECT r.response_id, min(t.trace_id) FROM _responses r JOIN ("
                "SELECT trace_id, unnest(response_ids) AS response_id FROM traces "
                "WHERE response_ids IS NOT NULL) t ON t.response_id = r.response_id GROUP BY ALL"
            ).fetchall()
        )
    if not found:
        return feedback
    trace_ids = [
        trace_id if trace_id is not None else found.get(response_id)
        for trace_id, response_id in zip(
            feedback["trace_id"].to_pylist(), feedback["response_id"].to_pylist(), strict=True
        )
    ]
    index = feedback.schema.get_field_index("trace_id")
    return feedback.set_column(index, "trace_id", pa.array(trace_ids, pa.string()))


def replace_feedback(
    con: duckdb.DuckDBPyConnection, feedback: pa.Table, aggregate_key: Sequence[str]
) -> tuple[pa.Table, pa.Table | None, pa.Table]:
    """Store `feedback` rows (one per id; a stored row with the same id is replaced, with its score)
    and make the score rows of those whose trace is assembled. Returns (the score rows to insert,
    the aggregate groups of the replaced scores, the slices of their traces), for `insert_scores`."""
    affected = None
    with registered(con, "_feedback", feedback):
        # Replaced rows are looked up in `feedback` (small), and their scores, if any, by trace:
        # new ids, the common case, cost no scan of `scores`.
        replaced = arrow_table(
            con.execute(
                "SELECT feedback_id, trace_id FROM feedback "
                "WHERE feedback_id IN (SELECT feedback_id FROM _feedback)"
            )
        )
        if replaced.num_rows:
            with registered(con, "_replaced", replaced):
                old = "trace_id IN (SELECT trace_id FROM _replaced) AND feedback_id IN "
                old += "(SELECT feedback_id FROM _replaced)"
                affected = arrow_table(
                    con.execute(f"SELECT DISTINCT {quoted(aggregate_key)} FROM scores WHERE {old}")
                )
                con.execute(f"DELETE FROM scores WHERE {old}")
                con.execute("DELETE FROM feedback WHERE feedback_id IN (SELECT feedback_id FROM _replaced)")
        con.execute("INSERT INTO feedback BY NAME SELECT * FROM _feedback")
        # The feedback's traces, read once: for the score rows and for their slices.
        slices = [c for c in aggregate_key if c not in ("bucket", "service_name", "name")]
        traces = arrow_table(
            con.execute(
                "SELECT trace_id, root_span_id, service_name, start_time, assembly_count, "
                f"{quoted(slices)} FROM traces WHERE trace_id IN (SELECT trace_id FROM _feedback)"
            )
        )
        with registered(con, "_traces", traces):
            scores = _as_scores(arrow_table(con.execute(_select_scores("_feedback", "_traces"))))
    return scores, affected, traces.select(["trace_id", *slices])


def scores_of_assembled(con: duckdb.DuckDBPyConnection, traces: pa.Table) -> pa.Table | None:
    """The score rows of the stored feedback on the traces just assembled (`traces` rows): by trace
    id, and by response id (those then keep the trace id). None when there is none. An assembly whose
    traces name no response (most: not every instrumentation records it) updates nothing."""
    with registered(con, "_assembled", traces):
        if pc.any(pc.is_valid(traces["response_ids"])).as_py():
            con.execute(
                "UPDATE feedback f SET trace_id = t.trace_id FROM ("
                "SELECT trace_id, unnest(response_ids) AS response_id FROM _assembled "
                "WHERE response_ids IS NOT NULL) t "
                "WHERE f.trace_id IS NULL AND f.response_id = t.response_id"
            )
        scores = arrow_table(con.execute(_select_scores("feedback", "_assembled")))
    return _as_scores(scores) if scores.num_rows else None


def has_feedback(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether any feedback is stored."""
    row = con.execute("SELECT EXISTS (SELECT 1 FROM feedback)").fetchone()
    return bool(row and row[0])


# The score a verdict judges: the trace's current score of that name, of ragpulse's own evaluators.
_JUDGED_SCORE = (
    "SELECT span_id AS score_span_id, status AS score_status, value AS score_value, "
    "evaluator AS score_evaluator, judge_model, prompt_version, CAST(items AS VARCHAR) AS score_items, "
    "created_at AS score_created_at, service_name FROM scores "
    f"WHERE trace_id = ? AND name = ? AND evaluator IN {OUR_EVALUATORS} "
    "ORDER BY created_at DESC LIMIT 1"
)


def store_annotation(con: duckdb.DuckDBPyConnection, annotation: pa.Table) -> dict[str, object] | None:
    """Store a verdict (one `annotations` row without its score's copy) with a copy of the score it
    judges, replacing the same author's verdict on that score; None (nothing stored) when the trace
    has no such score."""
    row = annotation.to_pylist()[0]
    cursor = con.execute(_JUDGED_SCORE, [row["trace_id"], row["name"]])
    found = cursor.fetchone()
    if found is None:
        return None
    row.update(zip([d[0] for d in cursor.description or []], found, strict=True))
    con.execute(
        "DELETE FROM annotations WHERE trace_id = ? AND name = ? AND author = ?",
        [row["trace_id"], row["name"], row["author"]],
    )
    insert_rows(con, "annotations", ANNOTATIONS.arrow_table({k: [v] for k, v in row.items()}, 1))
    return row
