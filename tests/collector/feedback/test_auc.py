"""The AUC of a score against users' feedback, with DeLong's interval: hand-computed examples, a
brute-force reference from the definition, properties, and the SQL (`feedback_auc_sql`, on an
in-memory DuckDB `scores` table) against the pure function and the pairing rules."""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.feedback.agreement import feedback_report
from collector.feedback.agreement_stats import Z95, Auc, delong_auc, delong_from_sums
from collector.schema.windows import Window
from collector.store.reads.feedback import feedback_auc_sql, feedback_pairs_sql


def _psi(x: float, y: float) -> float:
    return 1.0 if x > y else 0.5 if x == y else 0.0


def reference(positive: list[float], negative: list[float]) -> tuple[float, float]:
    """The AUC and DeLong's variance straight from the definitions, in O(m·n): the Mann-Whitney
    kernel averaged, and the sample variances of the structural components (DeLong et al. 1988)."""
    m, n = len(positive), len(negative)
    v10 = [sum(_psi(x, y) for y in negative) / n for x in positive]
    v01 = [sum(_psi(x, y) for x in positive) / m for y in negative]
    auc = sum(v10) / m
    s10 = sum((v - auc) ** 2 for v in v10) / (m - 1)
    s01 = sum((v - auc) ** 2 for v in v01) / (n - 1)
    return auc, s10 / m + s01 / n


# --------------------------------------------------------------------------- hand-computed


def test_a_tiny_example_computed_by_hand_and_clipped_at_one() -> None:
    # Positives X = 0.2, 0.6, 0.9; negatives Y = 0.1, 0.6. The kernel psi(X, Y) (1 if X > Y, 1/2 on a tie):
    #   X = 0.2: 1, 0      -> V10 = 1/2
    #   X = 0.6: 1, 1/2    -> V10 = 3/4
    #   X = 0.9: 1, 1      -> V10 = 1
    #   Y = 0.1: 1, 1, 1   -> V01 = 1
    #   Y = 0.6: 0, 1/2, 1 -> V01 = 1/2
    # AUC = mean V10 = 9/4 / 3 = 3/4 (= mean V01).
    # S10 = ((1/4)² + 0 + (1/4)²) / 2 = 1/16; S01 = ((1/4)² + (1/4)²) / 1 = 1/8.
    # Var = S10/3 + S01/2 = 1/48 + 1/16 = 1/12; SE = 0.288675...
    # Interval: 0.75 ± 1.959964 * 0.288675 = 0.75 ± 0.565793 = 0.184207 to 1.315793, clipped to 1.
    result = delong_auc([0.2, 0.6, 0.9], [0.1, 0.6])
    assert (result.n_positive, result.n_negative) == (3, 2)
    assert result.auc == pytest.approx(0.75)
    assert result.low == pytest.approx(0.75 - Z95 * math.sqrt(1 / 12))
    assert result.low == pytest.approx(0.184207, abs=1e-6)
    assert result.high == 1.0


def test_more_examples_by_hand_one_inside_zero_one_one_clipped_at_zero() -> None:
    # X = 1, 2, 3, 4, 5 against Y = 0.5, 1.5, 2.5, 3.5, 4.5.
    #   V10 = 1/5, 2/5, 3/5, 4/5, 5/5 -> AUC = 0.6;  V01 = 5/5, 4/5, 3/5, 2/5, 1/5 (mean 0.6)
    #   S10 = S01 = (0.4² + 0.2² + 0 + 0.2² + 0.4²) / 4 = 0.1
    #   Var = 0.1/5 + 0.1/5 = 0.04; SE = 0.2; 0.6 ± 0.391993 = 0.208007 to 0.991993.
    inside = delong_auc([1, 2, 3, 4, 5], [0.5, 1.5, 2.5, 3.5, 4.5])
    assert inside.auc == pytest.approx(0.6)
    assert inside.low == pytest.approx(0.208007, abs=1e-6)
    assert inside.high == pytest.approx(0.991993, abs=1e-6)
    # X = 1, 2, 3, 4 against Y = 0, 2.5, 5, 6.
    #   V10: X=1: 1/4, X=2: 1/4, X=3: 2/4, X=4: 2/4        -> AUC = 1.5/4 = 0.375
    #   V01: Y=0: 4/4, Y=2.5: 2/4, Y=5: 0, Y=6: 0           -> mean 1.5/4 = 0.375
    # S10 = (2 * 0.125² + 2 * 0.125²) / 3 = 0.0625 / 3 = 1/48
    # S01 = (0.625² + 0.125² + 2 * 0.375²) / 3 = (0.390625 + 0.015625 + 0.28125) / 3 = 0.6875 / 3
    # Var = (1/48) / 4 + (0.6875/3) / 4 = 0.005208 + 0.057292 = 0.0625; SE = 0.25 exactly.
    result = delong_auc([1, 2, 3, 4], [0, 2.5, 5, 6])
    assert result.auc == pytest.approx(0.375)
    assert result.low == 0.0  # 0.375 - 0.49 < 0: clipped at 0
    assert result.high == pytest.approx(0.375 + Z95 * 0.25)
    assert result.high == pytest.approx(0.864991, abs=1e-6)


def test_perfect_separation_is_one_and_the_reverse_zero_both_with_a_point_interval() -> None:
    perfect = delong_auc([0.7, 0.8, 0.9, 1.0], [0.0, 0.1, 0.2])
    assert perfect == Auc(4, 3, 1.0, 1.0, 1.0)
    reverse = delong_auc([0.0, 0.1, 0.2], [0.7, 0.8, 0.9, 1.0])
    assert reverse == Auc(3, 4, 0.0, 0.0, 0.0)


def test_identical_distributions_and_all_ties_give_one_half() -> None:
    same = delong_auc([0.1, 0.5, 0.9], [0.1, 0.5, 0.9])
    assert same.auc == pytest.approx(0.5)
    assert same.low is not None and same.high is not None and same.low < 0.5 < same.high
    # Every value tied: each pair counts one half, and the components do not vary.
    constant = delong_auc([1.0] * 5, [1.0] * 4)
    assert constant == Auc(5, 4, 0.5, 0.5, 0.5)


def test_ties_between_the_classes_count_one_half() -> None:
    # X = 0.5, 0.5 against Y = 0.5, 0.0: pairs (0.5, 0.5) twice tie, (0.5, 0.0) twice win: (2 * 1/2 + 2) / 4.
    assert delong_auc([0.5, 0.5], [0.5, 0.0]).auc == pytest.approx(0.75)


def test_no_interval_below_two_in_a_class_and_no_auc_without_a_class() -> None:
    assert delong_auc([0.9], [0.1, 0.2, 0.3]) == Auc(1, 3, 1.0, None, None)
    assert delong_auc([0.9, 0.4], [0.1]) == Auc(2, 1, 1.0, None, None)
    assert delong_auc([], [0.1, 0.2]) == Auc(0, 2, None, None, None)
    assert delong_auc([0.3, 0.4], []) == Auc(2, 0, None, None, None)
    assert delong_from_sums(0, 3, 0, 0, 0, 0) == Auc(0, 3, None, None, None)


# --------------------------------------------------------------------------- properties

_values = st.lists(
    st.one_of(st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.floats(0, 1, allow_nan=False)),
    min_size=2,
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_values, _values)
def test_properties_and_the_definition(positive: list[float], negative: list[float]) -> None:
    result = delong_auc(positive, negative)
    assert result.auc is not None and result.low is not None and result.high is not None
    assert 0.0 <= result.low <= result.auc <= result.high <= 1.0
    # The midrank computation is the definition's, O(n log n) instead of O(m·n).
    auc, variance = reference(positive, negative)
    assert result.auc == pytest.approx(auc, abs=1e-12)
    half = Z95 * math.sqrt(variance)
    assert result.low == pytest.approx(max(0.0, auc - half), abs=1e-9)
    assert result.high == pytest.approx(min(1.0, auc + half), abs=1e-9)
    # Swapping the classes mirrors the AUC and its interval.
    swapped = delong_auc(negative, positive)
    assert swapped.auc == pytest.approx(1.0 - result.auc, abs=1e-12)
    assert swapped.low == pytest.approx(1.0 - result.high, abs=1e-9)
    assert swapped.high == pytest.approx(1.0 - result.low, abs=1e-9)
    # The order the traces come in changes nothing, to the last bit (exact sums).
    assert delong_auc(positive[::-1], negative[::-1]) == result


# --------------------------------------------------------------------------- the SQL

NOW = datetime(2026, 3, 1, 12, 0)
WINDOW = Window.ending(NOW, 7 * 86400)


def scores_db(rows: list[dict[str, object]]) -> duckdb.DuckDBPyConnection:
    """An in-memory `scores` table with the columns the reads use."""
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE scores (trace_id VARCHAR, span_id VARCHAR, name VARCHAR, value DOUBLE, "
        "status VARCHAR, evaluator VARCHAR, created_at TIMESTAMP, service_name VARCHAR, feedback_id VARCHAR)"
    )
    columns = ["trace_id", "span_id", "name", "value", "status", "evaluator", "created_at"]
    columns += ["service_name", "feedback_id"]
    con.executemany(
        f"INSERT INTO scores ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
        [[row.get(c) for c in columns] for row in rows],
    )
    return con


def score(
    trace: str, name: str, value: float | None, status: str | None = "pass", **more: object
) -> dict[str, object]:
    row: dict[str, object] = {
        "trace_id": trace,
        "span_id": "s1",
        "name": name,
        "value": value,
        "status": status,
        "evaluator": "deterministic",
        "created_at": NOW - timedelta(hours=1),
        "service_name": "shop-bot",
    }
    return row | more


def thumbs(trace: str, up: bool, hours_ago: float = 1, **more: object) -> dict[str, object]:
    return (
        score(
            trace,
            "thumbs",
            1.0 if up else 0.0,
            "pass" if up else "fail",
            evaluator="human",
            created_at=NOW - timedelta(hours=hours_ago),
            feedback_id=f"fb-{trace}-{hours_ago}",
        )
        | more
    )


def rows_of(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, object]]:
    cursor = con.execute(sql)
    names = [d[0] for d in cursor.description or []]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def test_the_pairs_follow_the_rules() -> None:
    con = scores_db(
        [
            # t1: a thumbs up, and faithfulness on two spans (mean 0.5), an error, a skipped one.
            thumbs("t1", True),
            score("t1", "faithfulness", 0.25, "fail", span_id="a"),
            score("t1", "faithfulness", 0.75, "pass", span_id="b"),
            score("t1", "context_relevance", None, "error"),
            score("t1", "answer_relevance", 0.4, "skipped"),
            # t2: a thumbs up then a later thumbs down: the later one counts; a neutral later still
            # (no status) does not.
            thumbs("t2", True, hours_ago=5),
            thumbs("t2", False, hours_ago=2),
            score("t2", "thumbs", 0.5, None, evaluator="human", created_at=NOW - timedelta(hours=1)),
            score("t2", "faithfulness", 0.1, "fail"),
            # An app's own evaluation and another feedback name are not paired as scores.
            score("t2", "relevance", 0.3, "fail", evaluator="external"),
            score("t2", "resolved", 1.0, "pass", evaluator="human"),
            # t3: feedback given before the window; t4: another service's; t5: a score named thumbs
            # from ragpulse's own evaluators is no feedback.
            thumbs("t3", False, hours_ago=24 * 8),
            score("t3", "faithfulness", 0.9),
            thumbs("t4", False, service_name="other-bot"),
            score("t4", "faithfulness", 0.9, service_name="other-bot"),
            score("t5", "thumbs", 0.0, "fail"),
            score("t5", "faithfulness", 0.9),
            # t6: external feedback of the name counts.
            thumbs("t6", False, evaluator="external"),
            score("t6", "faithfulness", 1.0),
        ]
    )
    pairs = rows_of(con, feedback_pairs_sql(WINDOW, "shop-bot", "thumbs"))
    assert pairs == [
        {"trace_id": "t1", "name": "faithfulness", "value": 0.5, "positive": True},
        {"trace_id": "t2", "name": "faithfulness", "value": 0.1, "positive": False},
        {"trace_id": "t6", "name": "faithfulness", "value": 1.0, "positive": False},
    ]
    every_service = rows_of(con, feedback_pairs_sql(WINDOW, None, "thumbs"))
    assert {p["trace_id"] for p in every_service} == {"t1", "t2", "t4", "t6"}
    # A name with quotes is a literal, not SQL.
    assert rows_of(con, feedback_pairs_sql(WINDOW, None, "it's")) == []


def test_the_sql_auc_equals_the_pure_function_on_the_pairs() -> None:
    rng = random.Random(7)
    rows: list[dict[str, object]] = []
    for i in range(300):
        trace = f"t{i:03d}"
        up = rng.random() < 0.7 or i % 50 == 0
        rows.append(thumbs(trace, up))
        # faithfulness predicts a thumbs down a little, on values with many ties; two spans each.
        for span in ("a", "b"):
            value = rng.choice([0.0, 0.5, 1.0, 1.0]) if up else rng.choice([0.0, 0.5, 1.0])
            rows.append(score(trace, "faithfulness", value, span_id=span))
        rows.append(score(trace, "context_relevance", rng.random()))
        if i % 50 == 0:  # a score only some traces have, all thumbs up: no AUC
            rows.append(score(trace, "rare", 1.0))
    con = scores_db(rows)
    pairs = rows_of(con, feedback_pairs_sql(WINDOW, None, "thumbs"))
    by_name: dict[str, tuple[list[float], list[float]]] = {}
    for pair in pairs:
        positive, negative = by_name.setdefault(str(pair["name"]), ([], []))
        (positive if pair["positive"] else negative).append(float(pair["value"]))  # type: ignore[arg-type]

    found = rows_of(con, feedback_auc_sql(WINDOW, None, "thumbs"))
    assert [r["name"] for r in found] == sorted(by_name)
    for row in found:
        sums = [int(str(row[k])) for k in ("n_positive", "n_negative", "sum_a", "sum_a2", "sum_b", "sum_b2")]
        # The same whole numbers, so the same answer to the last bit.
        assert delong_from_sums(*sums) == delong_auc(*by_name[str(row["name"])])

    report = feedback_report(lambda sql: rows_of(con, sql), WINDOW, None, "thumbs")
    assert report["feedback"] == "thumbs"
    aucs = [s["auc"] for s in report["scores"]]
    assert report["scores"][-1]["name"] == "rare" and aucs[-1] is None
    assert aucs[:-1] == sorted(aucs[:-1], reverse=True) and None not in aucs[:-1]
    faithfulness = next(s for s in report["scores"] if s["name"] == "faithfulness")
    expected = delong_auc(*by_name["faithfulness"])
    assert (faithfulness["auc"], faithfulness["auc_low"], faithfulness["auc_high"]) == (
        expected.auc,
        expected.low,
        expected.high,
    )
    assert expected.low is not None and 0.0 < expected.low < expected.auc < expected.high < 1.0  # type: ignore[operator]
    assert faithfulness["n_positive"] + faithfulness["n_negative"] == 300
