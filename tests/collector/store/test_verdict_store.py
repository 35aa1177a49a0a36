"""The persistent judge verdict cache (`DuckDBVerdictStore`) on real DuckDB files, with the real judge
client against the OpenAI-protocol test server (tests/support/openai_stub.py), and through `ragpulse eval` /
`ragpulse calibrate` in a subprocess with `judge.verdict_store` configured.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml

from collector.config import ConfigError, load_config
from collector.store.verdicts import DuckDBVerdictStore, VerdictStoreError
from evaluators.judge import JudgeClient, JudgeSettings
from tests.support.helpers import clean_env, file_execute, run_ragpulse
from tests.support.judging import GOOD, Verdict, messages
from tests.support.judging import settings as _settings
from tests.support.openai_stub import OpenAIStub, RecordedRequest

ENTRY = {"parsed": {"verdict": "yes", "reason": "r"}, "raw": '{"verdict": "yes"}', "response_model": "m-1"}


def settings(stub: OpenAIStub, **overrides: Any) -> JudgeSettings:
    return _settings(stub, **{"timeout": 2.0, "max_retries": 0, "backoff_max": 0.1, **overrides})


# -- the store on its own ----------------------------------------------------------------------------------


def test_round_trip_and_miss(tmp_path: Path) -> None:
    with DuckDBVerdictStore(tmp_path / "v.duckdb") as store:
        assert store.get("absent") is None
        store.put("k1", ENTRY)
        assert store.get("k1") == ENTRY
        assert store.count() == 1


def test_put_is_an_upsert(tmp_path: Path) -> None:
    with DuckDBVerdictStore(tmp_path / "v.duckdb") as store:
        store.put("k1", ENTRY)
        newer = {**ENTRY, "parsed": {"verdict": "no", "reason": "changed"}}
        store.put("k1", newer)
        assert store.get("k1") == newer
        assert store.count() == 1


def test_verdicts_survive_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "verdicts.duckdb"  # a missing folder is created
    store = DuckDBVerdictStore(path)
    store.put("k1", ENTRY)
    store.put("k2", {**ENTRY, "raw": "ünïcode ✓"})
    store.close()
    store.close()  # closing twice is harmless

    reopened = DuckDBVerdictStore(path)
    try:
        assert reopened.get("k1") == ENTRY
        assert reopened.get("k2") == {**ENTRY, "raw": "ünïcode ✓"}
    finally:
        reopened.close()
    # The table is plain SQL for anyone who opens the file.
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute(
            "SELECT key, value->>'response_model', typeof(value), typeof(created_at) "
            "FROM judge_verdicts ORDER BY key"
        ).fetchall()
    finally:
        con.close()
    assert rows == [("k1", "m-1", "JSON", "TIMESTAMP"), ("k2", "m-1", "JSON", "TIMESTAMP")]


def test_rows_that_are_not_json_objects_are_misses(tmp_path: Path) -> None:
    path = tmp_path / "v.duckdb"
    DuckDBVerdictStore(path).close()  # creates the table
    con = duckdb.connect(str(path))  # rows written by someone else
    con.executemany(
        "INSERT INTO judge_verdicts VALUES (?, ?, now()::TIMESTAMP)",
        [["array", "[1, 2]"], ["string", '"text"'], ["json-null", "null"], ["sql-null", None]],
    )
    con.close()
    with DuckDBVerdictStore(path) as store:
        for key in ("array", "string", "json-null", "sql-null"):
            assert store.get(key) is None, key
        store.put("array", ENTRY)  # a good verdict replaces the bad row
        assert store.get("array") == ENTRY


def test_malformed_json_text_is_a_miss(tmp_path: Path) -> None:
    # DuckDB refuses malformed text in a JSON column, but a table made by other means (here with a
    # VARCHAR value column) can hold anything: it reads as a miss, never a crash.
    path = tmp_path / "v.duckdb"
    file_execute(
        path,
        "CREATE TABLE judge_verdicts (key VARCHAR PRIMARY KEY, value VARCHAR, created_at TIMESTAMP)",
        "INSERT INTO judge_verdicts VALUES ('bad', '{\"parsed\": {\"verdict\": ', NULL)",
    )
    with DuckDBVerdictStore(path) as store:
        assert store.get("bad") is None
        store.put("bad", ENTRY)
        assert store.get("bad") == ENTRY


def test_a_borrowed_connection_is_used_and_left_open(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "service.duckdb"))
    try:
        store = DuckDBVerdictStore(con)
        store.put("k1", ENTRY)
        assert store.get("k1") == ENTRY
        store.close()  # not the store's connection: still usable by its owner
        row = con.execute("SELECT value->>'response_model' FROM judge_verdicts WHERE key = 'k1'").fetchone()
        assert row == ("m-1",)
    finally:
        con.close()


def test_concurrent_threads_read_and_write_safely(tmp_path: Path) -> None:
    with DuckDBVerdictStore(tmp_path / "v.duckdb") as store:
        barrier = threading.Barrier(8)

        def work(worker: int) -> list[str]:
            barrier.wait()
            problems = []
            for i in range(40):
                key = f"k{i % 10}"  # every thread writes the same ten keys: upserts collide
                value = {**ENTRY, "raw": f"{worker}-{i}"}
                store.put(key, value)
                got = store.get(key)
                if got is None or got["parsed"] != ENTRY["parsed"]:
                    problems.append(f"{key}: {got!r}")
            return problems

        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(work, range(8)))
        assert results == [[]] * 8
        assert store.count() == 10


def test_a_file_held_by_another_process_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "held.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, sys; c = duckdb.connect({str(path)!r}); print('ready'); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(VerdictStoreError, match="in use by another process"):
            DuckDBVerdictStore(path)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


# -- with the judge client ---------------------------------------------------------------------------------


def test_a_new_client_on_the_same_file_reuses_the_verdict(stub: OpenAIStub, tmp_path: Path) -> None:
    path = tmp_path / "verdicts.duckdb"
    stub.reply(GOOD, model="judge-model-2026-01-01")
    with DuckDBVerdictStore(path) as store, JudgeClient(settings(stub), store=store) as first:
        fresh = first.judge(messages(), Verdict, prompt_version="v1")
    assert fresh.ok and not fresh.cached and len(stub.chat_requests) == 1

    # A new process would see exactly this: a new store on the file, a client with an empty LRU cache.
    with DuckDBVerdictStore(path) as store, JudgeClient(settings(stub), store=store) as second:
        again = second.judge(messages(), Verdict, prompt_version="v1")
        other_prompt = second.cache_key(messages(), Verdict, prompt_version="v2")
        assert store.get(other_prompt) is None  # the prompt version is part of the key
    assert len(stub.chat_requests) == 1  # no request at all
    assert again.ok and again.cached
    assert again.parsed == fresh.parsed == Verdict.model_validate_json(GOOD)
    assert again.raw == fresh.raw and again.response_model == "judge-model-2026-01-01"
    assert (again.input_tokens, again.output_tokens) == (0, 0)


def test_a_failed_judge_call_is_not_stored(stub: OpenAIStub, tmp_path: Path) -> None:
    with DuckDBVerdictStore(tmp_path / "verdicts.duckdb") as store:
        client = JudgeClient(settings(stub, output_retries=0), store=store)
        stub.reply(status=400, error_message="bad request")
        stub.reply("this is not JSON")
        assert client.judge(messages(), Verdict).error_kind == "http_error"
        assert client.judge(messages(), Verdict).error_kind == "malformed_json"
        assert store.count() == 0
        stub.reply(GOOD)
        assert client.judge(messages(), Verdict).ok  # asked again: failures were not remembered
        assert len(stub.chat_requests) == 3 and store.count() == 1
        client.close()


def test_a_stored_entry_that_fails_the_schema_is_asked_again_and_replaced(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    with DuckDBVerdictStore(tmp_path / "verdicts.duckdb") as store:
        client = JudgeClient(settings(stub), store=store)
        key = client.cache_key(messages(), Verdict, prompt_version="v1")
        store.put(key, {"parsed": {"verdict": "perhaps"}})
        stub.reply(GOOD)
        result = client.judge(messages(), Verdict, prompt_version="v1")
        assert result.ok and not result.cached and len(stub.chat_requests) == 1
        assert store.get(key) == {"parsed": json.loads(GOOD), "raw": GOOD, "response_model": "judge-model"}
        client.close()


def test_a_verdict_the_scorer_rejects_is_not_stored_and_a_stored_one_is_asked_again(
    stub: OpenAIStub, tmp_path: Path
) -> None:
    """Ranks [1, 1] for two documents parse but are unusable (`bad_verdict`): not persisted, so the
    next run asks again; and a row holding such a verdict (as a store written before the scorers'
    checks ran ahead of the cache may) is a miss, replaced by the next usable verdict."""
    from evaluators.metrics.context_relevance import make_judge_context_relevance
    from semconv.models import Document, RagTrace, Step

    def relevance(*ranks: int) -> str:
        return json.dumps({"documents": [{"rank": r, "relevant": r == 2, "reason": ""} for r in ranks]})

    documents = [
        Document(rank=1, id="shipping", content="Shipping costs 5 euros outside the EU."),
        Document(rank=2, id="refunds", content="Refunds are accepted within 30 days."),
    ]
    step = Step(span_id="s1", kind="retrieval", documents=documents)
    trace = RagTrace(trace_id="t1", question="How long do refunds take?", steps=[step])
    path = tmp_path / "verdicts.duckdb"
    stub.reply(relevance(1, 1))
    stub.reply(relevance(1, 2))
    with DuckDBVerdictStore(path) as store, JudgeClient(settings(stub), store=store) as client:
        rejected = make_judge_context_relevance(client)(trace)
        assert (rejected.status, rejected.label) == ("error", "bad_verdict")
        assert store.count() == 0
        assert make_judge_context_relevance(client)(trace).status == "pass"
        assert store.count() == 1 and len(stub.chat_requests) == 2

    bad = {"parsed": json.loads(relevance(1, 1)), "raw": relevance(1, 1), "response_model": "judge-model"}
    with duckdb.connect(str(path)) as con:
        con.execute("UPDATE judge_verdicts SET value = ?", [json.dumps(bad)])
    stub.reply(relevance(1, 2))
    with DuckDBVerdictStore(path) as store, JudgeClient(settings(stub), store=store) as client:
        again = make_judge_context_relevance(client)(trace)
        assert (again.status, again.value) == ("pass", 0.5) and len(stub.chat_requests) == 3
        [(value,)] = store._con.execute("SELECT CAST(value AS VARCHAR) FROM judge_verdicts").fetchall()
        assert json.loads(value)["parsed"] == json.loads(relevance(1, 2))


def test_judge_many_shares_one_store_across_threads(stub: OpenAIStub, tmp_path: Path) -> None:
    stub.responder = lambda request: GOOD
    calls = [(messages(f"question {i}?"), Verdict) for i in range(12)]
    path = tmp_path / "verdicts.duckdb"
    with DuckDBVerdictStore(path) as store, JudgeClient(settings(stub, max_concurrency=6), store=store) as c:
        assert all(r.ok and not r.cached for r in c.judge_many(calls))
        assert store.count() == 12
    with DuckDBVerdictStore(path) as store, JudgeClient(settings(stub, max_concurrency=6), store=store) as c:
        assert all(r.ok and r.cached for r in c.judge_many(calls))
    assert len(stub.chat_requests) == 12


# -- configuration -----------------------------------------------------------------------------------------


def test_the_config_key_is_validated_with_its_path(tmp_path: Path) -> None:
    def load(judge: dict[str, Any], environ: dict[str, str] | None = None) -> Any:
        path = tmp_path / "ragpulse.yaml"
        path.write_text(yaml.safe_dump({"judge": judge}), encoding="utf-8")
        return load_config(path, environ=environ or {})

    assert load({}).judge.verdict_store is None
    assert load({"verdict_store": None}).judge.verdict_store is None
    assert load({"verdict_store": "cache/verdicts.duckdb"}).judge.verdict_store == "cache/verdicts.duckdb"
    overridden = load({}, {"RAGPULSE_JUDGE__VERDICT_STORE": "env.duckdb"})
    assert overridden.judge.verdict_store == "env.duckdb"
    for bad in (5, "", ["a"]):
        with pytest.raises(ConfigError, match=r"judge\.verdict_store: "):
            load({"verdict_store": bad})
    with pytest.raises(ConfigError, match=r"judge\.verdict_stor: unknown key"):
        load({"verdict_stor": "x.duckdb"})


# -- the commands ------------------------------------------------------------------------------------------


def responder(request: RecordedRequest) -> str:
    """Answers by the schema the request asks for: the pre-run check, and context relevance."""
    name = request.json["response_format"]["json_schema"]["name"]
    if name == "_Ping":
        return '{"ok": true}'
    assert name == "ContextRelevanceVerdict", name
    return json.dumps({"documents": [{"rank": 1, "relevant": True, "reason": "on topic"}]})


def run(tmp_path: Path, stub: OpenAIStub, *args: str) -> subprocess.CompletedProcess[str]:
    config = {
        "judge": {
            "base_url": stub.base_url,
            "model": "judge-m",
            "max_retries": 0,
            "verdict_store": "cache/verdicts.duckdb",
        }
    }
    (tmp_path / "ragpulse.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return run_ragpulse(
        *args, "--config", "ragpulse.yaml", cwd=tmp_path, env=clean_env(OPENAI_API_KEY="test")
    )


def schema_names(requests: list[RecordedRequest]) -> list[str]:
    return [r.json["response_format"]["json_schema"]["name"] for r in requests]


CASES = [
    {
        "name": name,
        "question": question,
        "contexts": [{"id": "returns-policy", "text": "Items can be returned within 30 days of delivery."}],
        "answer": "Within 30 days of delivery.",
    }
    for name, question in [("returns", "How long can I return items?"), ("window", "What is the window?")]
]


def test_eval_reuses_stored_verdicts_on_the_second_run(tmp_path: Path) -> None:
    suite = {"name": "cached", "evaluators": [{"name": "context_relevance"}], "cases": CASES}
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite), encoding="utf-8")
    with OpenAIStub(responder=responder) as stub:
        first = run(tmp_path, stub, "eval", "suite.yaml", "--json", "first.json")
        assert first.returncode == 0, first.stderr
        assert schema_names(stub.chat_requests) == [
            "_Ping",
            "ContextRelevanceVerdict",
            "ContextRelevanceVerdict",
        ]
        stub.requests.clear()

        second = run(tmp_path, stub, "eval", "suite.yaml", "--json", "second.json")
        assert second.returncode == 0, second.stderr
        # Only the pre-run check reaches the judge: every verdict comes from the store.
        assert schema_names(stub.chat_requests) == ["_Ping"]

    def scores(name: str) -> list[tuple[str, str, Any, Any]]:
        data = json.loads((tmp_path / name).read_text())
        return [(c["name"], s["name"], s["status"], s["value"]) for c in data for s in c["scores"]]

    assert scores("second.json") == scores("first.json")
    assert [status for _, _, status, _ in scores("first.json")] == ["pass", "pass"]
    with DuckDBVerdictStore(tmp_path / "cache" / "verdicts.duckdb") as store:
        assert store.count() == 2


def test_calibrate_never_uses_the_verdict_store(tmp_path: Path) -> None:
    calibration = {
        "name": "mini",
        "cases": [{**CASES[0], "verdicts": {"context_relevance": "pass"}, "tags": ["supported"]}],
    }
    (tmp_path / "cases.yaml").write_text(yaml.safe_dump(calibration), encoding="utf-8")
    with OpenAIStub(responder=responder) as stub:
        for _ in range(2):
            result = run(tmp_path, stub, "calibrate", "cases.yaml", "--repeats", "2")
            assert result.returncode == 0, result.stderr
        # Both runs, both repeats reach the judge (plus one pre-run check per run) ...
        assert schema_names(stub.chat_requests) == ["_Ping", *["ContextRelevanceVerdict"] * 2] * 2
    # ... and the configured store file is never even opened.
    assert not (tmp_path / "cache").exists()
