"""Re-scoring stored traces (docs/rescore.md): `ragpulse rescore` on a DuckDB file and inside
`serve` through `POST /api/rescore`.

Real parts: the service on loopback ports fed by the OpenTelemetry SDK, the installed `ragpulse`
command in a subprocess (killed with SIGKILL midway and run again), DuckDB files read back, and the
OpenAI-protocol stub as the judge. What is asserted: the new scores replace the old ones (kept in
`score_history`), `score_aggregates` equals a recount of `scores` after a rescore, no trace is
scored twice and none is skipped across a kill, a dry run writes nothing, and each score says
which evaluator version and run gave it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from opentelemetry import trace

from collector.rescore.runner import Stopped
from collector.service import BackgroundService
from collector.store import open_store
from collector.store.config import StoreConfig
from evaluators.registry import EvaluatorEntry
from tests.support.helpers import (
    RAGPULSE,
    clean_env,
    emit_rag_request,
    fast_assembler,
    file_rows,
    make_config,
    sdk_tracer_provider,
    sql,
    verdict_responder,
    wait_for,
)
from tests.support.helpers import run_ragpulse as run_in
from tests.support.openai_stub import OpenAIStub, passing_verdict
from tests.support.postgres import PostgresServer

TRACES = 40


def run_ragpulse(*args: str) -> subprocess.CompletedProcess[str]:
    return run_in(*args, cwd=Path(tempfile.gettempdir()))


pytestmark = pytest.mark.xdist_group("rescore")


def send_traces(
    svc: BackgroundService, count: int, answer: str = "Yes, we ship to Norway in 5-7 days."
) -> None:
    provider = sdk_tracer_provider(svc, "shop")
    tracer = provider.get_tracer("t")
    for i in range(count):
        emit_rag_request(
            tracer, f"Do you ship to Norway, order {i}?", "We ship to Norway in 5-7 days.", answer
        )
    provider.shutdown()
    wait_for(
        lambda: sql(svc, "SELECT count(*) AS n FROM traces WHERE sample_decision IS NOT NULL")[0]["n"],
        lambda n: n == count,
        timeout=60,
        what=f"{count} traces assembled and scored",
    )


@pytest.fixture(scope="module")
def scored_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database file of TRACES traces scored online with the default evaluators (stopped)."""
    config = make_config(tmp_path_factory.mktemp("rescore-store"), assembler=fast_assembler())
    with BackgroundService(config) as svc:
        send_traces(svc, TRACES)
    return Path(config.store.path)


@pytest.fixture
def store_copy(scored_store: Path, tmp_path: Path) -> Path:
    db = tmp_path / "copy.duckdb"
    shutil.copy(scored_store, db)
    return db


def write_config(tmp_path: Path, **sections: Any) -> Path:
    path = tmp_path / "rescore.yaml"
    path.write_text(yaml.safe_dump(sections))
    return path


def aggregates_and_recount(db: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`score_aggregates` per minute, service and name, and the same counted from `scores` now."""
    kept = file_rows(
        db,
        "SELECT bucket, service_name, name, sum(n) AS n, sum(n_pass) AS n_pass, sum(n_fail) AS n_fail, "
        "round(coalesce(sum(sum), 0), 6) AS total FROM score_aggregates GROUP BY ALL ORDER BY ALL",
    )
    recount = file_rows(
        db,
        "SELECT bucket, service_name, name, count(*) AS n, "
        "count(*) FILTER (WHERE status = 'pass') AS n_pass, "
        "count(*) FILTER (WHERE status = 'fail') AS n_fail, round(coalesce(sum(value), 0), 6) AS total "
        "FROM scores GROUP BY ALL ORDER BY ALL",
    )
    return kept, recount


def every_row_digest(db: Path) -> dict[str, str]:
    """A digest of every row of the tables a rescore writes."""
    digests = {}
    for table in ("scores", "score_aggregates", "score_history", "rescore_runs", "evaluation_outbox"):
        rows = file_rows(db, f"SELECT * FROM {table} ORDER BY ALL")
        digests[table] = hashlib.sha256(json.dumps(rows, default=str).encode()).hexdigest()
    return digests


def test_a_changed_threshold_is_given_again_and_the_old_scores_are_kept(
    store_copy: Path, tmp_path: Path
) -> None:
    config = write_config(tmp_path, evaluators=[{"name": "faithfulness", "min": 0.95}, {"name": "citation"}])
    before = file_rows(store_copy, "SELECT name, count(*) AS n FROM scores GROUP BY name ORDER BY name")
    online = file_rows(store_copy, "SELECT DISTINCT threshold FROM scores WHERE name = 'faithfulness'")
    assert len(online) == 1 and online[0]["threshold"] != 0.95
    done = run_ragpulse(
        "rescore", "--config", str(config), "--db", str(store_copy), "--evaluator", "faithfulness", "--json"
    )
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["status"] == "done" and run["traces_done"] == TRACES and run["traces_total"] == TRACES
    assert run["scores_written"] == TRACES and run["scores_replaced"] == TRACES
    # Only faithfulness was given again, with the new threshold and the run's provenance.
    current = file_rows(
        store_copy,
        "SELECT name, threshold, rescore_run, evaluator_version FROM scores WHERE name = 'faithfulness'",
    )
    assert len(current) == TRACES
    assert {(r["threshold"], r["rescore_run"]) for r in current} == {(0.95, run["run_id"])}
    assert all(r["evaluator_version"].startswith("ragpulse-") for r in current)
    others = file_rows(
        store_copy,
        "SELECT count(*) AS n FROM scores WHERE name <> 'faithfulness' AND rescore_run IS NOT NULL",
    )
    assert others == [{"n": 0}]
    # One current row per trace and name: the counts per name did not change.
    assert (
        file_rows(store_copy, "SELECT name, count(*) AS n FROM scores GROUP BY name ORDER BY name") == before
    )
    # The replaced rows are kept, and `scores_all` shows both.
    history = file_rows(store_copy, "SELECT name, threshold, replaced_by FROM score_history")
    assert len(history) == TRACES
    assert {(r["name"], r["threshold"], r["replaced_by"]) for r in history} == {
        ("faithfulness", online[0]["threshold"], run["run_id"])
    }
    both = file_rows(
        store_copy,
        "SELECT count(*) FILTER (WHERE replaced_at IS NULL) AS current, "
        "count(*) FILTER (WHERE replaced_at IS NOT NULL) AS replaced "
        "FROM scores_all WHERE name = 'faithfulness'",
    )
    assert both == [{"current": TRACES, "replaced": TRACES}]
    kept, recount = aggregates_and_recount(store_copy)
    assert kept == recount
    # The run is recorded as done.
    runs = file_rows(store_copy, "SELECT status, origin, traces_done, evaluators FROM rescore_runs")
    assert runs == [
        {"status": "done", "origin": "cli", "traces_done": TRACES, "evaluators": ["faithfulness"]}
    ]


def test_every_configured_evaluator_by_default_and_aggregates_equal_a_recount(
    store_copy: Path, tmp_path: Path
) -> None:
    # A stricter faithfulness turns passes into fails: the aggregates must follow.
    config = write_config(
        tmp_path, evaluators=[{"name": "faithfulness", "min": 1.0}, {"name": "answer_relevance", "min": 0.99}]
    )
    done = run_ragpulse(
        "rescore", "--config", str(config), "--db", str(store_copy), "--since", "1h", "--json"
    )
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["scores_written"] == 2 * TRACES
    kept, recount = aggregates_and_recount(store_copy)
    assert kept == recount
    names = {
        r["name"]
        for r in file_rows(store_copy, "SELECT DISTINCT name FROM scores WHERE rescore_run IS NOT NULL")
    }
    assert names == {"faithfulness", "answer_relevance"}


def test_a_dry_run_counts_and_writes_nothing(store_copy: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path, evaluators=[{"name": "faithfulness"}, {"name": "citation"}])
    before = every_row_digest(store_copy)
    done = run_ragpulse("rescore", "--config", str(config), "--db", str(store_copy), "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    estimate = json.loads(done.stdout)
    assert estimate["dry_run"] is True
    assert estimate["traces"] == TRACES
    assert estimate["deterministic_scores"] == 2 * TRACES
    assert estimate["judge_calls"] == 0
    assert every_row_digest(store_copy) == before
    text = run_ragpulse("rescore", "--config", str(config), "--db", str(store_copy), "--dry-run")
    assert "traces to score again: 40" in text.stdout and "nothing written" in text.stdout
    assert every_row_digest(store_copy) == before


def test_a_run_killed_midway_goes_on_and_scores_each_trace_once(store_copy: Path, tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        evaluators=[{"name": "faithfulness", "min": 0.9}],
        scoring={"rescore_batch": 2},
        assembler={"workers": 0},
    )
    command = ["rescore", "--config", str(config), "--db", str(store_copy), "--evaluator", "faithfulness"]
    proc = subprocess.Popen(
        [str(RAGPULSE), *command],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=clean_env(),
        text=True,
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        done = int(line.split(": ")[1].split(" of ")[0]) if " of " in line else 0
        if done >= 10:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, seen
    killed = file_rows(store_copy, "SELECT run_id, status, traces_done FROM rescore_runs")
    assert len(killed) == 1 and killed[0]["status"] == "running"
    assert 10 <= killed[0]["traces_done"] < TRACES
    # What the killed run stored: its batches, whole.
    first = file_rows(store_copy, "SELECT count(*) AS n FROM scores WHERE rescore_run IS NOT NULL")[0]["n"]
    assert first == killed[0]["traces_done"]

    # A service opening the file says the run was left behind; the same command goes on with it.
    with BackgroundService(
        make_config(tmp_path / "serve", assembler=fast_assembler(), store={"path": str(store_copy)})
    ) as svc:
        left = httpx.get(f"{svc.http_url}/api/rescore").json()["runs"]
        assert [(r["run_id"], r["status"]) for r in left] == [(killed[0]["run_id"], "stopped")]
        assert "ended without stopping it" in left[0]["error"]
    again = run_ragpulse(*command, "--json")
    assert again.returncode == 0, again.stderr
    run = json.loads(again.stdout)
    assert run["run_id"] == killed[0]["run_id"] and run["resumed"] is True and run["status"] == "done"
    assert run["traces_done"] == TRACES
    # Every trace scored by the run (none skipped), each once (its original replaced once, never
    # a score of the run itself replaced).
    current = file_rows(
        store_copy,
        "SELECT count(*) AS n, count(DISTINCT trace_id) AS traces, count(*) FILTER (WHERE rescore_run = "
        f"'{run['run_id']}') AS of_run FROM scores WHERE name = 'faithfulness'",
    )
    assert current == [{"n": TRACES, "traces": TRACES, "of_run": TRACES}]
    history = file_rows(
        store_copy,
        "SELECT count(*) AS n, count(DISTINCT trace_id) AS traces, count(rescore_run) AS by_a_run "
        "FROM score_history",
    )
    assert history == [{"n": TRACES, "traces": TRACES, "by_a_run": 0}]
    kept, recount = aggregates_and_recount(store_copy)
    assert kept == recount


def test_unknown_evaluators_and_bad_options_are_one_line_errors(store_copy: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path, evaluators=[{"name": "faithfulness"}])
    unknown = run_ragpulse("rescore", "--config", str(config), "--db", str(store_copy), "--evaluator", "nope")
    assert unknown.returncode == 1
    assert "no configured evaluator gives nope; configured: faithfulness" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    bad_slice = run_ragpulse("rescore", "--config", str(config), "--db", str(store_copy), "--slice", "tenant")
    assert bad_slice.returncode == 1 and "dimension=value" in bad_slice.stderr
    no_dimension = run_ragpulse(
        "rescore", "--config", str(config), "--db", str(store_copy), "--slice", "tenant=a"
    )
    assert no_dimension.returncode == 1 and "'tenant' is not a slice dimension" in no_dimension.stderr


@pytest.fixture
def served(tmp_path: Path) -> Iterator[BackgroundService]:
    config = make_config(tmp_path, assembler=fast_assembler())
    names = ("faithfulness", "citation", "retrieval.recall@5")
    config.evaluators = [EvaluatorEntry(name=name) for name in names]
    with BackgroundService(config) as svc:
        send_traces(svc, 12)
        yield svc


def test_post_api_rescore_runs_inside_serve_with_its_progress(served: BackgroundService) -> None:
    url = served.http_url
    estimate = httpx.post(
        f"{url}/api/rescore", json={"since": "1h", "evaluators": ["citation"], "dry_run": True}
    )
    assert estimate.status_code == 200 and estimate.json()["traces"] == 12
    assert sql(served, "SELECT count(*) AS n FROM rescore_runs") == [{"n": 0}]
    started = httpx.post(f"{url}/api/rescore", json={"since": "1h", "evaluators": ["citation"]})
    assert started.status_code == 200, started.text
    run_id = started.json()["run_id"]
    run = wait_for(
        lambda: httpx.get(f"{url}/api/rescore/{run_id}").json(),
        lambda r: r["status"] != "running",
        timeout=60,
        what="the rescore run to end",
    )
    assert run["status"] == "done" and run["origin"] == "server" and run["traces_done"] == 12
    assert run["request"]["evaluators"] == ["citation"]
    listed = httpx.get(f"{url}/api/rescore").json()["runs"]
    assert [r["run_id"] for r in listed] == [run_id]
    rows = sql(served, "SELECT count(*) AS n FROM scores WHERE name = 'citation' AND rescore_run IS NOT NULL")
    assert rows == [{"n": 12}]
    # The write-back follows: span_events shows the new score's event, not the replaced one.
    events = sql(
        served,
        "SELECT count(*) AS n FROM span_events WHERE source = 'ragpulse' "
        "AND json_extract_string(attributes, '$.\"gen_ai.evaluation.name\"') = 'citation'",
    )
    assert events == [{"n": 12}]
    assert httpx.get(f"{url}/api/rescore/nope").status_code == 404
    bad = httpx.post(f"{url}/api/rescore", json={"since": "1h", "judge_rate": 2})
    assert bad.status_code == 400 and "judge_rate" in bad.json()["error"]
    unknown = httpx.post(f"{url}/api/rescore", json={"evaluators": ["nope"]})
    assert unknown.status_code == 400 and "no configured evaluator gives nope" in unknown.json()["error"]
    # The CLI through the server: the same request again is a new run (the first one is done).
    through = run_ragpulse("rescore", "--server", url, "--since", "1h", "--evaluator", "citation", "--json")
    assert through.returncode == 0, through.stderr
    second = json.loads(through.stdout)
    assert second["status"] == "done" and second["run_id"] != run_id and second["traces_done"] == 12
    history = sql(served, "SELECT count(*) AS n, count(rescore_run) AS by_a_run FROM score_history")
    assert history == [{"n": 24, "by_a_run": 12}]


def test_the_judge_scores_again_the_traces_it_judged_with_its_version(tmp_path: Path) -> None:
    with OpenAIStub(responder=verdict_responder(passing_verdict)) as stub:
        config = make_config(
            tmp_path,
            assembler=fast_assembler(),
            sampling={"judge_rate": 1.0, "budget": {"judge_calls_per_minute": None}},
            judge={"base_url": stub.base_url, "model": "judge-test", "api_key": "test", "max_retries": 0},
        )
        config.evaluators = [EvaluatorEntry(name="faithfulness"), EvaluatorEntry(name="citation")]
        with BackgroundService(config) as svc:
            send_traces(svc, 6)
            wait_for(
                lambda: sql(svc, "SELECT count(*) AS n FROM traces WHERE judge_status = 'done'")[0]["n"],
                lambda n: n == 6,
                timeout=60,
                what="the online judge",
            )
            url = svc.http_url
            estimate = httpx.post(f"{url}/api/rescore", json={"since": "1h", "dry_run": True}).json()
            assert estimate["judged_traces"] == 6 and estimate["judge_calls"] == 6
            assert estimate["judge_evaluators"] == ["faithfulness"] and estimate["evaluators"] == ["citation"]
            online = sql(svc, "SELECT sum(judge_input_tokens) AS i FROM scores WHERE evaluator = 'judge'")[0][
                "i"
            ]
            assert estimate["input_tokens"] == online  # the window's mean per call, times the calls
            calls_before = len(stub.chat_requests)
            started = httpx.post(f"{url}/api/rescore", json={"since": "1h", "evaluators": ["faithfulness"]})
            run_id = started.json()["run_id"]
            run = wait_for(
                lambda: httpx.get(f"{url}/api/rescore/{run_id}").json(),
                lambda r: r["status"] != "running",
                timeout=60,
                what="the judge's rescore",
            )
            assert run["status"] == "done" and run["traces_judged"] == 6 and run["scores_written"] == 6
            # Same model, prompt and inputs: the judge's verdict cache answers, no call, no token.
            assert len(stub.chat_requests) == calls_before and run["judge_input_tokens"] == 0
            rows = sql(
                svc,
                "SELECT evaluator, evaluator_version, prompt_version, status FROM scores "
                "WHERE name = 'faithfulness' AND rescore_run IS NOT NULL",
            )
            assert len(rows) == 6
            assert {r["evaluator_version"] for r in rows} == {f"judge-test@{rows[0]['prompt_version']}"}
            assert {(r["evaluator"], r["status"]) for r in rows} == {("judge", "pass")}
            # A judge rate picks traces by trace-id hash: 0 judges none and writes nothing new.
            none = httpx.post(
                f"{url}/api/rescore", json={"since": "1h", "evaluators": ["faithfulness"], "judge_rate": 0}
            )
            nothing = wait_for(
                lambda: httpx.get(f"{url}/api/rescore/{none.json()['run_id']}").json(),
                lambda r: r["status"] != "running",
                timeout=60,
                what="a rescore at judge rate 0",
            )
            assert (
                nothing["traces_done"] == 6
                and nothing["traces_judged"] == 0
                and nothing["scores_written"] == 0
            )


def test_a_run_waits_for_the_judges_budget_and_says_so(store_copy: Path) -> None:
    from collector.processors.sampler import JudgeBudget
    from collector.processors.scoring import ScoringSetup
    from collector.rescore.runner import JudgeParts, Progress, Rescorer
    from collector.store.duckdb_store import DuckDBStore

    now = [0.0]

    def clock() -> float:
        now[0] += 30.0  # each look at the clock half a minute later
        return now[0]

    budget = JudgeBudget(1, None, 0.0)  # one call a minute
    with DuckDBStore(store_copy) as store:
        rescorer = Rescorer(store, ScoringSetup(), JudgeParts([], budget, 1), clock=clock)
        seen: list[str | None] = []
        progress = Progress("r", "running", 2)
        rescorer._wait_for_budget(1, progress, threading.Event(), lambda p: seen.append(p.waiting))
        rescorer._wait_for_budget(1, progress, threading.Event(), lambda p: seen.append(p.waiting))
        assert seen == ["throttled"]  # the second call waited, and said why
        stop = threading.Event()
        stop.set()
        with pytest.raises(Stopped):
            rescorer._wait_for_budget(1, progress, stop, lambda p: None)


def test_on_a_lake_a_rescore_replaces_scores_and_keeps_the_aggregates_equal_to_a_recount(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """The same on a DuckLake (catalog in PostgreSQL), where aggregates are partial rows readers sum:
    a service on the lake scores traces, then `ragpulse rescore` on the lake gives faithfulness again."""
    lake = postgres.new_lake(tmp_path)
    config = make_config(tmp_path, store={**lake, "replica": "solo"}, assembler=fast_assembler())
    with BackgroundService(config) as svc:
        send_traces(svc, 8)
    cli = write_config(
        tmp_path,
        store={**lake, "replica": "cli"},
        evaluators=[{"name": "faithfulness", "min": 0.95}],
        assembler={"workers": 0},
    )
    done = run_ragpulse("rescore", "--config", str(cli), "--since", "1h", "--json")
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["status"] == "done" and run["scores_written"] == 8 and run["scores_replaced"] == 8
    with open_store(StoreConfig.model_validate({**lake, "replica": "reader"}), read_only=True) as store:

        def rows(query: str) -> list[tuple[Any, ...]]:
            return store.query(query, 1000, 30).rows

        kept = rows(
            "SELECT bucket, name, sum(n), sum(n_pass), sum(n_fail) FROM score_aggregates "
            "GROUP BY ALL ORDER BY ALL"
        )
        recount = rows(
            "SELECT bucket, name, count(*), count(*) FILTER (WHERE status = 'pass'), "
            "count(*) FILTER (WHERE status = 'fail') FROM scores GROUP BY ALL ORDER BY ALL"
        )
        assert kept == recount
        assert rows("SELECT count(*), count(DISTINCT trace_id) FROM score_history") == [(8, 8)]
        assert rows("SELECT DISTINCT threshold FROM scores WHERE name = 'faithfulness'") == [(0.95,)]


def test_a_second_process_does_not_take_up_a_run_in_progress(store_copy: Path) -> None:
    from collector.config import Config
    from collector.rescore.request import RescoreRequest
    from collector.rescore.runner import RescoreBusy
    from collector.rescore.setup import build_rescorer

    config = Config()
    with open_store(StoreConfig(path=str(store_copy))) as store:
        request = RescoreRequest(since="1h", evaluators=["citation"])
        first = build_rescorer(config, store).start(request, "cli")
        assert first[1].status == "running"
        with pytest.raises(RescoreBusy, match="is in progress in another process"):
            build_rescorer(config, store).start(request, "cli")


def test_the_sessions_of_rescored_turns_are_computed_again_by_the_command(tmp_path: Path) -> None:
    config = make_config(tmp_path, assembler=fast_assembler(), sessions={"refresh_interval": 0.2})
    with BackgroundService(config) as svc:
        provider = sdk_tracer_provider(svc, "shop")
        tracer = provider.get_tracer("t")
        for i in range(6):

            def mark_root(i: int = i) -> None:
                trace.get_current_span().set_attribute("session.id", f"chat-{i % 2}")

            emit_rag_request(
                tracer, f"Do you ship to Norway, order {i}?", "We ship to Norway.", "Yes.", mark_root
            )
        provider.shutdown()
        wait_for(
            lambda: sql(svc, "SELECT sum(turns) AS n FROM sessions")[0]["n"],
            lambda n: n == 6,
            timeout=30,
            what="two sessions of three turns",
        )
    db = Path(config.store.path)
    # Online, "Yes." repeats no word of the question: answer_relevance fails on every turn.
    before = file_rows(db, "SELECT score_fails FROM sessions ORDER BY session_id")
    assert [r["score_fails"]["answer_relevance"] for r in before] == [3, 3]
    lenient = write_config(tmp_path, evaluators=[{"name": "answer_relevance", "min": 0.0}])
    done = run_ragpulse("rescore", "--config", str(lenient), "--db", str(db), "--since", "1h", "--json")
    assert done.returncode == 0, done.stderr
    after = file_rows(db, "SELECT session_id, failed_turns, score_fails FROM sessions ORDER BY session_id")
    recount = file_rows(
        db,
        "SELECT t.session_id, count(DISTINCT t.trace_id) FILTER (WHERE s.status = 'fail') AS failed_turns "
        "FROM traces t JOIN scores s USING (trace_id) WHERE s.level IS NULL AND s.evaluator IN "
        "('deterministic', 'judge') GROUP BY ALL ORDER BY ALL",
    )
    assert [(r["session_id"], r["failed_turns"]) for r in after] == [
        (r["session_id"], r["failed_turns"]) for r in recount
    ]
    assert [r["score_fails"]["answer_relevance"] for r in after] == [0, 0]


def test_ctrl_c_stops_a_run_in_one_line_and_the_same_command_goes_on(
    store_copy: Path, tmp_path: Path
) -> None:
    def slow_judge(request: Any) -> str:
        # One call at a time (max_concurrency 1), 0.2 s each: the run takes 8 s at least, so it
        # cannot finish between its first progress line and the signal, however busy the machine
        # (a run of deterministic scores alone finished first on a busy one).
        time.sleep(0.2)
        return verdict_responder(passing_verdict)(request)

    with OpenAIStub(responder=slow_judge) as stub:
        config = write_config(
            tmp_path,
            evaluators=[{"name": "faithfulness"}],
            scoring={"rescore_batch": 2},
            assembler={"workers": 0},
            sampling={"budget": {"judge_calls_per_minute": None}},
            judge={
                "base_url": stub.base_url,
                "model": "judge-test",
                "api_key": "test",
                "max_retries": 0,
                "max_concurrency": 1,
            },
        )
        command = [
            "rescore",
            "--config",
            str(config),
            "--db",
            str(store_copy),
            "--evaluator",
            "faithfulness",
            "--judge-rate",
            "1",
        ]
        proc = subprocess.Popen(
            [str(RAGPULSE), *command],
            stderr=subprocess.PIPE,
            env=clean_env(),
            text=True,
            start_new_session=True,
        )
        assert proc.stderr is not None
        for line in proc.stderr:
            if " of " in line and int(line.split(": ")[1].split(" of ")[0]) >= 2:
                proc.send_signal(signal.SIGINT)
                break
        rest = proc.stderr.read()
        assert proc.wait(timeout=30) == 1
        assert "Error: stopped: what was stored stays" in rest and "Traceback" not in rest
        stopped = file_rows(store_copy, "SELECT status, traces_done FROM rescore_runs")
        assert stopped[0]["status"] == "stopped" and 2 <= stopped[0]["traces_done"] < TRACES
        again = run_ragpulse(*command, "--json")
    assert json.loads(again.stdout)["traces_done"] == TRACES
    assert file_rows(store_copy, "SELECT count(*) AS n FROM score_history") == [{"n": TRACES}]
