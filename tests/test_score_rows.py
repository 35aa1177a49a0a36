"""`score_rows`: the score rows and write-back events of scored traces, built column by column.

What the rows hold is pinned end to end in tests/test_online_scoring.py; these pin the details a
faster construction could get wrong: the event shows at most `MAX_EVENT_ITEMS` items and cuts
long texts (while `scores.items` keeps everything), and each score lands under its evaluated span.
"""

from __future__ import annotations

import json
import pickle

from collector.processors.scoring import MAX_EVENT_ITEMS, MAX_EVENT_TEXT, evaluated_span, score_rows
from collector.store.trace_rows import AssembledTrace, TraceTables, trace_tables
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
    rows = score_rows([(_trace(), 1, [score])], "deterministic", NOW_US, export_events=False)
    stored = rows.scores["items"][0].as_py()
    assert json.loads(stored) == [
        {"text": "claim", "ok": False, "evidence": "evidence"},
        {"text": "other", "ok": True, "evidence": None},
    ]
    assert json.loads(rows.events["attributes"][0].as_py())["ragpulse.items"] == stored


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
    events = rows.events["attributes"].to_pylist()
    cut = "w" * (MAX_EVENT_TEXT - 1) + "…"
    assert _event_items(events[0]) == [{"text": cut, "ok": False, "evidence": cut}]
    assert _event_items(events[1]) == [{"text": exact, "ok": True, "evidence": exact}]
    assert [i["text"] for i in _event_items(events[2])] == [f"claim {i}" for i in range(MAX_EVENT_ITEMS)]
    # The score rows keep every item, uncut.
    assert json.loads(rows.scores["items"][0].as_py())[0]["text"] == long
    assert len(json.loads(rows.scores["items"][2].as_py())) == MAX_EVENT_ITEMS + 3
    assert rows.outbox["attributes"].to_pylist() == events
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
    assert rows.events["span_id"].to_pylist() == rows.scores["span_id"].to_pylist()
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
    tables.scores, tables.events, tables.outbox = rows.scores, rows.events, rows.outbox
    back = pickle.loads(pickle.dumps(tables))
    for name, table in vars(tables).items():
        copy = getattr(back, name)
        assert copy.schema.equals(table.schema, check_metadata=True), name
        assert copy.equals(table), name
    empty = TraceTables(tables.traces.slice(0, 0), tables.steps, tables.documents)
    back = pickle.loads(pickle.dumps(empty))
    assert back.traces.num_rows == 0 and back.traces.schema.equals(tables.traces.schema)
    assert back.scores is None and back.events is None and back.outbox is None
