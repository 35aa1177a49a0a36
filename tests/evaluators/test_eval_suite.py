"""`ragpulse eval SUITE`: the installed command in a subprocess, on suite files written per test.

Deterministic evaluators only here (no judge configured): the suite runner, the report, the exit
codes, JSON results, JUnit XML and the baseline comparison are what is under test.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import yaml

from tests.support.helpers import REPO, run_ragpulse
from tests.support.openai_stub import OpenAIStub

POLICY = "Items can be returned within 30 days of delivery for a full refund."


def run_eval(tmp_path: Path, suite: dict[str, Any] | str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "suite.yaml"
    path.write_text(suite if isinstance(suite, str) else yaml.safe_dump(suite), encoding="utf-8")
    return run_ragpulse("eval", str(path), *args, cwd=tmp_path)


def case(name: str, answer: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "question": "How long do I have to return an item for a refund?",
        "contexts": [{"id": "returns-policy", "text": POLICY, "score": 0.9}],
        "expected": "You can return items within 30 days of delivery for a full refund.",
        "expected_documents": ["returns-policy"],
        "answer": answer,
        **extra,
    }


EVALUATORS = [{"name": "retrieval.recall@5"}, {"name": "faithfulness"}]
GOOD = case("good", "You can return items within 30 days of delivery for a full refund.")
INVENTED = case("invented", "Returns within 30 days get a full refund, minus a $15 restocking fee.")


def test_passing_suite_exits_zero_and_writes_json_and_junit(tmp_path: Path) -> None:
    result = run_eval(
        tmp_path,
        {"name": "refunds", "evaluators": EVALUATORS, "cases": [GOOD]},
        "--json",
        "r.json",
        "--junit",
        "r.xml",
    )
    assert result.returncode == 0, result.stderr
    assert "1/1 case(s) passed" in result.stdout
    cases = json.loads((tmp_path / "r.json").read_text())
    assert [c["name"] for c in cases] == ["good"]
    assert [(s["name"], s["status"], s["value"]) for s in cases[0]["scores"]] == [
        ("retrieval.recall@5", "pass", 1.0),
        ("faithfulness", "pass", 1.0),
    ]
    suite = ElementTree.parse(tmp_path / "r.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("name") == "refunds"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("1", "0", "0")
    testcase = suite.find("testcase")
    assert testcase is not None and testcase.get("name") == "good"
    assert testcase.find("failure") is None and testcase.find("error") is None


def test_failing_case_exits_one_and_is_reported_first_with_evidence(tmp_path: Path) -> None:
    suite = {"name": "refunds", "evaluators": EVALUATORS, "cases": [GOOD, INVENTED]}
    result = run_eval(tmp_path, suite, "--junit", "r.xml")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "FAIL invented"
    assert "faithfulness: fail" in result.stdout and "missing numbers: 15" in result.stdout
    assert "1/2 case(s) passed, 1 failed" in result.stdout
    root = ElementTree.parse(tmp_path / "r.xml").getroot()
    failures = {tc.get("name"): tc.find("failure") for tc in root.iter("testcase")}
    assert failures["good"] is None
    failure = failures["invented"]
    assert failure is not None and failure.get("message") == "faithfulness fail"
    assert "restocking fee" in (failure.text or "")


def test_a_missing_reference_is_an_error_in_a_suite(tmp_path: Path) -> None:
    no_reference = case("no-reference", GOOD["answer"])
    del no_reference["expected_documents"]
    result = run_eval(
        tmp_path, {"evaluators": EVALUATORS, "cases": [no_reference]}, "--json", "r.json", "--junit", "r.xml"
    )
    assert result.returncode == 1
    recall = json.loads((tmp_path / "r.json").read_text())[0]["scores"][0]
    assert (recall["status"], recall["label"], recall["value"]) == ("error", "no_expected_ids", None)
    testcase = ElementTree.parse(tmp_path / "r.xml").getroot().find("testsuite/testcase")
    assert testcase is not None and testcase.find("error") is not None


def test_case_evaluators_override_the_suite_list(tmp_path: Path) -> None:
    only_recall = case("only-recall", INVENTED["answer"], evaluators=[{"name": "retrieval.hit@1"}])
    result = run_eval(tmp_path, {"evaluators": EVALUATORS, "cases": [only_recall]}, "--json", "r.json")
    assert result.returncode == 0, result.stdout
    scores = json.loads((tmp_path / "r.json").read_text())[0]["scores"]
    assert [s["name"] for s in scores] == ["retrieval.hit@1"]


def test_a_suite_without_evaluators_uses_the_configs_list(tmp_path: Path) -> None:
    (tmp_path / "ragpulse.yaml").write_text(
        "evaluators:\n  - {name: retrieval.hit@1}\n  - {name: faithfulness, min: 0.5}\n", encoding="utf-8"
    )
    result = run_eval(tmp_path, {"cases": [INVENTED]}, "--json", "r.json")
    assert result.returncode == 1, result.stdout + result.stderr  # the invented fee is unsupported
    scores = json.loads((tmp_path / "r.json").read_text())[0]["scores"]
    assert [(s["name"], s["threshold"]) for s in scores] == [("retrieval.hit@1", 1.0), ("faithfulness", 0.5)]
    # Without a config, the default set runs.
    (tmp_path / "ragpulse.yaml").unlink()
    run_eval(tmp_path, {"cases": [INVENTED]}, "--json", "d.json")
    defaults = [s["name"] for s in json.loads((tmp_path / "d.json").read_text())[0]["scores"]]
    assert "retrieval.ndcg@5" in defaults and len(defaults) > 2


def test_a_bad_evaluator_in_the_config_is_refused_with_its_key(tmp_path: Path) -> None:
    (tmp_path / "ragpulse.yaml").write_text("evaluators:\n  - {name: no_such_evaluator}\n", encoding="utf-8")
    result = run_eval(tmp_path, {"cases": [GOOD]})
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "evaluators[0].name" in result.stderr and "no_such_evaluator" in result.stderr


def test_baseline_flags_per_case_per_metric_regressions(tmp_path: Path) -> None:
    first = run_eval(
        tmp_path,
        {"evaluators": EVALUATORS, "cases": [GOOD, case("other", GOOD["answer"])]},
        "--json",
        "base.json",
    )
    assert first.returncode == 0
    worse = case("good", INVENTED["answer"])
    result = run_eval(
        tmp_path,
        {"evaluators": EVALUATORS, "cases": [worse, case("other", GOOD["answer"])]},
        "--baseline",
        "base.json",
    )
    assert result.returncode == 1
    assert "1 regression(s)" in result.stdout
    assert "good / faithfulness: was pass, now fail" in result.stdout
    assert "other /" not in result.stdout


def test_bad_suites_give_one_line_naming_the_key(tmp_path: Path) -> None:
    unknown_key = {"cases": [{**GOOD, "answr": "typo"}]}
    result = run_eval(tmp_path, unknown_key)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "cases.0.answr" in result.stderr
    unknown_evaluator = {"evaluators": [{"name": "faithfullness"}], "cases": [GOOD]}
    result = run_eval(tmp_path, unknown_evaluator)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "evaluators[0].name: unknown evaluator 'faithfullness'" in result.stderr
    result = run_eval(tmp_path, "cases: [unclosed")
    assert result.returncode != 0 and "not valid YAML" in result.stderr
    result = run_eval(tmp_path, {"cases": [GOOD, GOOD]})
    assert result.returncode != 0 and "duplicate case name 'good'" in result.stderr
    result = run_eval(tmp_path, {"cases": [GOOD]}, "--baseline", "missing.json")
    assert result.returncode != 0 and "cannot read baseline" in result.stderr


def test_the_example_suite_runs(tmp_path: Path) -> None:
    result = run_ragpulse("eval", str(REPO / "examples" / "suites" / "refunds.yaml"), cwd=tmp_path)
    # The example suite holds one deliberately hallucinated answer, so it fails on purpose.
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == "FAIL invented-restocking-fee"


def test_snapshot_lists_changed_cases_without_failing_and_update_accepts_them(tmp_path: Path) -> None:
    two_docs = [
        {"id": "returns-policy", "text": POLICY},
        {"id": "shipping", "text": "Shipping takes 3 days."},
    ]
    stable = case("stable", GOOD["answer"], contexts=two_docs)
    moving = case("moving", GOOD["answer"], contexts=two_docs)
    suite = {"evaluators": [{"name": "retrieval.hit@5"}], "cases": [stable, moving]}
    created = run_eval(tmp_path, suite, "--snapshot", "snap.json")
    assert created.returncode == 0 and "created with 2 case(s)" in created.stdout
    assert json.loads((tmp_path / "snap.json").read_text())["moving"]["retrieved_ids"] == [
        "returns-policy",
        "shipping",
    ]

    # Answer reworded and one of two documents replaced: similarity < 0.9, Jaccard 1/3 < 0.8.
    moved = case(
        "moving",
        "Refunds are possible for a month after the parcel arrives.",
        contexts=[
            {"id": "returns-policy", "text": POLICY},
            {"id": "warranty", "text": "Two years of warranty."},
        ],
    )
    result = run_eval(tmp_path, {**suite, "cases": [stable, moved]}, "--snapshot", "snap.json")
    assert result.returncode == 0, result.stdout  # listed for review, never a failure
    assert "1 changed case(s) to review" in result.stdout
    line = next(li for li in result.stdout.splitlines() if li.strip().startswith("moving:"))
    assert "answer similarity" in line and "retrieval overlap 0.33 < 0.8" in line
    assert "stable:" not in result.stdout

    # A looser overlap threshold accepts the retrieval change; only the answer is listed.
    loose = run_eval(
        tmp_path, {**suite, "cases": [stable, moved]}, "--snapshot", "snap.json", "--min-overlap", "0.3"
    )
    assert "retrieval overlap" not in loose.stdout and "answer similarity" in loose.stdout

    updated = run_eval(
        tmp_path, {**suite, "cases": [stable, moved]}, "--snapshot", "snap.json", "--update-snapshot"
    )
    assert "updated with 2 case(s)" in updated.stdout
    again = run_eval(tmp_path, {**suite, "cases": [stable, moved]}, "--snapshot", "snap.json")
    assert "0 changed case(s) to review" in again.stdout


def test_snapshot_answer_similarity_by_an_embedding_model(tmp_path: Path) -> None:
    stable = case("stable", GOOD["answer"])
    suite = {"evaluators": [{"name": "retrieval.hit@5"}], "cases": [stable, case("moving", GOOD["answer"])]}
    assert run_eval(tmp_path, suite, "--snapshot", "snap.json").returncode == 0
    reworded = {
        **suite,
        "cases": [stable, case("moving", "Refunds are possible for a month after delivery.")],
    }
    # 64-dimensional hash vectors: the same text gives cosine 1, two different texts about 0.
    with OpenAIStub(embedding_dimensions=64) as stub:
        config = tmp_path / "ragpulse.yaml"
        config.write_text(yaml.safe_dump({"embeddings": {"model": "emb-m", "base_url": stub.base_url}}))
        result = run_eval(tmp_path, reworded, "--snapshot", "snap.json")
        requests = [r for r in stub.requests if r.path.endswith("/embeddings")]
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(answer similarity: embedding cosine, emb-m): 1 changed case(s) to review" in result.stdout
    assert "moving: answer similarity" in result.stdout and "stable:" not in result.stdout
    assert len(requests) == 1 and requests[0].json["model"] == "emb-m"
    assert sorted(requests[0].json["input"]) == sorted({GOOD["answer"], reworded["cases"][1]["answer"]})

    # An unreachable embedding endpoint is one clear error, not a silent lexical fallback.
    down = run_eval(tmp_path, reworded, "--snapshot", "snap.json", "--embedding-model", "emb-m")
    assert down.returncode == 1 and "Error: embedding model emb-m" in down.stderr


def test_embedding_similarity_batches_and_handles_empty_answers() -> None:
    from evaluators.suite import cosine, embedding_similarity

    vectors = {"a": [1.0, 0.0], "b": [0.6, 0.8], "c": [-1.0, 0.0]}
    calls: list[list[str]] = []

    def embed(texts: Any) -> list[list[float]]:
        calls.append(list(texts))
        return [vectors[t] for t in texts]

    similarity = embedding_similarity(embed)
    assert similarity([("a", "b"), ("a", "a"), ("a", "c"), ("", ""), ("a", " ")]) == [0.6, 1.0, 0.0, 1.0, 0.0]
    assert calls == [["a", "b", "c"]]  # one request, each text once, empty ones never sent
    assert cosine([0.0, 0.0], [1.0, 0.0]) == 0.0


def test_snapshot_measures() -> None:
    from evaluators.suite import answer_similarity, retrieval_overlap

    assert answer_similarity("Refunds within 30 days.", "refunds within 30 DAYS") == 1.0
    assert answer_similarity("a b c d", "a b x y") == 0.5
    assert answer_similarity("", "") == 1.0
    assert retrieval_overlap(["a", "b"], ["b", "c"]) == 1 / 3
    assert retrieval_overlap([], []) == 1.0


TRACE = "0af7651916cd43dd8448eb211c80319c"


def _span(span_id: str, parent: str | None, name: str, attributes: dict[str, str]) -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": TRACE,
        "spanId": span_id,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000500000000",
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
    }
    if parent:
        span["parentSpanId"] = parent
    return span


def captured_openinference_trace(path: Path, answer: str) -> None:
    """One OpenInference RAG trace (chain -> retriever, llm) as an OTLP/JSON capture line."""
    question = "How long do I have to return an item for a refund?"
    spans = [
        _span(
            "a1a1a1a1a1a1a1a1",
            None,
            "rag",
            {"openinference.span.kind": "CHAIN", "input.value": question, "output.value": answer},
        ),
        _span(
            "b2b2b2b2b2b2b2b2",
            "a1a1a1a1a1a1a1a1",
            "retrieve",
            {
                "openinference.span.kind": "RETRIEVER",
                "input.value": question,
                "retrieval.documents.0.document.id": "returns-policy",
                "retrieval.documents.0.document.content": POLICY,
                "retrieval.documents.1.document.id": "shipping",
                "retrieval.documents.1.document.content": "Standard shipping takes 3 to 5 business days.",
            },
        ),
        _span(
            "c3c3c3c3c3c3c3c3",
            "a1a1a1a1a1a1a1a1",
            "llm",
            {"openinference.span.kind": "LLM", "output.value": answer},
        ),
    ]
    request = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": spans}]}]}
    path.write_text(json.dumps(request) + "\n", encoding="utf-8")


def test_cases_can_point_at_captured_trace_files(tmp_path: Path) -> None:
    (tmp_path / "captures").mkdir()
    captured_openinference_trace(tmp_path / "captures" / "good.jsonl", GOOD["answer"])
    captured_openinference_trace(tmp_path / "captures" / "bad.jsonl", INVENTED["answer"])
    reference = {"expected_documents": ["shipping"], "expected": GOOD["expected"]}
    suite = {
        "evaluators": [{"name": "retrieval.mrr@5"}, {"name": "faithfulness"}],
        "cases": [
            {"name": "good", "trace": "captures/good.jsonl", **reference},
            {"name": "bad", "trace": "captures/bad.jsonl", "trace_id": TRACE, **reference},
        ],
    }
    result = run_eval(tmp_path, suite, "--json", "r.json")
    assert result.returncode == 1, result.stderr
    scores = {
        c["name"]: {s["name"]: s for s in c["scores"]} for c in json.loads((tmp_path / "r.json").read_text())
    }
    # The trace's documents are read in rank order: the expected `shipping` is at rank 2.
    assert scores["good"]["retrieval.mrr@5"]["value"] == 0.5
    assert scores["good"]["faithfulness"]["status"] == "pass"
    assert scores["bad"]["faithfulness"]["status"] == "fail"

    missing = run_eval(tmp_path, {"cases": [{"name": "x", "trace": "captures/nope.jsonl"}]})
    assert missing.returncode == 1 and "nope.jsonl" in missing.stderr and "Traceback" not in missing.stderr
    wrong_id = run_eval(
        tmp_path, {"cases": [{"name": "x", "trace": "captures/good.jsonl", "trace_id": "ab" * 16}]}
    )
    assert wrong_id.returncode == 1 and "no trace" in wrong_id.stderr


def test_model_generates_answers_from_the_fixed_contexts(tmp_path: Path) -> None:
    from tests.support.openai_stub import OpenAIStub, RecordedRequest

    second_question = "And how long is the return window, in days?"

    def generate(request: RecordedRequest) -> str:
        # Cases are generated at once, in any order: answer by the question asked.
        if second_question in request.json["messages"][1]["content"]:
            return "You can return items within 60 days, and shipping is free."
        return "You can return items within 30 days of delivery for a full refund."

    with OpenAIStub(responder=generate) as stub:
        suite = {
            "model": {"model": "gen-model", "base_url": stub.base_url},
            "evaluators": [{"name": "faithfulness"}],
            "cases": [
                {k: v for k, v in GOOD.items() if k != "answer"},
                {
                    **{k: v for k, v in GOOD.items() if k != "answer"},
                    "name": "second",
                    "question": second_question,
                },
            ],
        }
        env_key = os.environ.get("OPENAI_API_KEY")
        os.environ["OPENAI_API_KEY"] = "test"
        try:
            result = run_eval(tmp_path, suite, "--json", "r.json")
        finally:
            if env_key is None:
                del os.environ["OPENAI_API_KEY"]
            else:
                os.environ["OPENAI_API_KEY"] = env_key
        sent = [r.json for r in stub.requests]
    assert result.returncode == 1, result.stderr
    assert [r["model"] for r in sent] == ["gen-model", "gen-model"]
    users = [r["messages"][1]["content"] for r in sent]
    assert all(POLICY in user for user in users)
    assert any(GOOD["question"] in user for user in users) and any(second_question in user for user in users)
    statuses = [c["scores"][0]["status"] for c in json.loads((tmp_path / "r.json").read_text())]
    assert statuses == ["pass", "fail"]  # the second generated answer invents 60 days

    no_answer = run_eval(tmp_path, {"cases": [{k: v for k, v in GOOD.items() if k != "answer"}]})
    assert no_answer.returncode == 1 and "no `answer`, and the suite has no `model:`" in no_answer.stderr
