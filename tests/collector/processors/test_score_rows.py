"""`score_rows`: the score rows and write-back events of scored traces, built column by column;
and the `span_events` view, which makes the same events from the stored scores.

What the rows hold is pinned end to end in tests/collector/processors/test_online_scoring.py; these
pin the details a faster construction could get wrong: the event shows at most `MAX_EVENT_ITEMS`
items and cuts long texts (while `scores.items` keeps everything), each score lands under its
evaluated span, and the event the view shows has the very attributes of the event exported over OTLP.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa

from collector.processors.scoring import evaluated_span, score_rows
from collector.schema.tables import MAX_EVENT_ITEMS, MAX_EVENT_TEXT
from collector.schema.trace_rows import AssembledTrace, TraceTables, trace_tables
from collector.store.duckdb_store import DuckDBStore
from evaluators.scores import Score, score_item
from semconv.models import RagTrace, Step

NOW_US = 1_767_000_000_000_000


def _trace() -> RagTrace:
    return RagTrace(
        trace_id="t1",
        service_name="svc",
        root_span_id="root",
        start_us=NOW_US - 90_000_000,
        steps=[
            Step(span_id="ret", kind="retrieval"),
            Step(span_id="llm-1", kind="llm"),
            Step(span_id="llm-2", kind="llm"),
        ],
    )


def _event_items(attributes: str) -> list[dict[str, object]]:
    return json.loads(json.loads(attributes)["ragpulse.items"])


def test_events_show_the_items_as_stored_when_nothing_is_cut() -> None:
    items = [score_item("claim", False, "evidence"), score_item("other", True, None)]
    score = Score.judged("faithfulness", 0.5, 1.0, explanation="x", items=items)
    rows = score_rows([(_trace(), 1, [score])], "deterministic", NOW_US, export_events=True)
    stored = rows.scores["items"][0].as_py()
    assert json.loads(stored) == [
        {"text": "claim", "ok": False, "evidence": "evidence"},
        {"text": "other", "ok": True, "evidence": None},
    ]
    assert json.loads(rows.outbox["attributes"][0].as_py())["ragpulse.items"] == stored


def test_a_score_without_items_stores_and_exports_an_empty_list() -> None:
    # Most scores have none; their rows skip building and encoding a list, and must say the same.
    bare = Score.judged("answer_relevance", 0.9, 0.5)
    with_items = Score.judged("faithfulness", 1.0, 0.5, items=[score_item("claim", True, "doc")])
    rows = score_rows([(_trace(), 1, [bare, with_items])], "deterministic", NOW_US, export_events=True)
    assert [json.loads(text) for text in rows.scores["items"].to_pylist()] == [
        [],
        [{"text": "claim", "ok": True, "evidence": "doc"}],
    ]
    assert rows.scores["name"].to_pylist() == ["answer_relevance", "faithfulness"]
    assert rows.scores["value"].to_pylist() == [0.9, 1.0]
    bare_event, items_event = (json.loads(a) for a in rows.outbox["attributes"].to_pylist())
    assert "ragpulse.items" not in bare_event  # an event names items only when there are some
    assert json.loads(items_event["ragpulse.items"]) == [{"text": "claim", "ok": True, "evidence": "doc"}]


def test_events_cut_long_texts_and_keep_the_first_items() -> None:
    long = "w" * (MAX_EVENT_TEXT + 5)
    exact = "e" * MAX_EVENT_TEXT
    many = [score_item(f"claim {i}", False, None) for i in range(MAX_EVENT_ITEMS + 3)]
    scores = [
        Score.judged("faithfulness", 0.0, 1.0, items=[score_item(long, False, long)]),
        Score.judged("context_recall", 1.0, 0.8, items=[score_item(exact, True, exact)]),
        Score.judged("answer_relevance", 0.0, 0.5, items=many),
    ]
    rows = score_rows([(_trace(), 2, scores)], "deterministic", NOW_US, export_events=True)
    events = rows.outbox["attributes"].to_pylist()
    cut = "w" * (MAX_EVENT_TEXT - 1) + "…"
    assert _event_items(events[0]) == [{"text": cut, "ok": False, "evidence": cut}]
    assert _event_items(events[1]) == [{"text": exact, "ok": True, "evidence": exact}]
    assert [i["text"] for i in _event_items(events[2])] == [f"claim {i}" for i in range(MAX_EVENT_ITEMS)]
    # The score rows keep every item, uncut.
    assert json.loads(rows.scores["items"][0].as_py())[0]["text"] == long
    assert len(json.loads(rows.scores["items"][2].as_py())) == MAX_EVENT_ITEMS + 3
    assert rows.outbox["revision"].to_pylist() == [2, 2, 2]


def test_each_score_lands_under_its_evaluated_span() -> None:
    names = ["retrieval.recall@5", "context_precision", "faithfulness", "citation", "answer_relevance"]
    trace = _trace()
    scores = [Score.skip(name, "no_reference", "none") for name in names]
    other = RagTrace(trace_id="t2", steps=[Step(span_id="only", kind="chain")])
    rows = score_rows(
        [(trace, 1, scores), (other, 3, []), (other, 3, scores[:1])], "judge", NOW_US, export_events=False
    )
    assert rows.scores["span_id"].to_pylist() == ["ret", "ret", "llm-2", "llm-2", "root", "only"]
    assert rows.scores["span_id"].to_pylist() == [
        *(evaluated_span(trace, name) for name in names),
        evaluated_span(other, names[0]),
    ]
    assert rows.scores["trace_id"].to_pylist() == ["t1"] * 5 + ["t2"]
    assert rows.scores["revision"].to_pylist() == [1] * 5 + [3]
    assert rows.scores["evaluator"].to_pylist() == ["judge"] * 6
    assert rows.outbox.num_rows == 0


def test_trace_tables_cross_the_process_boundary_unchanged() -> None:
    """The mapping worker's tables are pickled as Arrow IPC streams: same schemas, same values."""
    trace = _trace()
    tables = trace_tables([AssembledTrace(trace, "complete", 2, NOW_US)], NOW_US)
    rows = score_rows(
        [(trace, 2, [Score.skip("faithfulness", "no_answer", "x")])], "deterministic", NOW_US, True
    )
    tables.scores, tables.outbox = rows.scores, rows.outbox
    back = pickle.loads(pickle.dumps(tables))
    for name, table in vars(tables).items():
        copy = getattr(back, name)
        assert copy.schema.equals(table.schema, check_metadata=True), name
        assert copy.equals(table), name
    empty = TraceTables(tables.traces.slice(0, 0), tables.steps, tables.documents)
    back = pickle.loads(pickle.dumps(empty))
    assert back.traces.num_rows == 0 and back.traces.schema.equals(tables.traces.schema)
    assert back.scores is None and back.outbox is None


def _parsed(attributes: str) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(attributes)
    if "ragpulse.items" in parsed:
        parsed["ragpulse.items"] = json.loads(parsed["ragpulse.items"])
    return parsed


def test_the_span_events_view_shows_each_stored_score_as_the_event_exported(tmp_path: Path) -> None:
    """Stored scores read back from `span_events` as events with the attributes of the events the
    outbox exports: labels, errors, judge fields, values and thresholds absent or not, items none,
    few, many or long, texts with non-ASCII characters."""
    long = "ü" * (MAX_EVENT_TEXT + 5)
    many = [score_item(f"c {i}", i % 2 == 0, None) for i in range(MAX_EVENT_ITEMS + 5)]
    scores = [
        Score.judged("faithfulness", 0.5, 1.0, explanation="x", items=[score_item("claim", False, "ev")]),
        Score.judged("context_recall", 1.0, 0.8, explanation=long, items=[score_item(long, True, long)]),
        Score.judged("answer_relevance", 0.0, 0.5, items=many),
        Score.skip("retrieval.recall@5", "no_reference", "no expected documents"),
        Score.fail_error("citation", "judge_timeout", "the judge did not answer", threshold=0.5),
        Score(name="groundedness", status="error", label="", explanation=""),
        Score(
            name="answer_correctness",
            value=0.25,
            status="fail",
            threshold=None,
            label="",
            explanation="",
            model="judge-model",
            prompt_version="v3 🚀",
            items=[score_item('\U0001d518nicode “quotes” \\ and "escapes"\n', True, "\t")],
        ),
    ]
    trace = _trace()
    rows = score_rows([(trace, 2, scores)], "judge", NOW_US, export_events=True)
    tables = trace_tables([AssembledTrace(trace, "complete", 2, NOW_US)], NOW_US)
    tables.scores = rows.scores
    store = DuckDBStore(tmp_path / "view.duckdb")
    try:
        store.write_traces(tables, [])
        result = store.query(
            "SELECT span_id, time, name, attributes, source, received_at FROM span_events "
            "ORDER BY attributes->>'gen_ai.evaluation.name'",
            100,
            10,
        )
    finally:
        store.close()
    viewed = [dict(zip(result.columns, row, strict=True)) for row in result.rows]
    exported = sorted(
        zip(rows.outbox["span_id"].to_pylist(), rows.outbox["attributes"].to_pylist(), strict=True),
        key=lambda e: json.loads(e[1])["gen_ai.evaluation.name"],
    )
    assert len(viewed) == len(scores)
    for event, (span_id, attributes) in zip(viewed, exported, strict=True):
        assert _parsed(event["attributes"]) == _parsed(attributes)
        assert (event["span_id"], event["name"], event["source"]) == (
            span_id,
            "gen_ai.evaluation.result",
            "ragpulse",
        )
    created = pa.scalar(NOW_US, pa.timestamp("us")).as_py()
    assert {(e["time"], e["received_at"]) for e in viewed} == {(created, created)}
