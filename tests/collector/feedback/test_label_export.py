"""`ragpulse datasets export --labels`: people's verdicts on judge scores, with the traces they were
given on, as a calibration file that `ragpulse calibrate` measures a judge on.

Real parts: a service on loopback ports whose judge is the OpenAI-protocol stub, RAG requests sent
through the OpenTelemetry SDK, verdicts posted to /api/annotations, and the installed `ragpulse`
(through the running server, then on the database file once the service is stopped).
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from collector.config import load_config
from collector.feedback.labelled import Label, calibration_set, consensus
from collector.service import BackgroundService
from evaluators.calibration import load_calibration
from evaluators.judge.fence import neutralize
from semconv.models import Document, RagTrace, Step
from tests.support.helpers import run_ragpulse, sql
from tests.support.labelling import (
    annotate,
    bad_answer,
    document,
    fenced_blocks,
    good_answer,
    learning_judge,
    question,
    send,
    write_config,
)
from tests.support.openai_stub import OpenAIStub

REDACT_JUDGE_INPUT = "redaction: {presets: [email], apply_to: [judge]}\n"


def test_labels_export_as_a_calibration_file_that_calibrate_measures_a_judge_on(tmp_path: Path) -> None:
    with OpenAIStub(responder=learning_judge) as stub:
        config = write_config(
            tmp_path / "ragpulse.yaml", tmp_path / "rp.duckdb", stub.base_url, REDACT_JUDGE_INPUT
        )
        with BackgroundService(load_config(config)) as svc:
            cases = [
                (question(i), document(i), good_answer(i) if i % 2 == 0 else bad_answer(i)) for i in range(6)
            ]
            # A person's e-mail in one question: stored as sent, redacted before the judge.
            cases[4] = (f"{question(4)} Mail ana@example.com", document(4), good_answer(4))
            t = send(svc, cases)
            annotate(svc, t[0], "pass")
            annotate(svc, t[1], "fail", comment="the restocking fee is invented")
            # Three people: two fail it (the majority), one passes it.
            annotate(svc, t[2], "fail", author="ana", queue="contested", comment="no")
            annotate(svc, t[2], "fail", author="bob", queue="contested")
            annotate(svc, t[2], "pass", author="cy", queue="random")
            # A tie: left out, and counted.
            annotate(svc, t[3], "pass", author="ana")
            annotate(svc, t[3], "fail", author="bob")
            annotate(svc, t[4], "pass", queue=None)  # opened by hand
            # t[5] is not labelled; t[0] gets two more verdicts, one each way: 2 to 1 for pass.
            annotate(svc, t[0], "fail", name="faithfulness", author="dee")
            annotate(svc, t[0], "pass", name="faithfulness", author="eve")
            [stored] = sql(svc, f"SELECT question FROM traces WHERE trace_id = '{t[4]}'")
            assert "ana@example.com" in stored["question"]

            server_file = tmp_path / "server.yaml"
            done = run_ragpulse(
                "datasets", "export", "--labels", str(server_file), "--config", str(config),
                "--server", svc.http_url, cwd=tmp_path,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert "wrote 4 case(s) with 4 verdict(s) (2 pass, 2 fail) from 10 label(s)" in done.stdout
            assert "left out: 1 tie(s), 0 trace(s) no longer stored, 0 without an answer" in done.stdout

        # The same export from the database file, with the service stopped.
        db_file = tmp_path / "db.yaml"
        done = run_ragpulse(
            "datasets", "export", "--labels", str(db_file), "--config", str(config),
            "--db", str(tmp_path / "rp.duckdb"), cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert db_file.read_text() == server_file.read_text()

        calibration = load_calibration(server_file)
        by_name = {case.name: case for case in calibration.cases}
        assert sorted(by_name) == sorted([t[0], t[1], t[2], t[4]])
        assert {name: case.verdicts for name, case in by_name.items()} == {
            t[0]: {"faithfulness": "pass"},  # ana, eve pass; dee fails: 2 to 1
            t[1]: {"faithfulness": "fail"},
            t[2]: {"faithfulness": "fail"},
            t[4]: {"faithfulness": "pass"},
        }
        assert by_name[t[0]].tags == ["human_label", "random"]
        assert by_name[t[2]].tags == ["human_label", "contested", "random"]
        assert by_name[t[4]].tags == ["human_label"]
        case = by_name[t[1]]
        assert (case.question, case.answer) == (question(1), bad_answer(1))
        assert [(c.id, c.text, c.score) for c in case.contexts] == [("crm-1", document(1), 0.9)]
        # The case holds what the judge was shown: the e-mail redacted.
        assert by_name[t[4]].question == f"{question(4)} Mail [EMAIL]"

        # The round trip: calibrate the (always-pass without examples) test judge on the file.
        report = tmp_path / "report.json"
        before = len(stub.requests)
        done = run_ragpulse(
            "calibrate", str(server_file), "--config", str(config), "--json", str(report), cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        rows = {r["mode"]: r for r in json.loads(report.read_text())["evaluators"]}
        assert set(rows) == {"answer", "claims"}
        for row in rows.values():
            assert (row["runs"], row["correct"], row["false_passes"], row["false_fails"]) == (4, 2, 2, 0)
            assert sorted(row["false_pass_cases"]) == sorted([t[1], t[2]])
        # It judged the exported texts: 1 pre-run check and 4 cases in each of 2 modes.
        judged = stub.requests[before:]
        assert len(judged) == 1 + 8
        answers = {fenced_blocks(r.json["messages"][-1]["content"])[0][1]["answer"] for r in judged[1:]}
        # (as the judge sees them: the injection's fence-like tag neutralised)
        assert answers == {good_answer(0), neutralize(bad_answer(1)), good_answer(2), good_answer(4)}


def test_export_and_align_with_nothing_labelled_write_nothing(tmp_path: Path) -> None:
    with OpenAIStub(responder=learning_judge) as stub:
        config = write_config(tmp_path / "ragpulse.yaml", tmp_path / "rp.duckdb", stub.base_url)
        with BackgroundService(load_config(config)) as svc:
            send(svc, [(question(1), document(1), good_answer(1))])
            out = tmp_path / "labels.yaml"
            done = run_ragpulse(
                "datasets", "export", "--labels", str(out), "--config", str(config), "--server", svc.http_url,
                cwd=tmp_path,
            )  # fmt: skip
            aligned = run_ragpulse(
                "align", "faithfulness", "--config", str(config), "--server", svc.http_url, cwd=tmp_path
            )
            exact = run_ragpulse(
                "align", "citation", "--config", str(config), "--server", svc.http_url, cwd=tmp_path
            )
    assert done.returncode == 1
    assert "no labelled trace to export (0 label(s) in the last 30d" in done.stderr
    assert not out.exists()
    assert aligned.returncode == 1 and "no labelled trace of faithfulness in the last 30d" in aligned.stderr
    assert exact.returncode == 1 and "citation has no judge variant" in exact.stderr


def _label(
    trace_id: str, status: str, author: str, comment: str | None = None, name: str = "faithfulness"
) -> Label:
    return Label(
        trace_id, name, author, status, comment=comment, created_at=f"2026-01-01T00:00:0{len(author)}"
    )  # type: ignore[arg-type]


def _trace(trace_id: str, answer: str | None) -> RagTrace:
    doc = Document(rank=1, id="d1", content="Refunds take 30 days.")
    steps = [
        Step(span_id="r", position=0, kind="retrieval", documents=[doc]),
        Step(span_id="l", position=1, kind="llm", output=answer),
    ]
    return RagTrace(trace_id=trace_id, question="How long?", answer=answer, steps=steps)


def test_majority_ties_missing_traces_and_traces_without_an_answer() -> None:
    labels = [
        _label("a", "fail", "x", "wrong fee"),
        _label("a", "fail", "yy", "wrong fee"),
        _label("a", "pass", "zzz", "fine"),
        _label("b", "pass", "x"),
        _label("b", "fail", "yy"),
        _label("c", "pass", "x"),
        _label("d", "fail", "x"),
        _label("a", "pass", "x", name="context_relevance"),
    ]
    decided, ties = consensus(labels)
    assert ties == 1
    assert [(c.trace_id, c.name, c.verdict) for c in decided] == [
        ("a", "context_relevance", "pass"),
        ("a", "faithfulness", "fail"),
        ("c", "faithfulness", "pass"),
        ("d", "faithfulness", "fail"),
    ]
    assert decided[1].reason == "wrong fee"  # the majority's comments, each once
    calibration, counts = calibration_set(labels, {"a": _trace("a", "30 days."), "d": _trace("d", None)})
    assert calibration is not None
    assert [(c.name, c.verdicts) for c in calibration.cases] == [
        ("a", {"context_relevance": "pass", "faithfulness": "fail"})
    ]
    assert (counts.labels, counts.cases, counts.ties, counts.gone, counts.no_answer) == (8, 1, 1, 1, 1)
    assert (
        yaml.safe_load(yaml.safe_dump(calibration.model_dump(mode="json")))["cases"][0]["answer"]
        == "30 days."
    )
