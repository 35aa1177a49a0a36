"""The `ragpulse` command line, run as a user runs it: the installed script in a subprocess.

Each run has its own working directory and an environment without RAGPULSE_* variables. Servers
are real `ragpulse serve` processes on free loopback ports, stopped with SIGTERM.
"""

from __future__ import annotations

import csv
import gzip
import io
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from collector.server_file import server_file
from tests.support.helpers import (
    RAGPULSE,
    ServeProcess,
    clean_env,
    free_port,
    key_values,
    run_ragpulse,
    stop_process,
    trace_request,
    trace_request_json,
    wait_for,
)

TRACE_A = "5b8efff798038103d269b633813fc60c"
TRACE_B = "4bf92f3577b34da6a3ce929d0e0e4736"


# ---------------------------------------------------------------- running the command


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return orjson.loads(self.out)


class Pending:
    """A `ragpulse` run in progress; independent runs overlap to keep the module fast."""

    def __init__(self, args: tuple[str, ...], cwd: Path, env: dict[str, str] | None, timeout: float) -> None:
        self._timeout = timeout
        self._proc = subprocess.Popen(
            [str(RAGPULSE), *args],
            cwd=cwd,
            env=env or clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def result(self) -> Run:
        try:
            out, err = self._proc.communicate(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()
            raise
        return Run(self._proc.returncode, out.decode(), err.decode())


def spawn(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60) -> Pending:
    return Pending(args, cwd, env, timeout)


def ragpulse(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60) -> Run:
    return spawn(*args, cwd=cwd, env=env, timeout=timeout).result()


def assert_user_error(run: Run, *fragments: str) -> str:
    """Stderr starts with `Error: ...`, exit code 1, no traceback; returns the first line.

    Lines after the first are allowed: DuckDB's and PyYAML's messages point at the position of the
    mistake (`LINE 1: SELEC 1` and a caret), which is worth more to the user than one line.
    """
    assert run.code == 1, run
    assert "Traceback" not in run.err, run.err
    lines = run.err.splitlines()
    assert lines and lines[0].startswith("Error: "), run.err
    for fragment in fragments:
        assert fragment in run.err, (fragment, run.err)
    return lines[0]


def assert_user_errors(runs: list[tuple[Pending, tuple[str, ...]]]) -> None:
    """`assert_user_error` on every run, reporting all the runs that break it at once."""
    problems = []
    for pending, fragments in runs:
        try:
            assert_user_error(pending.result(), *fragments)
        except AssertionError as exc:
            problems.append(f"{fragments}: {exc}")
    assert not problems, "\n\n".join(problems)


# ---------------------------------------------------------------- capture files


def json_doc(trace_id: str, spans: list[tuple[str, str]], service: str = "cli-svc") -> dict[str, Any]:
    return trace_request_json(
        [
            {
                "traceId": trace_id,
                "spanId": span_id,
                "name": name,
                "kind": 1,
                "startTimeUnixNano": "1700000000000000000",
                "endTimeUnixNano": "1700000000002000000",
                "attributes": [{"key": "step", "value": {"stringValue": name}}],
            }
            for span_id, name in spans
        ],
        service,
        "cli-tests",
    )


def pb_request(trace_id: str, spans: list[tuple[str, str]], service: str = "cli-svc") -> bytes:
    request = trace_request(
        [
            Span(
                trace_id=bytes.fromhex(trace_id),
                span_id=bytes.fromhex(span_id),
                name=name,
                kind=Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=1_700_000_000_000_000_000,
                end_time_unix_nano=1_700_000_000_002_000_000,
                attributes=key_values({"step": name}),
            )
            for span_id, name in spans
        ],
        service,
        "cli-tests",
    )
    return request.SerializeToString()


FIRST = [("a000000000000001", "alpha"), ("a000000000000002", "beta")]
SECOND = [("b000000000000001", "gamma")]
THIRD = [("c000000000000001", "delta"), ("c000000000000002", "epsilon")]


def expected_rows(*groups: tuple[str, list[tuple[str, str]]]) -> list[dict[str, Any]]:
    rows = [
        {"name": name, "trace_id": trace, "span_id": span_id, "service_name": "cli-svc", "step": name}
        for trace, spans in groups
        for span_id, name in spans
    ]
    return sorted(rows, key=lambda r: r["name"])


def write_capture(tmp_path: Path, kind: str) -> tuple[Path, int, list[dict[str, Any]]]:
    """A capture file of one format: (path, requests in it, the span rows it must store)."""
    lines = [json_doc(TRACE_A, FIRST), json_doc(TRACE_B, SECOND)]
    two = expected_rows((TRACE_A, FIRST), (TRACE_B, SECOND))
    if kind == "jsonl":
        path = tmp_path / "capture.jsonl"
        path.write_bytes(b"\n".join(orjson.dumps(d) for d in lines) + b"\n")
        return path, 2, two
    if kind == "json-single":
        path = tmp_path / "capture.json"
        path.write_bytes(orjson.dumps(lines[0]))
        return path, 1, expected_rows((TRACE_A, FIRST))
    if kind == "json-array":
        path = tmp_path / "capture.json"
        path.write_bytes(orjson.dumps(lines))
        return path, 2, two
    if kind == "protobuf":
        path = tmp_path / "capture.pb"
        path.write_bytes(pb_request(TRACE_A, FIRST))
        return path, 1, expected_rows((TRACE_A, FIRST))
    if kind == "protobuf-stream":
        path = tmp_path / "capture.binpb"
        messages = [pb_request(TRACE_A, FIRST), pb_request(TRACE_B, SECOND), pb_request(TRACE_A, THIRD)]
        path.write_bytes(b"".join(struct.pack(">I", len(m)) + m for m in messages))
        return path, 3, expected_rows((TRACE_A, FIRST), (TRACE_B, SECOND), (TRACE_A, THIRD))
    if kind == "jsonl-gz":
        path = tmp_path / "capture.jsonl.gz"
        path.write_bytes(gzip.compress(b"\n".join(orjson.dumps(d) for d in lines)))
        return path, 2, two
    raise AssertionError(kind)


SPAN_QUERY = (
    "SELECT name, trace_id, span_id, service_name, attributes->>'step' AS step FROM spans ORDER BY name"
)


def stored(db: Path, cwd: Path, *via: str) -> list[dict[str, Any]]:
    run = ragpulse("sql", SPAN_QUERY, *(via or ("--db", str(db))), "--format", "json", cwd=cwd)
    assert run.code == 0, run
    rows: list[dict[str, Any]] = run.json()
    return rows


def count(db: Path, cwd: Path, *args: str, env: dict[str, str] | None = None) -> int:
    run = ragpulse("sql", "SELECT count(*) AS n FROM spans", *args, "--format", "json", cwd=cwd, env=env)
    assert run.code == 0, run
    return int(run.json()[0]["n"])


# ---------------------------------------------------------------- replay into a file, sql on the file


FORMATS = ["jsonl", "json-single", "json-array", "protobuf", "protobuf-stream", "jsonl-gz"]


def test_replay_each_format_into_db(tmp_path):
    cases = {}
    for kind in FORMATS:
        folder = tmp_path / kind
        folder.mkdir()
        path, requests, rows = write_capture(folder, kind)
        db = folder / "replayed.duckdb"
        cases[kind] = (db, requests, rows, spawn("replay", str(path), "--db", str(db), cwd=folder))
    queries = {}
    for kind, (db, requests, rows, pending) in cases.items():
        run = pending.result()
        assert run.code == 0, (kind, run)
        assert run.out.strip() == (
            f"replayed {requests} request(s) into {db}: {len(rows)} span(s) stored, 0 rejected, "
            f"{len({r['trace_id'] for r in rows})} trace(s) assembled"
        ), kind
        queries[kind] = spawn("sql", SPAN_QUERY, "--db", str(db), "--format", "json", cwd=db.parent)
    for kind, pending in queries.items():
        run = pending.result()
        assert run.code == 0, (kind, run)
        assert run.json() == cases[kind][2], kind
    # Replayed traces are sampled (and scored) as the service would.
    db = cases["jsonl"][0]
    decided = ragpulse(
        "sql",
        "SELECT DISTINCT sample_decision, sample_reason FROM traces",
        "--db",
        str(db),
        "--format",
        "json",
        cwd=db.parent,
    )
    assert decided.json() == [{"sample_decision": "skip", "sample_reason": "not_applicable"}]


def test_replay_partial_rejection_and_output_formats(tmp_path):
    doc = json_doc(TRACE_A, [*FIRST, ("00", "bad-id")])
    path = tmp_path / "partial.jsonl"
    path.write_bytes(orjson.dumps(doc) + b"\n")
    db = tmp_path / "p.duckdb"
    run = ragpulse("replay", str(path), "--db", str(db), cwd=tmp_path)
    assert run.code == 0, run
    assert run.out.strip() == (
        f"replayed 1 request(s) into {db}: 2 span(s) stored, 1 rejected, 1 trace(s) assembled"
    )
    assert "rejected:" in run.err and "span_id must be 8 bytes" in run.err and "Traceback" not in run.err
    assert stored(db, tmp_path) == expected_rows((TRACE_A, FIRST))

    query = "SELECT name, span_id FROM spans ORDER BY name"
    as_csv = spawn("sql", query, "--db", str(db), "--format", "csv", cwd=tmp_path)
    table = spawn("sql", query, "--db", str(db), cwd=tmp_path)
    limited = spawn("sql", query, "--db", str(db), "--format", "json", "--max-rows", "1", cwd=tmp_path)
    detail = spawn(
        "sql",
        "SELECT attributes, parent_span_id, start_time FROM spans ORDER BY name LIMIT 1",
        "--db",
        str(db),
        "--format",
        "json",
        cwd=tmp_path,
    )

    run = as_csv.result()
    assert run.code == 0, run
    assert list(csv.reader(io.StringIO(run.out))) == [
        ["name", "span_id"],
        ["alpha", "a000000000000001"],
        ["beta", "a000000000000002"],
    ]
    run = table.result()
    assert run.code == 0, run
    header = next(line for line in run.out.splitlines() if "name" in line)
    assert "span_id" in header
    assert "alpha" in run.out and "a000000000000002" in run.out
    assert "2 row(s)" in run.out
    run = limited.result()
    assert run.code == 0, run
    assert run.json() == [{"name": "alpha", "span_id": "a000000000000001"}]
    assert "stopped at 1 rows" in run.err
    # JSON columns come back as JSON, NULLs as null, timestamps as ISO text.
    assert detail.result().json() == [
        {"attributes": {"step": "alpha"}, "parent_span_id": None, "start_time": "2023-11-14T22:13:20"}
    ]


def test_sql_on_file_ignores_a_stale_server_file(tmp_path):
    path, _, rows = write_capture(tmp_path, "jsonl")
    db = tmp_path / "stale.duckdb"
    assert ragpulse("replay", str(path), "--db", str(db), cwd=tmp_path).code == 0
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    Path(f"{db}.server.json").write_bytes(
        orjson.dumps({"pid": int(dead.stdout), "http_url": "http://127.0.0.1:1"})
    )
    assert stored(db, tmp_path) == rows


# ---------------------------------------------------------------- a running `ragpulse serve`


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    cwd = tmp_path_factory.mktemp("served")
    srv = ServeProcess(cwd / "served.duckdb", cwd / "serve.log")
    try:
        srv.start()
        yield srv
    finally:
        if srv.proc is not None:
            srv.terminate(30)
        srv.cleanup()


def test_sql_goes_through_the_advertised_server(server, tmp_path):
    info = orjson.loads(Path(f"{server.db}.server.json").read_bytes())
    assert info["pid"] == server.proc.pid and info["http_url"] == server.http_url
    # The file is held by the server: this works only through its API.
    assert count(server.db, tmp_path, "--db", str(server.db)) == count(
        server.db, tmp_path, "--server", server.http_url
    )
    run = ragpulse("sql", "SELECT 41 + 1 AS x", "--server", server.http_url, "--format", "json", cwd=tmp_path)
    assert run.json() == [{"x": 42}]


def test_a_query_without_rows_still_shows_its_columns(server, tmp_path):
    """No row: the table and the CSV still have their header (the columns asked for), through the
    server as on the file; a statement that cannot be described is printed as before."""
    empty = "SELECT trace_id, name AS span_name FROM spans WHERE false"
    as_csv = ragpulse("sql", empty, "--server", server.http_url, "--format", "csv", cwd=tmp_path)
    assert as_csv.out == "trace_id,span_name\n", as_csv.err
    table = ragpulse("sql", empty, "--server", server.http_url, cwd=tmp_path)
    assert "trace_id" in table.out and "span_name" in table.out and "0 row(s)" in table.out
    as_json = ragpulse("sql", empty, "--server", server.http_url, "--format", "json", cwd=tmp_path)
    assert as_json.json() == []


def test_replay_through_server_url_and_advertised_db(server, tmp_path):
    before = count(server.db, tmp_path, "--server", server.http_url)
    path, requests, rows = write_capture(tmp_path, "jsonl")
    run = ragpulse("replay", str(path), "--server", server.http_url, cwd=tmp_path)
    assert run.code == 0, run
    assert (
        run.out.strip()
        == f"replayed {requests} request(s) into {server.http_url}: {len(rows)} span(s) stored, 0 rejected"
    )
    assert count(server.db, tmp_path, "--db", str(server.db)) == before + len(rows)

    pb_path, pb_requests, pb_rows = write_capture(tmp_path, "protobuf-stream")
    run = ragpulse("replay", str(pb_path), "--db", str(server.db), cwd=tmp_path)
    assert run.code == 0, run
    # The file is held, so the spans went through the server that advertises it.
    assert run.out.strip() == (
        f"replayed {pb_requests} request(s) into {server.http_url}: {len(pb_rows)} span(s) stored, 0 rejected"
    )
    # The second capture holds spans of the first again: stored twice, each shown once.
    distinct = {(r["trace_id"], r["span_id"]) for r in rows + pb_rows}
    assert count(server.db, tmp_path, "--db", str(server.db)) == before + len(distinct)
    names = ragpulse(
        "sql",
        "SELECT DISTINCT name FROM spans ORDER BY name",
        "--db",
        str(server.db),
        "--format",
        "json",
        cwd=tmp_path,
    ).json()
    assert [r["name"] for r in names] == sorted({r["name"] for r in rows + pb_rows})


def test_server_sql_errors_are_clear(server, tmp_path):
    delete = spawn("sql", "DELETE FROM spans", "--db", str(server.db), cwd=tmp_path)
    invalid = spawn("sql", "SELEC 1", "--server", server.http_url, cwd=tmp_path)
    unreachable = spawn("sql", "SELECT 1", "--server", f"http://127.0.0.1:{free_port()}", cwd=tmp_path)
    assert_user_errors(
        [
            (delete, ("only read-only queries", "DELETE")),
            (invalid, ("invalid SQL", "SELEC")),
            (unreachable, ("cannot reach ragpulse",)),
        ]
    )


def test_serve_on_a_held_db_fails_with_a_clear_error(server, tmp_path):
    second = ragpulse(
        "serve",
        "--db",
        str(server.db),
        "--grpc-port",
        str(free_port()),
        "--http-port",
        str(free_port()),
        cwd=tmp_path,
    )
    assert_user_error(second, "in use by another process", "ragpulse serve")
    # The running server is untouched and still advertised.
    assert orjson.loads(Path(f"{server.db}.server.json").read_bytes())["pid"] == server.proc.pid
    assert httpx.get(f"{server.http_url}/healthz", timeout=5).status_code == 200


def test_serve_on_a_busy_http_port_fails_with_a_clear_error(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = ragpulse(
            "serve",
            "--db",
            str(tmp_path / "h.duckdb"),
            "--grpc-port",
            str(free_port()),
            "--http-port",
            str(port),
            cwd=tmp_path,
        )
    assert_user_error(run, "cannot listen for OTLP/HTTP", str(port), "in use")
    assert not Path(f"{tmp_path / 'h.duckdb'}.server.json").exists()


def test_serve_on_a_busy_grpc_port_fails_with_a_clear_error(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = ragpulse(
            "serve",
            "--db",
            str(tmp_path / "g.duckdb"),
            "--grpc-port",
            str(port),
            "--http-port",
            str(free_port()),
            cwd=tmp_path,
        )
    assert_user_error(run, "cannot listen for OTLP/gRPC", str(port))


def test_serve_on_the_grpc_port_of_another_serve_fails(server, tmp_path):
    # grpc sets SO_REUSEPORT by default: a second server could silently share the port.
    db = tmp_path / "other.duckdb"
    log = tmp_path / "second.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(RAGPULSE),
                "serve",
                "--db",
                str(db),
                "--grpc-port",
                str(server.grpc_port),
                "--http-port",
                "0",
            ],
            cwd=tmp_path,
            env=clean_env(),
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    advertised = server_file(db)
    wait_for(
        lambda: proc.poll() is not None or advertised.exists(),
        timeout=20,
        what="the second ragpulse serve to exit or to advertise itself",
    )
    started = advertised.exists()
    code = stop_process(proc)
    assert not started, (
        f"a second ragpulse serve started on gRPC port {server.grpc_port}, already served by pid "
        f"{server.proc.pid}: {log.read_text()[-300:]}"
    )
    assert_user_error(Run(code, "", log.read_text()), "cannot listen for OTLP/gRPC", str(server.grpc_port))


# ---------------------------------------------------------------- configuration


@pytest.fixture
def replayed_db(tmp_path: Path) -> tuple[Path, int]:
    path, _, rows = write_capture(tmp_path, "jsonl")
    db = tmp_path / "cfg.duckdb"
    run = ragpulse("replay", str(path), "--db", str(db), cwd=tmp_path)
    assert run.code == 0, run
    return db, len(rows)


def test_config_before_and_after_the_subcommand(tmp_path, replayed_db):
    db, n = replayed_db
    good = tmp_path / "a.yaml"
    good.write_text(f"store:\n  path: {db}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("store:\n  pth: x\n")
    q = "SELECT count(*) AS n FROM spans"
    runs = [
        spawn("--config", str(good), "sql", q, "--format", "json", cwd=tmp_path),
        spawn("sql", q, "--format", "json", "--config", str(good), cwd=tmp_path),
        # The later one wins.
        spawn("--config", str(bad), "sql", q, "--format", "json", "--config", str(good), cwd=tmp_path),
    ]
    refused = [
        spawn("--config", str(good), "sql", q, "--config", str(bad), cwd=tmp_path),
        spawn("--config", str(bad), "sql", q, cwd=tmp_path),
        spawn("replay", str(db), "--config", str(bad), cwd=tmp_path),
    ]
    for pending in runs:
        run = pending.result()
        assert run.code == 0, run
        assert run.json() == [{"n": n}]
    assert_user_errors([(pending, ("store.pth: unknown key", "bad.yaml")) for pending in refused])


def test_default_config_file_in_cwd(tmp_path, replayed_db):
    db, _ = replayed_db
    (tmp_path / "ragpulse.yaml").write_text(f"store: {{path: {db}}}\nsql: {{max_rows: 1}}\n")
    run = ragpulse("sql", "SELECT name FROM spans ORDER BY name", "--format", "json", cwd=tmp_path)
    assert run.code == 0, run
    assert run.json() == [{"name": "alpha"}]
    assert "stopped at 1 rows" in run.err


def test_config_errors_name_the_key(tmp_path):
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("store:\n  pth: x.duckdb\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("receivers:\n  grpc_port: 70000\n")
    not_yaml = tmp_path / "broken.yaml"
    not_yaml.write_text("store: [unclosed\n")
    not_mapping = tmp_path / "list.yaml"
    not_mapping.write_text("- a\n- b\n")
    evaluator = tmp_path / "evaluator.yaml"
    evaluator.write_text("evaluators:\n  - {name: retrieval.recall@5}\n  - {name: no_such_evaluator}\n")
    option = tmp_path / "option.yaml"
    option.write_text("evaluators: [{name: retrieval.recall@5, coverage: 0.5}]\n")
    judge_only = tmp_path / "judge-only.yaml"
    judge_only.write_text("evaluators: [{name: faithfulness, mode: claims}]\n")
    db = tmp_path / "never.duckdb"
    serve = ("serve", "--db", str(db), "--grpc-port", "0", "--http-port", "0")
    runs = [
        # The service refuses evaluators it could not build before it opens anything.
        (
            spawn(*serve, "--config", str(evaluator), cwd=tmp_path),
            ("evaluators[1].name", "no_such_evaluator"),
        ),
        (spawn(*serve, "--config", str(option), cwd=tmp_path), ("evaluators[0].coverage", "unknown option")),
        (spawn(*serve, "--config", str(judge_only), cwd=tmp_path), ("evaluators[0].mode", "judge")),
        (spawn("sql", "SELECT 1", "--config", str(unknown), cwd=tmp_path), ("store.pth: unknown key",)),
        (spawn("--config", str(bad), "sql", "SELECT 1", cwd=tmp_path), ("receivers.grpc_port", "65535")),
        (spawn("serve", "--config", str(bad), cwd=tmp_path), ("receivers.grpc_port", "65535")),
        (
            spawn("--config", str(not_yaml), "sql", "SELECT 1", cwd=tmp_path),
            ("broken.yaml", "not valid YAML"),
        ),
        (spawn("--config", str(not_mapping), "sql", "SELECT 1", cwd=tmp_path), ("must be a mapping",)),
        (
            spawn("--config", str(tmp_path / "missing.yaml"), "sql", "SELECT 1", cwd=tmp_path),
            ("missing.yaml",),
        ),
    ]
    assert_user_errors(runs)
    assert not db.exists()


def test_env_overrides(tmp_path, replayed_db):
    db, n = replayed_db
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    q = "SELECT count(*) AS n FROM spans"
    selected = spawn("sql", q, "--format", "json", cwd=elsewhere, env=clean_env(RAGPULSE_STORE__PATH=str(db)))
    bad_port = spawn("sql", "SELECT 1", cwd=elsewhere, env=clean_env(RAGPULSE_RECEIVERS__GRPC_PORT="abc"))
    unknown = spawn("sql", "SELECT 1", cwd=elsewhere, env=clean_env(RAGPULSE_STORE__PTH="x"))
    run = selected.result()
    assert run.code == 0, run
    assert run.json() == [{"n": n}]
    line = assert_user_error(bad_port.result(), "receivers.grpc_port")
    assert "integer" in line
    assert_user_error(unknown.result(), "store.pth: unknown key")


# ---------------------------------------------------------------- user errors


def test_sql_errors_on_a_file_are_clear(tmp_path, replayed_db):
    db, n = replayed_db
    cases = [
        ("SELEC 1", ("invalid SQL", "SELEC")),
        ("SELECT * FROM nope", ("nope",)),
        ("DELETE FROM spans", ("not DELETE",)),
        ("SELECT * FROM read_csv('/etc/passwd')", ("disabled",)),
    ]
    runs = [(spawn("sql", q, "--db", str(db), cwd=tmp_path), f) for q, f in cases]
    runs.append(
        (spawn("sql", "SELECT 1", "--db", str(tmp_path / "absent.duckdb"), cwd=tmp_path), ("does not exist",))
    )
    assert_user_errors(runs)
    assert not (tmp_path / "absent.duckdb").exists()
    assert count(db, tmp_path, "--db", str(db)) == n  # nothing was deleted


def test_replay_errors_are_clear(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello world, this is not OTLP\n")
    numbers = tmp_path / "numbers.json"
    numbers.write_text("[1, 2, 3]")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    lines = tmp_path / "lines.jsonl"
    lines.write_bytes(orjson.dumps(json_doc(TRACE_A, FIRST)) + b"\n{oops\n")
    fake_gz = tmp_path / "fake.jsonl.gz"
    fake_gz.write_bytes(b"not gzip at all")
    cases = [
        (tmp_path / "missing.jsonl", ("no such file", "missing.jsonl")),
        (text, ("notes.txt", "not an OTLP trace request")),
        (numbers, ("numbers.json", "not an OTLP trace request")),
        (broken, ("broken.json", "not valid JSON")),
        (lines, ("lines.jsonl:2", "not an OTLP trace request")),
        (fake_gz, ("fake.jsonl.gz", "not valid gzip")),
    ]
    runs = [
        (spawn("replay", str(path), "--db", str(tmp_path / f"r{i}.duckdb"), cwd=tmp_path), fragments)
        for i, (path, fragments) in enumerate(cases)
    ]
    usage = spawn("replay", str(lines), "--db", "x.duckdb", "--server", "http://127.0.0.1:1", cwd=tmp_path)
    assert_user_errors(runs)
    run = usage.result()
    assert run.code == 1 and "Traceback" not in run.err and "--server or --db" in run.err


CASES_YAML = """\
cases:
  - id: refund-1
    question: What is the refund window?
    expected_documents: [refund-window]
    expected_answer: 30 days.
    tags: [refunds]
  - id: 7
    question: How long does shipping take?
"""


def cases_rows(db: Path, cwd: Path, *via: str) -> list[dict[str, Any]]:
    query = (
        "SELECT case_id, question, normalized_question, expected_documents, expected_answer, metadata "
        "FROM cases ORDER BY case_id"
    )
    run = ragpulse("sql", query, *via, "--format", "json", cwd=cwd)
    assert run.code == 0, run
    rows: list[dict[str, Any]] = run.json()
    return rows


def test_datasets_load_into_a_file_replaces_by_id(tmp_path):
    path = tmp_path / "cases.yaml"
    path.write_text(CASES_YAML)
    db = tmp_path / "cases.duckdb"
    run = ragpulse("datasets", "load", str(path), "--db", str(db), cwd=tmp_path)
    assert run.code == 0, run
    assert run.out.strip() == f"loaded 2 case(s) from {path} into {db}"
    # Loading a changed file again replaces cases with the same id instead of adding rows.
    path.write_text(CASES_YAML.replace("30 days.", "Thirty days."))
    assert ragpulse("datasets", "load", str(path), "--db", str(db), cwd=tmp_path).code == 0
    assert cases_rows(db, tmp_path, "--db", str(db)) == [
        {
            "case_id": "7",  # a numeric id is kept as text
            "question": "How long does shipping take?",
            "normalized_question": "how long does shipping take",
            "expected_documents": None,
            "expected_answer": None,
            "metadata": {},
        },
        {
            "case_id": "refund-1",
            "question": "What is the refund window?",
            "normalized_question": "what is the refund window",
            "expected_documents": ["refund-window"],
            "expected_answer": "Thirty days.",
            "metadata": {"tags": ["refunds"]},
        },
    ]


def test_datasets_load_goes_through_the_advertised_server(server, tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_text(
        '{"id": "srv-1", "question": "Do you price match?", "expected_documents": ["price-match"]}\n'
    )
    run = ragpulse("datasets", "load", str(path), "--db", str(server.db), cwd=tmp_path)
    assert run.code == 0, run
    assert run.out.strip() == f"loaded 1 case(s) from {path} into {server.http_url}"
    rows = [
        r for r in cases_rows(server.db, tmp_path, "--server", server.http_url) if r["case_id"] == "srv-1"
    ]
    assert [(r["question"], r["expected_documents"]) for r in rows] == [
        ("Do you price match?", ["price-match"])
    ]


def test_datasets_load_errors_are_clear(tmp_path):
    missing_question = tmp_path / "bad.yaml"
    missing_question.write_text("cases:\n  - {id: a}\n")
    duplicate = tmp_path / "dup.yaml"
    duplicate.write_text("- {id: a, question: q}\n- {id: a, question: r}\n")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": "a", "question": "q"}\n{not json\n')
    db = str(tmp_path / "c.duckdb")
    assert_user_errors(
        [
            (
                spawn("datasets", "load", str(missing_question), "--db", db, cwd=tmp_path),
                ("case 1", "question"),
            ),
            (spawn("datasets", "load", str(duplicate), "--db", db, cwd=tmp_path), ("duplicate id 'a'",)),
            (
                spawn("datasets", "load", str(broken), "--db", db, cwd=tmp_path),
                ("broken.jsonl:2", "not valid JSON"),
            ),
            (
                spawn("datasets", "load", str(tmp_path / "none.yaml"), "--db", db, cwd=tmp_path),
                ("cannot read",),
            ),
        ]
    )


def test_bad_options_exit_1_as_every_input_error_and_bare_ragpulse_shows_its_help(tmp_path: Path) -> None:
    # `check` keeps 2 for "too little data": a typo must not read as a quiet hour in CI.
    for args in (["check", "--since", "1x", "--regression"], ["sql", "--bogus"], ["nosuch"], ["--config"]):
        result = run_ragpulse(*args, cwd=tmp_path)
        assert result.returncode == 1, (args, result.stderr)
        assert result.stderr.strip().splitlines()[-1].startswith("Error: "), result.stderr
        assert "Traceback" not in result.stderr
    bare = run_ragpulse(cwd=tmp_path)
    assert bare.returncode == 0 and "Commands:" in bare.stdout + bare.stderr


def test_the_serve_log_opens_with_where_to_look_and_closes_with_the_stop(tmp_path: Path) -> None:
    srv = ServeProcess(tmp_path / "served.duckdb", tmp_path / "serve.log")
    try:
        srv.start()
    finally:
        code = srv.terminate(30)
        srv.cleanup()
    assert code == 0
    lines = [line.split(": ", 1)[1] for line in srv.log.read_text().splitlines() if ": " in line]
    listening = [line for line in lines if line.startswith("ragpulse listening")]
    assert listening and listening[0].endswith(f"dashboard {srv.http_url}/"), lines
    assert lines[-2:] == ["ragpulse stopping: committing what was accepted", "ragpulse stopped"], lines
    # The MCP SDK's session manager says nothing of its own start and stop at INFO.
    assert not any("StreamableHTTP session manager" in line for line in lines), lines
