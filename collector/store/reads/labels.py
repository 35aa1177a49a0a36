"""People's labels as data: the verdicts of `annotations` and the stored traces they were given on,
read back for `ragpulse datasets export --labels` and `ragpulse align` (collector/feedback/labelled.py).

The traces are read through the `spans` and `span_events` views, so the same reads work on a
database file and through a running server's `/api/sql`. The views show each span and event once
(the first stored copy), as the judge stage's `Store.read_spans` does; the events ragpulse writes
back (`source = 'ragpulse'`, one per score) are left out, since the judge never saw them. Times come
as integer microseconds and JSON columns as text, one spelling whichever way the rows come.
"""

from __future__ import annotations

from collections.abc import Iterable

from collector.schema.tables import WRITEBACK_SOURCE
from collector.schema.windows import Window
from collector.store.reads.predicates import sql_string, sql_strings, window_sql


def labels_sql(
    window: Window, service: str | None = None, name: str | None = None, *, limit: int, offset: int = 0
) -> str:
    """People's pass/fail verdicts given in the window (on `service`'s traces, of score `name`), one
    row per trace, score and author, with the copy of the score they judged; in a fixed order, so
    that `limit` and `offset` page through them."""
    where = [window_sql(window, "created_at"), "human_status IN ('pass', 'fail')"]
    if service is not None:
        where.append(f"service_name = {sql_string(service)}")
    if name is not None:
        where.append(f"name = {sql_string(name)}")
    return (
        "SELECT trace_id, name, author, human_status, comment, queue, score_status, score_evaluator, "
        "judge_model, prompt_version, service_name, "
        "strftime(created_at, '%Y-%m-%dT%H:%M:%S.%f') AS created_at "
        f"FROM annotations WHERE {' AND '.join(where)} "
        f"ORDER BY trace_id, name, created_at, author LIMIT {int(limit)} OFFSET {int(offset)}"
    )


def spans_sql(trace_ids: Iterable[str]) -> str:
    """The spans of these traces with the columns `schema.span_records.SPAN_COLUMNS` names, times
    as µs (`start_us`, `end_us`) and attributes as JSON text."""
    return (
        "SELECT trace_id, span_id, parent_span_id, name, kind, service_name, "
        "epoch_us(start_time) AS start_us, epoch_us(end_time) AS end_us, status_code, status_message, "
        "CAST(attributes AS VARCHAR) AS attributes, scope_name "
        f"FROM spans WHERE trace_id IN ({sql_strings(trace_ids)}) ORDER BY trace_id, start_time, span_id"
    )


def events_sql(trace_ids: Iterable[str]) -> str:
    """The received events of these traces (not the score events ragpulse writes back)."""
    return (
        "SELECT trace_id, span_id, epoch_us(time) AS time_us, name, "
        "CAST(attributes AS VARCHAR) AS attributes "
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
