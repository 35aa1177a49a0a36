"""Agreement's reads: people's verdicts against the scores they judged, counted per evaluator; and
users' feedback against the scores of the same traces.

`confusion_sql` and `values_sql` return a row per score name, judge model and prompt version (null
for a deterministic evaluator), computed in SQL so that 100,000 labels come back as a few rows;
`feedback_auc_sql` a row per score name, for the same reason (`feedback_pairs_sql` is what it
summarises: a row per trace and score name).
"""

from __future__ import annotations

from collector.schema.windows import Window
from collector.store.reads.predicates import OUTSIDE_EVALUATORS, sql_string, window_sql

# A group: a score name as one evaluator gave it (a judge score decided without a call, e.g. no
# documents, has no model: it is the judge's rule, apart from the deterministic evaluator's).
_GROUP = "name, score_evaluator, judge_model, prompt_version"


def _labels(window: Window, service: str | None) -> str:
    where = [window_sql(window, "created_at"), "human_status IN ('pass', 'fail')"]
    if service is not None:
        where.append(f"service_name = {sql_string(service)}")
    return "SELECT * FROM annotations WHERE " + " AND ".join(where)


def _in_sample(sample: str) -> str:
    """Whether a label counts in the estimate: the random queue's only, or (`all`) every one."""
    return "TRUE" if sample == "all" else "queue IS NOT DISTINCT FROM 'random'"


def confusion_sql(window: Window, service: str | None, sample: str) -> str:
    """Per evaluator: the judge-by-human pass/fail counts of the labels in the sample (`random` or
    `all`), how many labels of the window were left out of it (`n_other`), and when the last was
    given. A score that was an error or skipped is in `n_other` too: it gave no verdict to agree
    with."""
    chosen = f"({_in_sample(sample)}) AND score_status IN ('pass', 'fail')"
    counts = ", ".join(
        f"count(*) FILTER ({chosen} AND score_status = '{judge}' AND human_status = '{human}') "
        f"AS {judge}_{human}"
        for judge in ("pass", "fail")
        for human in ("pass", "fail")
    )
    return (
        f"SELECT {_GROUP}, {counts}, count(*) FILTER (NOT ({chosen})) AS n_other, "
        # As text, one spelling whichever way the rows come (a file's cursor or `/api/sql`'s JSON).
        "strftime(max(created_at), '%Y-%m-%dT%H:%M:%S.%f') AS last_verdict_at "
        f"FROM ({_labels(window, service)}) GROUP BY ALL ORDER BY {_GROUP}"
    )


def values_sql(window: Window, service: str | None, sample: str) -> str:
    """Per evaluator, over the labels in the sample that give a value on both sides: their number,
    Spearman's rho (the Pearson correlation of mean ranks, ties sharing theirs) and the mean absolute
    error."""
    ranks = "".join(
        f", rank() OVER (PARTITION BY {_GROUP} ORDER BY {column}) "
        f"+ (count(*) OVER (PARTITION BY {_GROUP}, {column}) - 1) / 2.0 AS {alias}"
        for column, alias in (("score_value", "rx"), ("human_value", "ry"))
    )
    return (
        f"SELECT {_GROUP}, count(*) AS n_values, corr(rx, ry) AS spearman, "
        "avg(abs(score_value - human_value)) AS mae FROM ("
        f"SELECT {_GROUP}, score_value, human_value{ranks} FROM ({_labels(window, service)}) "
        f"WHERE ({_in_sample(sample)}) AND score_value IS NOT NULL AND human_value IS NOT NULL"
        f") GROUP BY ALL ORDER BY {_GROUP}"
    )


# Where a score's status means a verdict on its value: errors and skipped scores have none.
_VERDICTS = "status IN ('pass', 'fail')"
# Scores given from outside: feedback is read from these, and never correlated with itself.
_FROM_OUTSIDE = OUTSIDE_EVALUATORS


def feedback_pairs_sql(window: Window, service: str | None, feedback_name: str) -> str:
    """A row per trace and score name: `trace_id`, `name`, `value` and `positive`, pairing the
    trace's feedback of name `feedback_name` with each other score of the trace.

    - The feedback: the `scores` rows of that name given from outside (evaluator `human` or
      `external`) with a pass or fail status (`positive`: pass), given in the window (by their
      `created_at`, the time the feedback was given, as agreement counts verdicts by when they were
      given) and, with `service`, on that service's traces. Of several on one trace, the latest.
    - The scores: every other score of the trace (any time) with a value and a pass or fail
      status, from ragpulse's own evaluators (not `human`, not `external`); a score name given
      several times in the trace (per span) counts once, with the mean of its values."""
    where = [
        f"name = {sql_string(feedback_name)}",
        f"evaluator IN {_FROM_OUTSIDE}",
        _VERDICTS,
        window_sql(window, "created_at"),
    ]
    if service is not None:
        where.append(f"service_name = {sql_string(service)}")
    feedback = (
        "SELECT trace_id, status = 'pass' AS positive FROM scores WHERE "
        + " AND ".join(where)
        + " QUALIFY row_number() OVER (PARTITION BY trace_id "
        "ORDER BY created_at DESC, feedback_id DESC NULLS LAST) = 1"
    )
    return (
        "SELECT s.trace_id, s.name, avg(s.value) AS value, f.positive "
        f"FROM scores s JOIN ({feedback}) f ON f.trace_id = s.trace_id "
        f"WHERE s.value IS NOT NULL AND s.{_VERDICTS} "
        f"AND coalesce(s.evaluator, '') NOT IN {_FROM_OUTSIDE} "
        "GROUP BY s.trace_id, s.name, f.positive ORDER BY s.name, s.trace_id"
    )


def _rank_and_ties(partition: str) -> str:
    """Twice a value's midrank in its partition, plus one: twice its rank, plus the number of values
    equal to it (itself included). A whole number."""
    return (
        f"2 * rank() OVER (PARTITION BY {partition} ORDER BY value) "
        f"+ count(*) OVER (PARTITION BY {partition}, value)"
    )


def feedback_auc_sql(window: Window, service: str | None, feedback_name: str) -> str:
    """Per score name, over `feedback_pairs_sql`'s rows: `n_positive`, `n_negative`, and the sums
    `collector.feedback.agreement_stats.delong_from_sums` takes (`sum_a`, `sum_a2` over the traces
    with positive feedback, `sum_b`, `sum_b2` over the negative): of twice the number of traces of
    the other class whose value is below the trace's, ties counting one half. That is 2·(its
    midrank among all - its midrank in its class), Sun and Xu's, in whole numbers: exact sums, so
    the AUC and its interval are the same to the last bit whatever order DuckDB adds them in; as
    text, exact past 64 bits whichever way the rows come (`/api/sql`'s JSON). A row per score,
    however many traces have feedback."""
    below = (
        f"{_rank_and_ties('name')} - ({_rank_and_ties('name, positive')}) AS below "
        f"FROM ({feedback_pairs_sql(window, service, feedback_name)})"
    )
    sums = ", ".join(
        f"CAST(coalesce(sum({term}) FILTER ({side}), 0) AS VARCHAR) AS {alias}"
        for side, letter in (("positive", "a"), ("NOT positive", "b"))
        for term, alias in (("below", f"sum_{letter}"), ("below::HUGEINT * below", f"sum_{letter}2"))
    )
    return (
        "SELECT name, count(*) FILTER (positive) AS n_positive, "
        f"count(*) FILTER (NOT positive) AS n_negative, {sums} "
        f"FROM (SELECT name, positive, {below}) GROUP BY name ORDER BY name"
    )
