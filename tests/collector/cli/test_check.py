"""`ragpulse check` as a user runs it: gates on seeded stores (pass, fail, too little data), the same
answer through `--server` and `--db`, and a regression caused by the example app's degraded mode,
detected end to end through `serve`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from collector.shop_assistant.runner import run as run_app
from collector.store.duckdb_store import DuckDBStore
from tests.support.helpers import ServeProcess, run_ragpulse, seed_scores, sql, wait_for

UNTIL = "2026-12-01T12:00:00"
END = datetime(2026, 12, 1, 12, 0)


def _seed(db: Path) -> None:
    """In the hour before END: 100 faithfulness scores averaging 0.9 (pass rate 0.9), 30 recall
    scores averaging 0.6, 5 answer_relevance scores, and 10 errors of faithfulness. A day earlier:
    more faithfulness, which the gates must not count."""
    buckets, names, values = [], [], []

    def add(name: str, vals: list[float | None], start: datetime) -> None:
        for i, value in enumerate(vals):
            buckets.append(start + timedelta(minutes=i % 60))
            names.append(name)
            values.append(value)

    hour = END - timedelta(hours=1)
    add("faithfulness", [1.0] * 90 + [0.0] * 10 + [None] * 10, hour)
    add("retrieval.recall@5", [0.6] * 30, hour)
    add("answer_relevance", [1.0] * 5, hour)
    add("faithfulness", [0.0] * 500, hour - timedelta(days=1))
    with DuckDBStore(db) as store:
        seed_scores(store, buckets, names, values)


def _check(tmp_path: Path, *args: str, until: str = UNTIL) -> tuple[int, dict]:
    result = run_ragpulse("check", "--until", until, "--json", *args, cwd=tmp_path)
    assert result.returncode in (0, 1, 2), result.stderr
    return result.returncode, json.loads(result.stdout)


@pytest.fixture
def seeded(tmp_path: Path) -> Path:
    db = tmp_path / "seeded.duckdb"
    _seed(db)
    return db


def test_gates_that_hold_exit_0_with_intervals(tmp_path: Path, seeded: Path) -> None:
    code, report = _check(
        tmp_path,
        "--db", str(seeded),
        "--min", "faithfulness=0.85",
        "--min-pass-rate", "faithfulness=0.8",
        "--max-error-rate", "0.1",
    )  # fmt: skip
    assert code == 0, report
    assert report["status"] == "pass"
    mean, pass_rate, errors = report["gates"]
    # Mean over the 100 valued scores; pass rate over the 110 that applied (errors never pass).
    assert (mean["value"], mean["n"]) == (pytest.approx(0.9), 100)
    assert mean["ci_low"] < 0.9 < mean["ci_high"]
    assert (pass_rate["value"], pass_rate["n"]) == (pytest.approx(90 / 110), 110)
    assert pass_rate["ci_low"] < 90 / 110 < pass_rate["ci_high"]
    # The error rate of every score together: 10 errors among 145 scores.
    assert (errors["value"], errors["n"], errors["score"]) == (pytest.approx(10 / 145), 145, None)
    assert report["window"] == {"start": "2026-12-01 11:00:00", "end": "2026-12-01 12:00:00"}


def test_a_failing_gate_exits_1_and_says_which(tmp_path: Path, seeded: Path) -> None:
    code, report = _check(
        tmp_path, "--db", str(seeded), "--min", "faithfulness=0.85", "--min", "retrieval.recall@5=0.8"
    )
    assert code == 1
    assert [g["status"] for g in report["gates"]] == ["pass", "fail"]
    assert report["gates"][1]["value"] == pytest.approx(0.6)
    # The table for people says the same.
    table = run_ragpulse(
        "check", "--db", str(seeded), "--until", UNTIL, "--min", "retrieval.recall@5=0.8", cwd=tmp_path
    )
    assert table.returncode == 1
    assert "retrieval.recall@5 mean >= 0.8" in table.stdout and "fail" in table.stdout


def test_too_little_data_exits_2_unless_a_gate_fails(tmp_path: Path, seeded: Path) -> None:
    code, report = _check(tmp_path, "--db", str(seeded), "--min", "answer_relevance=0.5")
    assert code == 2
    assert report["gates"][0]["status"] == "insufficient"
    assert "5 score(s) in the window, 20 needed" in report["gates"][0]["reason"]
    code, _ = _check(tmp_path, "--db", str(seeded), "--min", "answer_relevance=0.5", "--min-samples", "5")
    assert code == 0
    # A score never seen at all is too little data, not a pass.
    code, report = _check(tmp_path, "--db", str(seeded), "--min", "context_precision=0.5")
    assert (code, report["gates"][0]["n"]) == (2, 0)
    # A failing gate decides even when another lacks data.
    code, _ = _check(
        tmp_path, "--db", str(seeded), "--min", "answer_relevance=0.5", "--min", "faithfulness=0.95"
    )
    assert code == 1
    # The window moves with --until and --since: the day before holds only zeros.
    code, report = _check(
        tmp_path,
        "--db",
        str(seeded),
        "--since",
        "2h",
        "--min",
        "faithfulness=0.5",
        until="2026-11-30T12:00:00",
    )
    assert (code, report["gates"][0]["value"]) == (1, 0.0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--min", "faithfulness"], "expected NAME=VALUE"),
        (["--min", "faithfulness=high"], "not a number"),
        (["--min", "faithfulness=1.5"], "between 0 and 1"),
        (["--since", "soon", "--min", "faithfulness=0.5"], "not a duration"),
        (["--until", "yesterday", "--min", "faithfulness=0.5"], "not an ISO 8601 time"),
        ([], "nothing to check"),
        (["--regression", "--since", "2h", "--baseline", "1h"], "--baseline must be at least --since"),
        (["--since", "99999999999d", "--min", "faithfulness=0.5"], "outside the calendar"),
        # A dimension no config declared: said so, not the database's "column not found".
        (["--by", "category", "--min", "faithfulness=0.5"], "category is not a dimension this store keeps"),
        (["--slice", "tenant=a", "--min", "faithfulness=0.5"], "declare it in monitoring.dimensions"),
    ],
)
def test_mistakes_are_one_line_errors(tmp_path: Path, seeded: Path, args: list[str], message: str) -> None:
    result = run_ragpulse("check", "--db", str(seeded), *args, cwd=tmp_path)
    assert result.returncode == 1  # a bad option is an input error (2 is check's too little data)
    assert message in result.stderr
    assert "Traceback" not in result.stderr and "Binder Error" not in result.stderr


def test_server_and_file_give_the_same_answer(tmp_path: Path, seeded: Path) -> None:
    args = ["--min", "faithfulness=0.85", "--min-pass-rate", "retrieval.recall@5=0.5", "--regression"]
    from_file = _check(tmp_path, "--db", str(seeded), *args)
    server = ServeProcess(seeded, tmp_path / "serve.log")
    try:
        server.start()
        through_server = _check(tmp_path, "--server", server.http_url, *args)
        # With the file held by the server, `--db` finds the server by itself.
        through_file_name = _check(tmp_path, "--db", str(seeded), *args)
    finally:
        server.cleanup()
    assert through_server == from_file
    assert through_file_name == from_file
    # Faithfulness rose from the day before (all zeros): no regression; the others have no baseline.
    assert from_file[0] == 0
    comparisons = {(c["score"], c["metric"]): c["status"] for c in from_file[1]["regression"]["comparisons"]}
    assert comparisons[("faithfulness", "mean")] == "ok"
    assert comparisons[("retrieval.recall@5", "mean")] == "insufficient"


def test_degraded_deploy_is_flagged_against_the_pinned_good_version(
    tmp_path: Path, serve_process: ServeProcess
) -> None:
    """The example app's healthy traffic as version 1.0, then its degraded mode (wrong index) as 2.0:
    `check --regression --baseline-version 1.0` flags the retrieval scores, and healthy traffic of
    a version 1.1 is not flagged."""
    serve_process.start(decision_wait="0.2", poll_interval="0.05")
    endpoint = f"127.0.0.1:{serve_process.grpc_port}"
    for version, mode in (("1.0", "healthy"), ("1.1", "healthy"), ("2.0", "degraded")):
        for _ in range(2):
            report = run_app(endpoint, mode=mode, labels=True, latency=0, service_version=version)
            assert report.ok
    wait_for(
        lambda: (
            sql(serve_process, "SELECT count(*) AS n FROM traces WHERE scored_at IS NOT NULL")[0]["n"] == 72
        ),
        timeout=60,
    )

    def regression(version: str) -> tuple[int, dict]:
        return _check(
            tmp_path,
            "--server",
            serve_process.http_url,
            "--regression",
            "--baseline-version",
            "1.0",
            "--version",
            version,
            until=_now(),
        )

    code, report = regression("2.0")
    flagged = {
        (c["score"], c["metric"]) for c in report["regression"]["comparisons"] if c["status"] == "regressed"
    }
    assert code == 1, report
    assert ("retrieval.recall@5", "mean") in flagged
    assert report["regression"]["baseline"] == "service.version 1.0 (the window's service.version 2.0)"
    code, report = regression("1.1")
    assert code == 0, report
    assert not [c for c in report["regression"]["comparisons"] if c["status"] == "regressed"]


def _now() -> str:
    # A minute ahead, so that the scores of the current minute are inside the window.
    return (datetime.now(UTC) + timedelta(minutes=1)).replace(tzinfo=None).isoformat()


def test_a_regression_without_baseline_scores_says_so_in_one_line(tmp_path: Path, seeded: Path) -> None:
    """No score in the baseline window: one line (not a row per score saying `insufficient`), its
    times in minutes as the window's; with some scores there, the others are named on one line."""
    args = ["check", "--db", str(seeded), "--until", UNTIL, "--min", "faithfulness=0.5", "--regression"]
    empty = run_ragpulse(*args, "--baseline", "30d", cwd=tmp_path)
    assert (
        "regression: no scores in the baseline (2026-11-01 11:00 to 2026-11-01 12:00 UTC) to compare with"
        in empty.stdout
    )
    rows = [line for line in empty.stdout.splitlines() if not line.startswith("result:")]
    assert not any("insufficient" in line for line in rows)  # no row per score saying so
    partial = run_ragpulse(*args, cwd=tmp_path)
    assert "regression: against 2026-11-30 11:00 to 2026-11-30 12:00 UTC" in partial.stdout
    assert "no baseline scores (not compared): " in partial.stdout and "retrieval.recall@5" in partial.stdout
    assert ".000000" not in partial.stdout
