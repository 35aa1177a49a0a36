"""The statistics behind `ragpulse check`, against direct computations: intervals, the drop tests,
Holm's correction, the SQL rank sums, and the false-alarm rate of regression detection on healthy
traffic."""

from __future__ import annotations

import itertools
import math
import random
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.monitoring.regression import Baseline, RegressionSettings, compare, detect
from collector.monitoring.stats import (
    fisher_drop_p,
    holm,
    mann_whitney_drop_p,
    mean_interval,
    proportion_drop_p,
    wilson_interval,
)
from collector.schema.scope import Scope
from collector.schema.windows import Window, parse_duration
from collector.store.duckdb_store import DuckDBStore
from collector.store.reads.monitoring import comparison_sql
from tests.support.helpers import seed_scores

NOW = datetime(2026, 12, 1, 12, 0)


def test_wilson_interval_matches_the_textbook_example() -> None:
    # 81 successes in 263 trials, 95 %: 0.2553 to 0.3662 (Wilson 1927; Newcombe 1998, table I).
    interval = wilson_interval(81, 263)
    assert interval is not None
    assert interval.low == pytest.approx(0.2553, abs=1e-4)
    assert interval.high == pytest.approx(0.3662, abs=1e-4)
    assert wilson_interval(0, 0) is None
    edge = wilson_interval(20, 20)
    assert edge is not None and edge.high == 1.0 and edge.low < 1.0


def test_mean_interval_is_the_normal_approximation_from_sums() -> None:
    values = [0.2, 0.4, 0.4, 0.9, 1.0, 0.7]
    interval = mean_interval(len(values), sum(values), sum(v * v for v in values))
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = 1.959964 * sd / math.sqrt(len(values))
    assert interval is not None
    assert interval.low == pytest.approx(max(0, mean - half), abs=1e-6)
    assert interval.high == pytest.approx(min(1, mean + half), abs=1e-6)
    assert mean_interval(1, 0.5, 0.25) is None


def _fisher_by_enumeration(x1: int, n1: int, x2: int, n2: int) -> float:
    """P(X <= x1) by counting the equally likely ways of placing the successes."""
    k, n = x1 + x2, n1 + n2
    total = math.comb(n, k)
    return sum(math.comb(n1, i) * math.comb(n2, k - i) for i in range(0, x1 + 1)) / total


@given(st.integers(1, 30), st.integers(1, 30), st.data())
def test_fisher_matches_enumeration(n1: int, n2: int, data: st.DataObject) -> None:
    x1 = data.draw(st.integers(0, n1))
    x2 = data.draw(st.integers(0, n2))
    assert fisher_drop_p(x1, n1, x2, n2) == pytest.approx(
        _fisher_by_enumeration(x1, n1, x2, n2), rel=1e-9, abs=1e-12
    )


def test_proportion_test_is_one_sided_and_switches_to_fisher_for_small_cells() -> None:
    # A clear drop, a clear rise, and no change.
    assert proportion_drop_p(60, 100, 90, 100) < 0.001
    assert proportion_drop_p(90, 100, 60, 100) > 0.999
    assert 0.4 < proportion_drop_p(80, 100, 80, 100) < 0.6
    # Few failures anywhere: the exact test's answer.
    assert proportion_drop_p(97, 100, 100, 100) == pytest.approx(_fisher_by_enumeration(97, 100, 100, 100))


def _mann_whitney_reference(recent: list[float], base: list[float]) -> float:
    """The one-sided p-value computed the textbook way: average ranks, U, tie-corrected variance."""
    pooled = sorted((v, i < len(recent)) for i, v in enumerate(recent + base))
    ranks: dict[float, float] = {}
    position = 0
    tie_term = 0.0
    for value, group in itertools.groupby(pooled, key=lambda pair: pair[0]):
        size = len(list(group))
        ranks[value] = position + (size + 1) / 2
        tie_term += size**3 - size
        position += size
    n1, n2 = len(recent), len(base)
    u = sum(ranks[v] for v in recent) - n1 * (n1 + 1) / 2
    n = n1 + n2
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))))
    return 0.5 * math.erfc(-((u - n1 * n2 / 2 + 0.5) / sigma) / math.sqrt(2))


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, 0.33]), min_size=3, max_size=40),
    st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, 0.9]), min_size=3, max_size=40),
)
def test_sql_rank_sums_give_the_reference_mann_whitney_p(recent: list[float], base: list[float]) -> None:
    """The query's rank sum and tie term, fed to the test, equal the textbook computation (values
    with many ties, as scores have)."""
    if len(set(recent + base)) == 1:
        return  # no spread: covered by test_all_tied_values_never_regress
    import duckdb

    con = duckdb.connect()
    window = Window.ending(NOW, 3600)
    con.execute(
        "CREATE TABLE scores (service_name VARCHAR, name VARCHAR, value DOUBLE, status VARCHAR, "
        "bucket TIMESTAMP, trace_id VARCHAR, probe VARCHAR)"
    )
    rows = [("s", "m", v, "pass", NOW - timedelta(minutes=5), "r", None) for v in recent]
    rows += [("s", "m", v, "pass", NOW - timedelta(days=1, minutes=5), "b", None) for v in base]
    con.executemany("INSERT INTO scores VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    cursor = con.execute(comparison_sql(window, Scope(), None, shift=86400))
    columns = [d[0] for d in cursor.description]
    (row,) = [dict(zip(columns, r, strict=True)) for r in cursor.fetchall()]
    assert (row["n_recent"], row["n_base"]) == (len(recent), len(base))
    p = mann_whitney_drop_p(len(recent), len(base), row["rank_sum_recent"], row["tie_term"])
    assert p == pytest.approx(_mann_whitney_reference(recent, base), rel=1e-9)


def test_all_tied_values_never_regress() -> None:
    assert mann_whitney_drop_p(30, 30, 30 * 61 / 2, 60**3 - 60) == 1.0


def test_holm_steps_down() -> None:
    # m = 4: 0.01 <= 0.05/4, 0.015 <= 0.05/3, then 0.03 > 0.05/2 stops (0.5 is not reached).
    assert holm([0.03, 0.01, 0.015, 0.5], 0.05) == [False, True, True, False]
    # 0.02 > 0.05/3 stops at the second step, though 0.02 < 0.05 alone.
    assert holm([0.03, 0.01, 0.02, 0.5], 0.05) == [False, True, False, False]
    assert holm([0.001, 0.012, 0.013], 0.05) == [True, True, True]
    assert holm([], 0.05) == []


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("15m", 900), ("1h", 3600), ("7d", 604800), ("1.5h", 5400), ("2w", 1209600)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1y", "-5m", "0", "h"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_false_alarm_rate_on_healthy_traffic_is_at_most_alpha(tmp_path: Path) -> None:
    """400 seeded runs (a service each), baseline and recent windows drawn from one distribution:
    the share of runs with any regression flagged stays at or below alpha, with min_effect 0 so
    that only the statistics stand between noise and an alarm."""
    runs, per_window, alpha = 400, 40, 0.05
    rng = random.Random(20261204)
    recent, before = Window.ending(NOW, 3600), Window.ending(NOW, 3600).shifted(86400)
    buckets, names, values, services = [], [], [], []
    for run in range(runs):
        for start in (recent.start, before.start):
            for name in ("faithfulness", "retrieval.recall@5"):
                for _ in range(per_window):
                    # Scores as they come: many at 1, some at 0, the rest spread.
                    value = rng.choice([1.0, 1.0, 1.0, 0.0, rng.random()])
                    buckets.append(start + timedelta(minutes=rng.randrange(60)))
                    names.append(name)
                    values.append(value)
                    services.append(f"svc-{run:03d}")
    db = tmp_path / "healthy.duckdb"
    with DuckDBStore(db) as store:
        seed_scores(store, buckets, names, values, services)
    strict = RegressionSettings(alpha=alpha, min_effect=0.0, min_samples=20)
    with DuckDBStore(db, read_only=True) as store:
        rows = store.query(comparison_sql(recent, Scope(), None, shift=86400), 10_000, 60).records()
    by_service: dict[str, list[dict]] = {}
    for row in rows:
        by_service.setdefault(row["service_name"], []).append(row)
    assert len(by_service) == runs
    alarms = sum(
        any(c.status == "regressed" for c in detect(service_rows, strict))
        for service_rows in by_service.values()
    )
    assert all(c.p_value is not None for c in detect(rows, strict))  # every comparison was tested
    assert alarms / runs <= alpha, f"{alarms} of {runs} healthy runs raised an alarm"


def test_a_real_drop_is_detected_and_a_small_one_is_not_flagged(tmp_path: Path) -> None:
    recent, before = Window.ending(NOW, 3600), Window.ending(NOW, 3600).shifted(86400)
    rng = random.Random(7)
    buckets, names, values = [], [], []
    for start, faithful, recall in ((before.start, 0.9, 0.9), (recent.start, 0.5, 0.88)):
        for _ in range(200):
            for name, rate in (("faithfulness", faithful), ("retrieval.recall@5", recall)):
                buckets.append(start + timedelta(minutes=rng.randrange(60)))
                names.append(name)
                values.append(1.0 if rng.random() < rate else 0.0)
    db = tmp_path / "drop.duckdb"
    with DuckDBStore(db) as store:
        seed_scores(store, buckets, names, values)
    with DuckDBStore(db, read_only=True) as store:

        def query(sql: str) -> list[dict]:
            return store.query(sql, 10_000, 60).records()

        found = compare(query, recent, Baseline(shift=86400), Scope(), RegressionSettings(min_effect=0.05))
    status = {(c.score, c.metric): c.status for c in found}
    assert status[("faithfulness", "mean")] == "regressed"
    assert status[("faithfulness", "pass_rate")] == "regressed"
    assert status[("retrieval.recall@5", "mean")] == "ok"
    assert status[("retrieval.recall@5", "pass_rate")] == "ok"
