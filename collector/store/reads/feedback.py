"""Agreement's reads: people's verdicts against the scores they judged, counted per evaluator.

Both return a row per score name, judge model and prompt version (null for a deterministic
evaluator), computed in SQL so that 100,000 labels come back as a few rows.
"""

from __future__ import annotations

from collector.schema.windows import Window
from collector.store.reads.predicates import sql_string, window_sql

_GROUP = "name, judge_model, prompt_version"


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
