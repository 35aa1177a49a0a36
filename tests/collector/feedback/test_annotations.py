"""`POST /api/annotations` and `GET /api/agreement`, on a service whose judge scored the example
app's 24 traces (a test judge that passes everything), and `ragpulse agreement` on the same file.

Real parts: the service on loopback ports, the OpenAI-protocol stub as the judge, HTTP requests, and
the `ragpulse` command line through the running server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from collector.feedback.agreement_stats import Confusion, cohen_kappa, mean_absolute_error, spearman
from collector.service import Service
from tests.support.helpers import run_ragpulse, sql


def annotate(svc: Service, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{svc.http_url}/api/annotations", json=body, timeout=30)


def agreement(svc: Service, **params: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{svc.http_url}/api/agreement", params=params, timeout=30)
    assert answer.status_code == 200, answer.text
    evaluators: list[dict[str, Any]] = answer.json()["evaluators"]
    return evaluators


def judged(svc: Service, name: str) -> list[dict[str, Any]]:
    return sql(
        svc,
        "SELECT trace_id, span_id, status, value, judge_model, prompt_version FROM scores "
        f"WHERE name = '{name}' AND evaluator = 'judge' ORDER BY trace_id",
    )


def test_verdicts_copy_the_score_they_judge_and_agreement_counts_the_random_sample(
    judged_shop: Service, tmp_path: Path
) -> None:
    scores = judged(judged_shop, "context_relevance")
    assert len(scores) == 24 and {s["status"] for s in scores} <= {"pass", "fail"}
    # People disagree with the judge here and there in the random sample.
    humans = ["fail" if i % 3 == 0 else "pass" for i in range(18)]
    values = [0.1 * (i % 10) for i in range(18)]
    for score, human, value in zip(scores, humans, values, strict=False):
        body = {
            "trace_id": score["trace_id"],
            "name": "context_relevance",
            "human_status": human,
            "human_value": value,
            "author": "ana",
            "queue": "random",
        }
        answer = annotate(judged_shop, body)
        assert answer.status_code == 200, answer.text
        stored = answer.json()
        assert (stored["score_status"], stored["score_value"], stored["score_span_id"]) == (
            score["status"],
            score["value"],
            score["span_id"],
        )
        assert (stored["judge_model"], stored["prompt_version"]) == ("judge-test", score["prompt_version"])
    # Verdicts on traces opened by hand: kept, but out of the estimate.
    for score in scores[18:]:
        assert (
            annotate(
                judged_shop,
                {
                    "trace_id": score["trace_id"],
                    "name": "context_relevance",
                    "human_status": "fail",
                    "author": "ana",
                },
            ).status_code
            == 200
        )

    [row] = [e for e in agreement(judged_shop) if e["name"] == "context_relevance"]

    confusion = Confusion.of([(score["status"], human) for score, human in zip(scores, humans, strict=False)])
    expected = cohen_kappa(confusion)
    assert row["confusion"] == vars(confusion)
    assert (row["n"], row["agreement"], row["n_other"]) == (18, expected.agreement, 6)
    assert (row["kappa"], row["kappa_low"], row["kappa_high"]) == (
        expected.kappa,
        expected.low,
        expected.high,
    )
    # This test judge passes every document: it agrees with people no better than chance, however
    # often it happens to agree.
    assert row["kappa"] == 0.0 and row["agreement"] == 12 / 18
    assert (row["model"], row["prompt_version"]) == ("judge-test", scores[0]["prompt_version"])
    judge_values = [s["value"] for s in scores[:18]]
    assert row["n_values"] == 18
    assert row["mae"] == pytest.approx(mean_absolute_error(judge_values, values))
    rho = spearman(judge_values, values)
    assert (row["spearman"] is None) if rho is None else abs(row["spearman"] - rho) < 1e-9

    everything = next(e for e in agreement(judged_shop, sample="all") if e["name"] == "context_relevance")
    assert everything["n"] == 24 and everything["n_other"] == 0
    assert sum(everything["confusion"].values()) == 24

    # The command line reads the same, through the running server.
    result = run_ragpulse("agreement", "--server", judged_shop.http_url, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    from_cli = [e for e in orjson.loads(result.stdout)["evaluators"] if e["name"] == "context_relevance"]
    # DuckDB sums in parallel: a correlation or a mean may differ in its last bits between two reads.
    floats = ("spearman", "mae")
    [cli] = from_cli
    assert {k: v for k, v in cli.items() if k not in floats} == {
        k: v for k, v in row.items() if k not in floats
    }
    for k in floats:
        assert cli[k] is None if row[k] is None else cli[k] == pytest.approx(row[k], rel=1e-12), k
    table = run_ragpulse("agreement", "--server", judged_shop.http_url, cwd=tmp_path)
    assert "context_relevance" in table.stdout and "judge-test" in table.stdout


def test_a_second_verdict_of_the_same_author_replaces_the_first(judged_shop: Service) -> None:
    [score, *_] = judged(judged_shop, "faithfulness")
    for status in ("fail", "pass"):
        body = {"trace_id": score["trace_id"], "name": "faithfulness", "human_status": status, "author": "bo"}
        assert annotate(judged_shop, body).status_code == 200
    body = {"trace_id": score["trace_id"], "name": "faithfulness", "human_status": "fail", "author": "cy"}
    assert annotate(judged_shop, body).status_code == 200
    rows = sql(
        judged_shop,
        f"SELECT author, human_status FROM annotations WHERE trace_id = '{score['trace_id']}' "
        "AND name = 'faithfulness' ORDER BY author",
    )
    assert rows == [{"author": "bo", "human_status": "pass"}, {"author": "cy", "human_status": "fail"}]


def test_verdicts_on_no_score_or_with_bad_fields_are_refused(judged_shop: Service) -> None:
    [score, *_] = judged(judged_shop, "faithfulness")
    missing = annotate(judged_shop, {"trace_id": "ab" * 16, "name": "faithfulness", "human_status": "pass"})
    assert missing.status_code == 404 and "has no score faithfulness" in missing.json()["error"]
    cases = [
        ({"trace_id": score["trace_id"], "name": "faithfulness", "human_status": "maybe"}, "human_status:"),
        (
            {"trace_id": score["trace_id"], "name": "faithfulness", "human_status": "pass", "stars": 3},
            "stars: unknown field",
        ),
        (
            {
                "trace_id": score["trace_id"],
                "name": "faithfulness",
                "human_status": "pass",
                "claims": [{"index": -1, "ok": True}],
            },
            "claims.0.index",
        ),
        (
            {"trace_id": score["trace_id"], "name": "faithfulness", "human_status": "pass", "queue": "mine"},
            "queue:",
        ),
    ]
    for body, message in cases:
        answer = annotate(judged_shop, body)
        assert answer.status_code == 400 and message in answer.json()["error"], (body, answer.text)
    bad_window = httpx.get(f"{judged_shop.http_url}/api/agreement", params={"since": "soon"}, timeout=10)
    assert bad_window.status_code == 400 and "since" in bad_window.json()["error"]
    bad_sample = httpx.get(f"{judged_shop.http_url}/api/agreement", params={"sample": "some"}, timeout=10)
    assert bad_sample.status_code == 400


def test_check_gates_on_the_agreement_of_the_current_judge(judged_shop: Service, tmp_path: Path) -> None:
    # A deterministic evaluator that people agree with on every verdict: kappa 1.
    hits = sql(
        judged_shop,
        "SELECT trace_id, status FROM scores WHERE name = 'retrieval.hit@5' ORDER BY trace_id",
    )
    assert {h["status"] for h in hits} == {"pass", "fail"}
    for hit in hits:
        body = {"trace_id": hit["trace_id"], "name": "retrieval.hit@5", "human_status": hit["status"]}
        assert annotate(judged_shop, {**body, "author": "dee", "queue": "random"}).status_code == 200

    def check(*gates: str) -> tuple[int, dict[str, Any]]:
        result = run_ragpulse(
            "check", "--server", judged_shop.http_url, "--min-samples", "10", *gates, "--json", cwd=tmp_path
        )
        return result.returncode, orjson.loads(result.stdout)

    code, found = check("--min-agreement", "retrieval.hit@5=0.8")
    assert code == 0 and found["status"] == "pass"
    [gate] = found["agreement"]
    assert (gate["status"], gate["kappa"], gate["n"], gate["model"]) == ("pass", 1.0, 24, None)

    # Beside a gate on the scores; and a judge that agrees by chance only fails the check.
    for i, score in enumerate(judged(judged_shop, "context_precision")[:12]):
        human = "fail" if i % 3 == 0 else "pass"
        body = {"trace_id": score["trace_id"], "name": "context_precision", "human_status": human}
        assert annotate(judged_shop, {**body, "author": "dee", "queue": "random"}).status_code == 200
    code, found = check("--min", "retrieval.hit@5=0", "--min-agreement", "context_precision=0.2")
    assert code == 1 and found["status"] == "fail" and found["gates"][0]["status"] == "pass"
    assert [g["status"] for g in found["agreement"]] == ["fail"]

    # Too few verdicts in the sample to decide.
    code, found = check("--min-agreement", "answer_correctness=0.5")
    assert code == 2 and found["agreement"][0]["status"] == "insufficient"

    bad = run_ragpulse("check", "--server", judged_shop.http_url, "--min-agreement", "faith", cwd=tmp_path)
    assert bad.returncode == 1 and "--min-agreement" in bad.stderr
    table = run_ragpulse(
        "check", "--server", judged_shop.http_url, "--min-agreement", "retrieval.hit@5=0.8", cwd=tmp_path
    )
    assert table.returncode == 0 and "retrieval.hit@5 kappa >= 0.8" in table.stdout
