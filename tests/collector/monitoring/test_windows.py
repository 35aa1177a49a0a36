"""Windows take whole minutes, one rule on every surface: `check`, `check --regression`, alerts and
the dashboard count the same scores for the same window (real DuckDB files, the real CLI, the real
alert evaluator and dashboard code), and a window shorter than a minute is refused everywhere."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from collector.config import ConfigError, load_config
from collector.dashboard.data import BadParameter, DashboardData
from collector.monitoring.config import MonitoringConfig
from collector.monitoring.evaluator import AlertBook, AlertEvaluator
from collector.schema.windows import Window
from collector.store.duckdb_store import DuckDBStore
from collector.telemetry import Metrics
from tests.support.helpers import run_ragpulse, seed_scores

SCORE = "faithfulness"
DAY = timedelta(days=1)
# Scores per minute bucket (distinct counts, so a total tells which minutes were counted); the same
# minutes a day earlier hold the same scores, a baseline for the regression paths.
PER_MINUTE = {
    datetime(2026, 12, 1, 11, 57): 3,
    datetime(2026, 12, 1, 11, 58): 5,
    datetime(2026, 12, 1, 11, 59): 7,
    datetime(2026, 12, 1, 12, 0): 11,
    datetime(2026, 12, 1, 12, 1): 13,
}


def _minute(text: str) -> datetime:
    return datetime.fromisoformat(f"2026-12-01T{text}")


def _seed(db: Path, per_minute: dict[datetime, int], days_back: tuple[int, ...] = (0, 1)) -> None:
    """Valued scores only (no error, none skipped), so the mean's n, the pass rate's n and the
    regression's n are one number."""
    buckets: list[datetime] = []
    for back in days_back:
        for minute, count in per_minute.items():
            buckets += [minute - back * DAY] * count
    values = [(0.2, 0.5, 0.7, 0.9, 1.0)[i % 5] for i in range(len(buckets))]
    with DuckDBStore(db) as store:
        seed_scores(store, buckets, [SCORE] * len(buckets), values)


def _check(tmp_path: Path, db: Path, until: str, since: str, *args: str) -> tuple[int, dict[str, Any]]:
    result = run_ragpulse(
        "check", "--db", str(db), "--until", until, "--since", since, "--json", *args, cwd=tmp_path
    )
    assert result.returncode in (0, 1, 2), result.stderr
    return result.returncode, json.loads(result.stdout)


# --------------------------------------------------------------------------- the rule itself


@pytest.mark.parametrize(
    ("end", "seconds", "start", "stop"),
    [
        ("12:00:30", 60, "11:59", "12:01"),  # the previous minute and the current one so far
        ("12:00:00", 60, "11:59", "12:00"),  # on a minute: exactly one minute
        ("12:00:30", 90, "11:59", "12:01"),
        ("12:00:10", 90, "11:58", "12:01"),  # 90 s touching three minutes takes all three
        ("12:00:00", 3600, "11:00", "12:00"),
        ("12:00:00.250", 3600, "11:00", "12:01"),
    ],
)
def test_a_window_covers_every_minute_it_overlaps(end: str, seconds: float, start: str, stop: str) -> None:
    assert Window.covering(_minute(end), seconds) == Window(_minute(start), _minute(stop))


def test_a_baseline_never_shares_a_minute_with_the_recent_window() -> None:
    recent = Window.covering(_minute("12:00:30"), 3600)  # 11:00 to 12:01
    # An hour back covers 10:00 to 11:01; minute 11:00 stays on the recent side only.
    assert recent.before(3600) == Window(_minute("10:00"), _minute("11:00"))
    assert recent.before(86400) == Window(_minute("11:00") - DAY, _minute("12:01") - DAY)
    # The covered length back: the minutes just before, as many.
    assert recent.before(recent.seconds) == Window(_minute("09:59"), _minute("11:00"))


# --------------------------------------------------------------------------- the user's report


def test_check_since_60s_right_after_traffic_in_the_previous_minute_finds_it(tmp_path: Path) -> None:
    """Traffic at 11:59, `check --since 60s` at 12:00:30: the window starts at 11:59:30, inside the
    minute the scores are counted in. Selecting `bucket >= 11:59:30` found none (exit 2)."""
    db = tmp_path / "recent.duckdb"
    _seed(db, {_minute("11:59"): 25}, days_back=(0,))
    code, report = _check(tmp_path, db, "2026-12-01T12:00:30", "60s", "--min-pass-rate", f"{SCORE}=0.5")
    assert (code, report["gates"][0]["n"]) == (0, 25), report
    assert report["window"] == {"start": "2026-12-01 11:59:00", "end": "2026-12-01 12:01:00"}


# --------------------------------------------------------------------------- one window, one n


@pytest.mark.parametrize(
    ("until", "seconds", "minutes"),
    [
        ("12:00:30", 60, ("11:59", "12:00")),
        ("12:00:00", 60, ("11:59",)),
        ("12:00:10", 90, ("11:58", "11:59", "12:00")),
    ],
)
def test_one_window_gives_one_n_on_every_surface(
    tmp_path: Path, until: str, seconds: int, minutes: tuple[str, ...]
) -> None:
    db = tmp_path / "same.duckdb"
    _seed(db, PER_MINUTE)
    expected = sum(PER_MINUTE[_minute(m)] for m in minutes)
    end = f"2026-12-01T{until}"

    # `check --json`: the gate, and the regression path's current window.
    gate = ("--min-pass-rate", f"{SCORE}=0.1", "--min-samples", "1")
    code, report = _check(tmp_path, db, end, f"{seconds}s", *gate, "--regression")
    assert code == 0, report
    gate_n = report["gates"][0]["n"]
    check_regression_n = {c["n_recent"] for c in report["regression"]["comparisons"]}

    monitoring = MonitoringConfig.model_validate(
        {
            "alerts": [
                {"name": "rate", "score": SCORE, "min_pass_rate": 0.1, "window": seconds, "min_samples": 1},
                {"name": "drop", "score": SCORE, "regression": {"baseline": 86400}, "window": seconds,
                 "min_samples": 1},
            ]
        }
    )  # fmt: skip
    with DuckDBStore(db) as store:

        def rows(sql: str) -> list[dict[str, Any]]:
            return store.query(sql, 100_000, 30).records()

        # An alert's evaluation, by the evaluator `serve` runs, at the same moment.
        metrics = Metrics()
        book = AlertBook(store, monitoring, metrics)
        AlertEvaluator(store, monitoring, metrics, book, 30, clock=lambda: _minute(until)).evaluate_once()
        alert_n = {r["alert"]: r["n"] for r in store.read_alerts().to_pylist()}

        # The dashboard's overview and regressions (what /api/overview and /api/regressions answer).
        dashboard = DashboardData(rows)
        params = {"since": f"{seconds}s", "until": end}
        (summary,) = dashboard.overview(params)["scores"]
        dashboard_n = summary["n"] - summary["n_skipped"]
        comparisons = dashboard.regressions({**params, "baseline": "1d"})["comparisons"]
        dashboard_regression_n = {c["n_recent"] for c in comparisons}

    assert gate_n == expected
    assert check_regression_n == {expected}
    assert alert_n == {"rate": expected, "drop": expected}
    assert dashboard_n == expected
    assert dashboard_regression_n == {expected}


# --------------------------------------------------------------------------- shorter than a minute


def test_an_alert_window_shorter_than_a_minute_is_refused_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "ragpulse.yaml"
    alerts = [
        {"name": "fine", "score": SCORE, "min": 0.9, "window": 90},
        {"name": "never", "score": SCORE, "min": 0.9, "window": 8},
    ]
    path.write_text(json.dumps({"monitoring": {"alerts": alerts}}))
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    message = str(raised.value)
    assert "monitoring.alerts.1.window" in message and "must be at least 60 s, got 8 s" in message
    assert "alerts.0" not in message  # 90 s is fine: the whole minutes covering it


def test_check_since_shorter_than_a_minute_is_a_one_line_error(tmp_path: Path) -> None:
    db = tmp_path / "empty.duckdb"
    _seed(db, {_minute("11:59"): 1}, days_back=(0,))
    result = run_ragpulse("check", "--db", str(db), "--since", "30s", "--min", f"{SCORE}=0.5", cwd=tmp_path)
    assert result.returncode == 1
    assert "must be at least 60 s, got 30 s" in result.stderr and "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "60 s" in line]
    assert line.startswith("Error: Invalid value for '--since'")


def test_the_dashboard_refuses_a_window_shorter_than_a_minute() -> None:
    dashboard = DashboardData(lambda sql: [])
    with pytest.raises(BadParameter, match="since: must be at least 60 s"):
        dashboard.overview({"since": "45s"})
