"""The demo's reads (`collector/demo.py`): its per-mode summary, the expected documents found, a few
scores' means, a sample answer per mode, and how far assembly and the judge have got."""

from __future__ import annotations

from collections.abc import Sequence

from collector.store.reads.predicates import sql_string, sql_strings

# Each assembled trace with the mode the app put on its root span (`app.mode`).
_TRACES_WITH_MODE = """
    roots AS (SELECT DISTINCT trace_id, span_id, attributes->>'app.mode' AS mode FROM spans),
    t AS (
        SELECT tr.*, roots.mode
        FROM traces tr JOIN roots ON roots.trace_id = tr.trace_id AND roots.span_id = tr.root_span_id
    )"""

SUMMARY_SQL = f"""
WITH {_TRACES_WITH_MODE},
    st AS (SELECT trace_id, count(*) AS n FROM steps GROUP BY trace_id),
    d AS (SELECT trace_id, count(*) AS n FROM documents WHERE stage = 'retrieved' GROUP BY trace_id)
SELECT t.mode, t.convention, count(*) AS traces,
       avg(coalesce(st.n, 0)) AS avg_steps,
       avg(coalesce(d.n, 0)) AS avg_documents,
       avg(t.input_tokens) AS avg_input_tokens,
       avg(t.output_tokens) AS avg_output_tokens,
       avg(t.retrieval_ms) AS avg_retrieval_ms,
       avg(t.generation_ms) AS avg_generation_ms
FROM t LEFT JOIN st USING (trace_id) LEFT JOIN d USING (trace_id)
GROUP BY ALL
"""

# Expected documents (from the golden cases) that the retrieval step returned.
EXPECTED_FOUND_SQL = f"""
WITH {_TRACES_WITH_MODE},
    expected AS (
        SELECT trace_id, mode, convention, unnest(CAST(expected_documents AS VARCHAR[])) AS doc_id FROM t
    ),
    got AS (SELECT DISTINCT trace_id, doc_id FROM documents WHERE stage = 'retrieved')
SELECT mode, convention, count(*) AS expected, count(got.doc_id) AS found
FROM expected LEFT JOIN got USING (trace_id, doc_id)
GROUP BY ALL
"""


def sample_answers_sql(case_id: str) -> str:
    """Each mode's question and answer of one golden case (the ragpulse convention's traces)."""
    return f"""
WITH {_TRACES_WITH_MODE}
SELECT mode, question, answer FROM t WHERE case_id = {sql_string(case_id)} AND convention = 'ragpulse'
"""


def scores_sql(names: Sequence[str]) -> str:
    """The mean of each of these scores per mode and convention."""
    return f"""
WITH {_TRACES_WITH_MODE}
SELECT t.mode, t.convention, s.name, s.evaluator, avg(s.value) AS mean
FROM scores s JOIN t USING (trace_id)
WHERE s.name IN ({sql_strings(names)})
GROUP BY ALL
"""


# Traces assembled, and those still waiting for the judge.
WAIT_SQL = "SELECT count(*) AS n, count(*) FILTER (judge_status = 'pending') AS judging FROM traces"


def other_services_spans_sql(service: str) -> str:
    """How many stored spans are not of `service` (a file the demo may not overwrite has some)."""
    return f"SELECT count(*) AS n FROM spans WHERE service_name IS DISTINCT FROM {sql_string(service)}"


# Queries the demo prints for a new user to paste into `ragpulse sql` next, each with what it shows.
SQL_TO_TRY: list[tuple[str, str]] = [
    (
        "answers that were not grounded in their documents, and the claim that failed",
        "SELECT t.question, s.value, s.items->0->>'text' AS unsupported FROM scores s "
        "JOIN traces t USING (trace_id) WHERE s.name = 'faithfulness' AND s.status = 'fail' LIMIT 5",
    ),
    (
        "pass rate per score and minute",
        "SELECT bucket, name, n, round(n_pass / nullif(n_pass + n_fail, 0), 2) AS pass_rate "
        "FROM score_aggregates "
        "ORDER BY ALL LIMIT 20",
    ),
    (
        "which index each mode searched (document metadata, both conventions)",
        "SELECT d.metadata->>'index' AS index, t.convention, count(DISTINCT d.trace_id) AS traces "
        "FROM documents d JOIN traces t USING (trace_id) GROUP BY ALL ORDER BY ALL",
    ),
    (
        "expected documents the retriever missed",
        "SELECT t.case_id, e.doc_id AS missing FROM traces t, "
        "unnest(CAST(t.expected_documents AS VARCHAR[])) AS e(doc_id) "
        "WHERE e.doc_id NOT IN (SELECT doc_id FROM documents d WHERE d.trace_id = t.trace_id) LIMIT 10",
    ),
    (
        "one question across modes and conventions",
        "SELECT s.attributes->>'app.mode' AS mode, t.convention, t.answer "
        "FROM traces t JOIN spans s ON s.span_id = t.root_span_id "
        "WHERE t.case_id = 'warranty-water-damage' ORDER BY ALL",
    ),
    (
        "steps per kind and convention",
        "SELECT kind, convention, model, round(avg(duration_ms), 2) AS avg_ms, "
        "sum(input_tokens) AS tokens_in FROM steps GROUP BY ALL ORDER BY ALL",
    ),
]
