"""People's labels as data: the verdicts of `annotations` and the stored traces they were given on,
read back for `ragpulse datasets export --labels` and `ragpulse align` (collector/feedback/labelled.py).

The traces are read through the `spans` and `span_events` views, so the same reads work on a
database file and through a running server's `/api/sql`. The views show each span and event once
(the first stored copy), as the judge stage's `Store.read_spans` does; the events ragpulse writes
back (`source = 'ragpulse'`, one per score) are left out, since the judge never saw them. Times come
as integer microseconds (under the columns' own names) and JSON columns as text, one spelling
whichever way the rows come.
"""

from __future__ import annotations

from collections.abc import Iterable

from collector.schema.span_records import EVENT_COLUMNS, SPAN_COLUMNS
from collector.schema.tables import WRITEBACK_SOURCE
from collector.schema.windows import Window
from collector.store.reads.predicates import sql_string, sql_strings, window_sql

# The span columns that are times: read as integer µs (under their own names).
SPAN_TIME_COLUMNS = ("start_time", "end_time")
# The unique key of `annotations` (one verdict per trace, score and author): the order the labels are
# read in, and the key a page starts after.
LABEL_KEY = ("trace_id", "name", "author")


def labels_sql(
    window: Window,
    service: str | None = None,
    name: str | None = None,
    *,
    limit: int,
    after: tuple[str, str, str] | None = None,
) -> str:
    """People's pass/fail verdicts given in the window (on `service`'s traces, of score `name`), one
    row per trace, score and author, with the copy of the score they judged; in key order
    (`LABEL_KEY`), the first `limit` after the key `after` (keyset paging: a verdict added, replaced
    or deleted meanwhile moves no other row from one page to another, as an OFFSET would)."""
    where = [window_sql(window, "created_at"), "human_status IN ('pass', 'fail')"]
    if service is not None:
        where.append(f"service_name = {sql_string(service)}")
    if name is not None:
        where.append(f"name = {sql_string(name)}")
    if after is not None:
        where.append(f"({', '.join(LABEL_KEY)}) > ({', '.join(sql_string(value) for value in after)})")
    return (
        "SELECT trace_id, name, author, human_status, comment, queue, score_status, score_evaluator, "
        "judge_model, prompt_version, service_name, "
        "strftime(created_at, '%Y-%m-%dT%H:%M:%S.%f') AS created_at "
        f"FROM annotations WHERE {' AND '.join(where)} "
        f"ORDER BY {', '.join(LABEL_KEY)} LIMIT {int(limit)}"
    )


def _span_column(column: str) -> str:
    if column in SPAN_TIME_COLUMNS:
        return f"epoch_us({column}) AS {column}"
    if column == "attributes":
        return "CAST(attributes AS VARCHAR) AS attributes"
    return column


def _event_column(column: str) -> str:
    return "epoch_us(time) AS time" if column == "time" else _span_column(column)


def spans_sql(trace_ids: Iterable[str]) -> str:
    """The spans of these traces with the columns `schema.span_records.SPAN_COLUMNS` names, times
    (`SPAN_TIME_COLUMNS`) as integer µs and attributes as JSON text."""
    return (
        f"SELECT {', '.join(_span_column(column) for column in SPAN_COLUMNS)} "
        f"FROM spans WHERE trace_id IN ({sql_strings(trace_ids)}) ORDER BY trace_id, start_time, span_id"
    )


def events_sql(trace_ids: Iterable[str]) -> str:
    """The received events of these traces (not the score events ragpulse writes back), with the
    columns `schema.span_records.EVENT_COLUMNS` names, `time` as integer µs and attributes as JSON
    text."""
    return (
        f"SELECT {', '.join(_event_column(column) for column in EVENT_COLUMNS)} "
        f"FROM span_events WHERE trace_id IN ({sql_strings(trace_ids)}) "
        f"AND source <> '{WRITEBACK_SOURCE}' ORDER BY trace_id, span_id, time"
    )


def expectations_sql(trace_ids: Iterable[str]) -> str:
    """What the assembler stored as these traces' expectations (their own, or their golden case's):
    `trace_id, expected_answer, expected_documents` (JSON text)."""
    return (
        "SELECT trace_id, expected_answer, CAST(expected_documents AS VARCHAR) AS expected_documents "
        f"FROM traces WHERE trace_id IN ({sql_strings(trace_ids)})"
    )
