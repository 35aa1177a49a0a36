"""Reading people's labels and the traces they were given on, through read-only SQL.

The reads go through a `SqlRunner` (`collector.cli.common.sql_runner`): the database file opened
read-only, or a running server's `/api/sql`, so `ragpulse datasets export --labels` and
`ragpulse align` work beside a running service. A trace is rebuilt from its stored spans exactly as
the judge stage rebuilds it (`processors.judge_input.judge_trace`: the same mapping options, the
same redaction before the judge), so a label's case holds what the judge was shown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from collector.feedback.labelled import Label
from collector.processors.judge_input import judge_trace
from collector.schema.span_records import EVENT_COLUMNS, SPAN_COLUMNS, records_by_trace, span_records
from collector.schema.windows import Window
from collector.store.reads import SqlRunner
from collector.store.reads.conversation import earlier_turns_sql, turns_by_trace
from collector.store.reads.labels import (
    LABEL_KEY,
    SPAN_TIME_COLUMNS,
    events_sql,
    expectations_sql,
    labels_sql,
    spans_sql,
)
from semconv import RagTrace
from semconv.options import DEFAULT_OPTIONS, MappingOptions

if TYPE_CHECKING:
    from collector.processors.redaction import Redactor

# Labels asked for per query: well under `sql.max_rows`' default, so a page is rarely cut.
LABEL_PAGE = 5_000
# Traces whose spans are asked for per query: a RAG trace has a few to a few dozen spans, so a batch
# stays under the row limit; a batch that is cut anyway is asked again in halves.
TRACE_BATCH = 20


class LabelReadError(ValueError):
    """Stored labels or traces that cannot be read (the message says which and why)."""


def read_labels(
    run: SqlRunner,
    max_rows: int,
    window: Window,
    service: str | None = None,
    name: str | None = None,
    redactor: Redactor | None = None,
) -> list[Label]:
    """Every pass/fail verdict given in the window (on `service`'s traces, of score `name`), in
    trace, score and author order; paged by key (`labels_sql`), so that no answer is cut by the row
    limit and verdicts given meanwhile shift no page. Comments go through `redactor` (the judge's,
    as the traces do in `read_traces`): a comment becomes an example's reason, shown to the judge."""
    labels: list[Label] = []
    page = max(1, min(LABEL_PAGE, max_rows))
    after: tuple[str, str, str] | None = None
    while True:
        rows, truncated = run(labels_sql(window, service, name, limit=page, after=after), max_rows)
        labels += [_redacted(Label.from_row(row), redactor) for row in rows]
        # A server whose own row limit is below ours cuts the page: go on from where it stopped.
        if not rows or (len(rows) < page and not truncated):
            return labels
        last = rows[-1]
        after = (str(last[LABEL_KEY[0]]), str(last[LABEL_KEY[1]]), str(last[LABEL_KEY[2]]))


def _redacted(label: Label, redactor: Redactor | None) -> Label:
    if redactor is None or not label.comment:
        return label
    return dataclasses.replace(label, comment=redactor.redact(label.comment))


def read_traces(
    run: SqlRunner,
    max_rows: int,
    trace_ids: Iterable[str],
    mapping: MappingOptions = DEFAULT_OPTIONS,
    redactor: Redactor | None = None,
    conversation_turns: int = 0,
) -> dict[str, RagTrace]:
    """The stored traces of `trace_ids` as the judge sees them, by id, each with the last
    `conversation_turns` turns of its session before it; a trace no longer stored (deleted by
    retention) is absent."""
    wanted = sorted(set(trace_ids))
    traces: dict[str, RagTrace] = {}
    for start in range(0, len(wanted), TRACE_BATCH):
        batch = wanted[start : start + TRACE_BATCH]
        traces.update(_read_batch(run, max_rows, batch, mapping, redactor, conversation_turns))
    return traces


def _read_batch(
    run: SqlRunner,
    max_rows: int,
    trace_ids: Sequence[str],
    mapping: MappingOptions,
    redactor: Redactor | None,
    conversation_turns: int,
) -> dict[str, RagTrace]:
    spans, spans_cut = run(spans_sql(trace_ids), max_rows)
    events, events_cut = run(events_sql(trace_ids), max_rows) if spans else ([], False)
    if spans_cut or events_cut:
        if len(trace_ids) == 1:
            raise LabelReadError(
                f"trace {trace_ids[0]} has more spans or events than sql.max_rows ({max_rows}) lets one "
                "query read; raise sql.max_rows"
            )
        half = len(trace_ids) // 2
        return {
            **_read_batch(run, max_rows, trace_ids[:half], mapping, redactor, conversation_turns),
            **_read_batch(run, max_rows, trace_ids[half:], mapping, redactor, conversation_turns),
        }
    if not spans:
        return {}
    expectations = {row["trace_id"]: row for row in run(expectations_sql(trace_ids), max_rows)[0]}
    earlier: dict[str, list[tuple[str | None, str | None]]] = {}
    if conversation_turns > 0:
        rows = run(earlier_turns_sql(trace_ids, conversation_turns), max_rows)[0]
        earlier = turns_by_trace([(r["trace_id"], r["question"], r["answer"]) for r in rows])
    traces = {}
    for trace_id, records in records_by_trace(
        span_records(_spans_table(spans), _events_table(events))
    ).items():
        row = expectations.get(trace_id, {})
        traces[trace_id] = judge_trace(
            records,
            row.get("expected_answer"),
            row.get("expected_documents"),
            mapping,
            redactor,
            earlier.get(trace_id, ()),
        )
    return traces


def _micros(values: list[Any]) -> pa.Array:
    return pa.array(values, pa.int64()).cast(pa.timestamp("us"))


def _table(rows: list[dict[str, Any]], columns: Sequence[str], times: Sequence[str]) -> pa.Table:
    """Rows of `spans_sql` or `events_sql` (`times` as integer µs, the others text) in the shape
    `span_records` reads (the store's `read_spans` answer)."""
    return pa.table(
        {
            column: _micros([r[column] for r in rows])
            if column in times
            else pa.array([r[column] for r in rows], pa.string())
            for column in columns
        }
    )


def _spans_table(rows: list[dict[str, Any]]) -> pa.Table:
    return _table(rows, SPAN_COLUMNS, SPAN_TIME_COLUMNS)


def _events_table(rows: list[dict[str, Any]]) -> pa.Table:
    return _table(rows, EVENT_COLUMNS, ("time",))
