"""`GET /api/agreement?feedback=thumbs` and `ragpulse agreement --feedback thumbs`: the AUC of each
score against users' thumbs, end to end.

Real parts: a service on loopback ports, RAG requests sent with the real OpenTelemetry SDK and scored
by ragpulse's deterministic faithfulness, thumbs posted to `/api/feedback`, the scores read back
through `/api/sql`, and the `ragpulse` command line through the server and then on the file. The
expected AUC is computed here from those rows, by the rules of docs/feedback.md, with the pure
function (itself checked against hand-computed values in test_auc.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from collector.feedback.agreement_stats import delong_auc
from collector.service import BackgroundService
from tests.support.helpers import (
    emit_rag_request,
    fast_assembler,
    make_config,
    run_ragpulse,
    sdk_tracer_provider,
    sql,
    wait_for,
)

QUESTION = "Can I return opened headphones?"
DOCUMENT = "Opened headphones can be returned within 14 days."
# Answers the deterministic faithfulness scores 1, 0.5 and 0 (its share of supported sentences).
FAITHFUL = "Yes, within 14 days."
HALF = "Yes, within 14 days. The fee is 5 dollars."
UNFAITHFUL = "No, never. Call Sweden about the 50 dollar fee."

# (answer, the thumbs given in turn): a later thumbs on a trace replaces an earlier one, a `neutral`
# one is no verdict. Faithfulness predicts a thumbs down, not perfectly.
REQUESTS: list[tuple[str, list[str]]] = [
    (FAITHFUL, ["thumbs_up"]),
    (FAITHFUL, ["thumbs_up"]),
    (FAITHFUL, ["thumbs_down", "thumbs_up"]),
    (FAITHFUL, ["thumbs_down"]),
    (HALF, ["thumbs_up"]),
    (HALF, ["thumbs_down"]),
    (HALF, ["thumbs_up", "thumbs_down"]),
    (UNFAITHFUL, ["thumbs_down"]),
    (UNFAITHFUL, ["thumbs_down", "neutral"]),
    (UNFAITHFUL, ["thumbs_up"]),
    (UNFAITHFUL, ["neutral"]),
    (FAITHFUL, []),
]


def report(http_url: str, **params: str) -> httpx.Response:
    return httpx.get(f"{http_url}/api/agreement", params=params, timeout=30)


def expected_from_rows(http_url: str) -> dict[str, Any]:
    """The AUC of faithfulness against thumbs, from the stored rows: each trace's latest pass/fail
    thumbs, and the mean of its faithfulness values."""
    thumbs = sql(
        http_url,
        "SELECT trace_id, status, created_at FROM scores WHERE name = 'thumbs' AND evaluator = 'human'",
    )
    latest: dict[str, tuple[str, str]] = {}
    for row in thumbs:
        if row["status"] in ("pass", "fail") and row["created_at"] > latest.get(row["trace_id"], ("", ""))[0]:
            latest[row["trace_id"]] = (row["created_at"], row["status"])
    values: dict[str, list[float]] = {}
    for row in sql(
        http_url,
        "SELECT trace_id, value FROM scores WHERE name = 'faithfulness' AND evaluator = 'deterministic' "
        "AND status IN ('pass', 'fail') AND value IS NOT NULL",
    ):
        values.setdefault(row["trace_id"], []).append(row["value"])
    positive = [sum(v) / len(v) for t, v in values.items() if latest.get(t, ("", ""))[1] == "pass"]
    negative = [sum(v) / len(v) for t, v in values.items() if latest.get(t, ("", ""))[1] == "fail"]
    # The traces say what they should: faithfulness differs, and predicts a thumbs down, not perfectly.
    assert sorted(positive) == [0.0, 0.5, 1.0, 1.0, 1.0], (positive, negative)
    assert sorted(negative) == [0.0, 0.0, 0.5, 0.5, 1.0], (positive, negative)
    auc = delong_auc(positive, negative)
    return {
        "name": "faithfulness",
        "n_positive": auc.n_positive,
        "n_negative": auc.n_negative,
        "auc": auc.auc,
        "auc_low": auc.low,
        "auc_high": auc.high,
    }


def test_the_auc_of_faithfulness_against_thumbs_through_the_api_and_the_command_line(tmp_path: Path) -> None:
    config = make_config(tmp_path, assembler=fast_assembler())
    with BackgroundService(config) as svc:
        provider = sdk_tracer_provider(svc, "shop-bot")
        trace_ids = [
            emit_rag_request(provider.get_tracer("tests"), QUESTION, DOCUMENT, answer)
            for answer, _ in REQUESTS
        ]
        provider.shutdown()
        wait_for(
            lambda: sql(svc, "SELECT count(*) AS n FROM scores WHERE name = 'faithfulness'")[0]["n"],
            lambda n: n == len(REQUESTS),
            timeout=30,
            what="every trace scored",
        )
        # Thumbs one round at a time: a trace's second thumbs is given after its first.
        for round_ in range(2):
            items = [
                {"trace_id": trace_id, "name": "thumbs", "label": given[round_], "author": "user-1"}
                for trace_id, (_, given) in zip(trace_ids, REQUESTS, strict=True)
                if len(given) > round_
            ]
            answer = httpx.post(f"{svc.http_url}/api/feedback", json=items, timeout=30)
            assert answer.status_code == 200, answer.text
            assert answer.json()["attached"] == len(items)

        expected = expected_from_rows(svc.http_url)
        # By hand from those values: V10 of the positives 1, 1, 1, 0.5, 0 = 4.5/5 three times, 3/5 and
        # 1/5 (negatives below, ties one half): AUC = 3.5/5 = 0.7.
        assert expected["auc"] == pytest.approx(0.7)

        found = report(svc.http_url, feedback="thumbs")
        assert found.status_code == 200, found.text
        body = found.json()
        assert body["feedback"] == "thumbs" and set(body["window"]) == {"start", "end"}
        [faithfulness] = [s for s in body["scores"] if s["name"] == "faithfulness"]
        # Exact sums on both sides: the same numbers to the last bit.
        assert faithfulness == expected
        # By hand: S10 = var(.9, .9, .9, .6, .2) = .095, S01 = var(.9, .9, .7, .7, .3) = .06 (V01: the
        # share of positives above each negative), Var = .095/5 + .06/5 = .031, 0.7 ± 1.96 * 0.17607.
        assert faithfulness["auc_low"] == pytest.approx(0.7 - 1.959964 * 0.031**0.5, abs=1e-6)
        assert faithfulness["auc_high"] == 1.0  # 1.045, clipped
        names = [s["name"] for s in body["scores"]]
        # Only ragpulse's own scores with a value and a verdict, never the feedback itself.
        assert "thumbs" not in names and "context_relevance" in names and "retrieval.hit@5" not in names
        aucs = [s["auc"] for s in body["scores"]]
        assert aucs == sorted(aucs, reverse=True)
        # Another service's feedback: none.
        other = report(svc.http_url, feedback="thumbs", service="other-bot").json()
        assert other["scores"] == []
        assert report(svc.http_url, feedback=" ").status_code == 400

        through_server = run_ragpulse(
            "agreement", "--server", svc.http_url, "--feedback", "thumbs", "--json", cwd=tmp_path
        )
        assert through_server.returncode == 0, through_server.stderr
        assert orjson.loads(through_server.stdout)["scores"] == body["scores"]

    # The service is stopped: the command line reads the file itself.
    db = str(config.store.path)
    on_file = run_ragpulse("agreement", "--db", db, "--feedback", "thumbs", "--json", cwd=tmp_path)
    assert on_file.returncode == 0, on_file.stderr
    assert orjson.loads(on_file.stdout)["scores"] == body["scores"]
    table = run_ragpulse("agreement", "--db", db, "--feedback", "thumbs", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    [line] = [row for row in table.stdout.splitlines() if "faithfulness" in row]
    assert [cell for cell in line.split() if cell != "│"][:4] == ["faithfulness", "5", "5", "0.700"]
    assert f"{expected['auc_low']:.3f} to {expected['auc_high']:.3f}" in line
    empty = run_ragpulse("agreement", "--db", db, "--feedback", "", cwd=tmp_path)
    assert empty.returncode == 1 and "--feedback" in empty.stderr
