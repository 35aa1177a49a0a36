"""`ragpulse demo`: the real command end to end, and its guard around the database file."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from collector.demo import DemoError, Metric, expected_documents_found, prepare_database, summary_table
from collector.shop_assistant import CONVENTIONS, MODES, load_cases
from collector.shop_assistant.llm import NOT_FOUND
from collector.shop_assistant.text import sentences
from tests.support.helpers import (
    RAGPULSE,
    clean_env,
    file_execute,
    file_rows,
    free_port,
    run_ragpulse,
    wait_for,
)

CASES = load_cases()


def _demo(tmp_path: Path, db: Path) -> subprocess.CompletedProcess[str]:
    return run_ragpulse(
        "demo",
        "--db",
        str(db),
        "--timeout",
        "60",
        cwd=tmp_path,
        env={"PATH": str(Path(sys.executable).parent), "COLUMNS": "120", "HOME": str(tmp_path)},
        timeout=180,
    )


PER_TRACE = """
WITH t AS (
    SELECT tr.trace_id, tr.convention, tr.case_id, tr.answer,
           CAST(tr.expected_documents AS VARCHAR[]) AS expected,
           s.attributes->>'app.mode' AS mode
    FROM traces tr JOIN spans s ON s.trace_id = tr.trace_id AND s.span_id = tr.root_span_id
)
SELECT t.*,
       (SELECT list(kind ORDER BY position) FROM steps st WHERE st.trace_id = t.trace_id) AS kinds,
       (SELECT list(doc_id ORDER BY rank) FROM documents d
         WHERE d.trace_id = t.trace_id AND d.stage = 'retrieved') AS doc_ids,
       (SELECT list(content) FROM documents d WHERE d.trace_id = t.trace_id) AS contents
FROM t
"""


def test_demo_runs_the_three_modes_end_to_end(tmp_path: Path) -> None:
    db = tmp_path / "demo.duckdb"
    done = _demo(tmp_path, db)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for mode in MODES:
        assert mode in out
    assert "expected documents retrieved" in out
    # `ragpulse` on PATH is the program run: the commands to try next write it bare.
    assert any(line.startswith('ragpulse sql "') for line in out.splitlines()) and f"--db {db}" in out
    assert "traces agree on every line" in out

    traces = file_rows(db, PER_TRACE)
    assert len(traces) == len(MODES) * len(CONVENTIONS) * len(CASES)
    by_mode: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for trace in traces:
        by_mode[trace["mode"]].append(trace)
    for mode, rows in by_mode.items():
        assert {r["convention"] for r in rows} == set(CONVENTIONS), mode
        assert sorted(r["case_id"] for r in rows) == sorted([c.id for c in CASES] * len(CONVENTIONS))
        for row in rows:
            # Expected documents come from the golden cases the demo loaded (matched by case id).
            assert row["expected"], row
            assert [k for k in row["kinds"] if k != "chain"] == ["retrieval", "llm"], row
            assert len(row["doc_ids"]) == 3 and row["answer"], row
            found = set(row["expected"]) & set(row["doc_ids"])
            if mode == "degraded":
                assert not found, row
            else:
                assert found == set(row["expected"]), row
    # Answers only repeat their documents (or say they found nothing); hallucinated ones add one
    # sentence none of the documents has.
    for mode, rows in by_mode.items():
        for row in rows:
            claims = [s for s in sentences(row["answer"]) if s != NOT_FOUND]
            unsupported = [s for s in claims if not any(s in c for c in row["contents"])]
            assert len(unsupported) == (1 if mode == "hallucinate" else 0), row
    # The summary agrees with the database: 0 of the expected documents in degraded mode, counted
    # over the mode's traces of both conventions (as its `traces` line).
    expected_total = len(CONVENTIONS) * sum(len(c.expected_documents) for c in CASES)
    assert f"0/{expected_total}" in out and f"{expected_total}/{expected_total}" in out
    # The deterministic scores tell the modes apart: degraded retrieval finds nothing expected,
    # hallucinated answers are not fully supported while healthy and degraded ones are.
    scores = _score_cells(out)
    assert scores["retrieval.recall@5 (mean)"] == {"healthy": 1.0, "degraded": 0.0, "hallucinate": 1.0}
    faithfulness = scores["faithfulness (mean)"]
    assert faithfulness["healthy"] == faithfulness["degraded"] == 1.0
    assert faithfulness["hallucinate"] < 1.0
    assert scores["context_recall (mean)"]["degraded"] == 0.0 < scores["context_recall (mean)"]["healthy"]


def _score_cells(out: str) -> dict[str, dict[str, float]]:
    """The `... (mean)` lines of the summary table: label -> mode -> value (both conventions agree)."""
    cells: dict[str, dict[str, float]] = {}
    for line in out.splitlines():
        parts = [p.strip() for p in line.strip().strip("│").split("│")]
        if len(parts) == 1 + len(MODES) and parts[0].endswith("(mean)"):
            cells[parts[0]] = {mode: float(value) for mode, value in zip(MODES, parts[1:], strict=True)}
    return cells


def test_demo_rerun_replaces_its_previous_database(tmp_path: Path) -> None:
    db = tmp_path / "again.duckdb"
    first = _demo(tmp_path, db)
    assert first.returncode == 0, first.stderr
    second = _demo(tmp_path, db)
    assert second.returncode == 0, second.stderr
    sent = len(MODES) * len(CONVENTIONS) * len(CASES)
    rows = file_rows(db, "SELECT count(*) AS traces, count(DISTINCT trace_id) AS ids FROM traces")
    assert rows == [{"traces": sent, "ids": sent}]
    assert file_rows(db, "SELECT count(*) AS n FROM spans") == [{"n": 3 * sent}]


def _one_span_file(db: Path, service_name: str) -> None:
    """A database file holding one span of `service_name` in a bare `spans` table."""
    file_execute(
        db,
        "CREATE TABLE spans (trace_id VARCHAR, service_name VARCHAR)",
        f"INSERT INTO spans VALUES ('ab', '{service_name}')",
    )


def test_demo_refuses_to_delete_a_database_it_did_not_write(tmp_path: Path) -> None:
    db = tmp_path / "production.duckdb"
    _one_span_file(db, "checkout")
    done = _demo(tmp_path, db)
    assert done.returncode != 0
    assert "did not write" in done.stderr and "Traceback" not in done.stderr
    assert file_rows(db, "SELECT service_name FROM spans") == [{"service_name": "checkout"}]


def test_prepare_database_refuses_a_file_that_is_not_duckdb(tmp_path: Path) -> None:
    notes = tmp_path / "notes.duckdb"
    notes.write_text("my notes\n")
    with pytest.raises(DemoError, match="not a ragpulse database"):
        prepare_database(notes)
    assert notes.read_text() == "my notes\n"


def test_prepare_database_removes_a_previous_demo_file(tmp_path: Path) -> None:
    db = tmp_path / "old-demo.duckdb"
    _one_span_file(db, "shop-assistant")
    prepare_database(db)
    assert not db.exists()
    prepare_database(db)  # nothing there: nothing to do


def test_summary_cells_compare_conventions_and_enrichers_add_lines() -> None:
    rows = [
        {"mode": "healthy", "convention": "ragpulse", "traces": 2, "avg_steps": 3.0, "ms": 4.0},
        {"mode": "healthy", "convention": "openinference", "traces": 2, "avg_steps": 2.0, "ms": 6.0},
    ]
    metrics = [
        Metric("traces", "traces", combine="sum"),
        Metric("avg_steps", "steps", lambda v: f"{v:.1f}"),
        Metric("ms", "ms", lambda v: f"{v:.1f}", "mean"),
    ]

    def query(sql: str) -> list[dict[str, Any]]:
        return [
            {"mode": "healthy", "convention": "ragpulse", "expected": 4, "found": 3},
            {"mode": "healthy", "convention": "openinference", "expected": 4, "found": 4},
        ]

    metrics += expected_documents_found(query, rows)
    assert rows[0]["expected_found"] == (3, 4) and rows[1]["expected_found"] == (4, 4)
    table = summary_table(rows, metrics, ["healthy"], ["ragpulse", "openinference"], "t")
    cells = list(table.columns[1].cells)
    # Documents found over the mode's traces (both conventions), as `traces` counts them.
    assert cells == ["4", "3.0 / 2.0", "5.0", "7/8"]
    assert "disagree" in str(table.caption)


def test_demo_serve_keeps_serving_the_dashboard_until_interrupted(tmp_path: Path) -> None:
    http_port, grpc_port = free_port(), free_port()
    # The gRPC port from the variable, the HTTP one from the option (both ways are documented).
    env = clean_env(COLUMNS="120", RAGPULSE_RECEIVERS__GRPC_PORT=str(grpc_port))
    db = str(tmp_path / "demo.duckdb")
    command = [str(RAGPULSE), "demo", "--db", db, "--serve", "--http-port", str(http_port)]
    demo = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{http_port}"
    try:
        wait_for(lambda: _answers(f"{url}/api/overview?since=1h"), timeout=120, what="the demo's dashboard")
        # Read once right after start, the count was one trace short on a loaded CI machine (71 of
        # 72, once in three runs of the same code; the cause is not known): wait for every trace.
        every = len(CASES) * len(MODES) * len(CONVENTIONS)
        wait_for(
            lambda: httpx.get(f"{url}/api/overview", params={"since": "1h"}, timeout=10).json()["services"],
            lambda services: sum(s["traces"] for s in services) == every,
            timeout=30,
            what=f"the dashboard's count of the demo's {every} traces",
        )
        assert httpx.get(f"{url}/", timeout=10).status_code == 200
    finally:
        demo.send_signal(signal.SIGINT)
        output = demo.communicate(timeout=60)[0].decode()
    assert demo.returncode == 0, output
    assert f"Dashboard: http://127.0.0.1:{http_port}/" in output


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_demo_serve_refuses_a_taken_port_before_the_demo_runs(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        started = time.monotonic()
        db = tmp_path / "demo.duckdb"
        result = run_ragpulse(
            "demo",
            "--db",
            str(db),
            "--serve",
            "--grpc-port",
            str(busy),
            "--http-port",
            str(free_port()),
            cwd=tmp_path,
        )
    assert result.returncode == 1, result.stdout + result.stderr
    assert time.monotonic() - started < 30  # the whole demo takes over a minute
    assert "sent" not in result.stdout and not db.exists()  # nothing ran
    (line,) = result.stderr.strip().splitlines()
    assert f"--serve cannot listen for OTLP/gRPC on 127.0.0.1:{busy}" in line
    assert "--grpc-port" in line and "RAGPULSE_RECEIVERS__GRPC_PORT" in line


def test_demo_port_options_only_with_serve(tmp_path: Path) -> None:
    result = run_ragpulse("demo", "--db", str(tmp_path / "d.duckdb"), "--http-port", "9999", cwd=tmp_path)
    assert result.returncode == 1
    assert "--http-port: only with --serve" in result.stderr
    assert not (tmp_path / "d.duckdb").exists()
