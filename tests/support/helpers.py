"""Helpers shared by the test modules: running `ragpulse`, polling, talking to a service over
/api/sql, /metrics and OTLP/HTTP, building OTLP requests, and reading mapped traces.

Fixtures live in tests/conftest.py; everything here is a plain function or class, imported as
`from tests.support.helpers import ...`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import duckdb
import grpc
import httpx
import pyarrow as pa
import pytest
from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Tracer
from prometheus_client.parser import text_string_to_metric_families

from collector.config import Config
from collector.otlp.batch import SpanBatch, decode_request
from collector.schema.tables import DOCUMENTS, SCORES, STEPS, TRACES
from collector.schema.trace_rows import TraceTables
from collector.server_file import server_file
from collector.store.base import Store
from semconv import RAG_STEP_KINDS, RagTrace, Step, emit

if TYPE_CHECKING:
    from collector.service import Service

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]


def _installed_script() -> Path:
    """The `ragpulse` script next to this interpreter, else the one in the repository's .venv."""
    beside = Path(sys.executable).with_name("ragpulse")
    return beside if beside.exists() else REPO / ".venv" / "bin" / "ragpulse"


RAGPULSE = _installed_script()


# --------------------------------------------------------------------------- processes and polling


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without RAGPULSE_* variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
    env.update(extra)
    return env


def run_ragpulse(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the installed `ragpulse` to completion (environment: `clean_env()` unless given)."""
    return subprocess.run(
        [str(RAGPULSE), *args],
        cwd=cwd,
        env=clean_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def free_port() -> int:
    """A loopback TCP port that nothing listens on (bound once, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(
    read: Callable[[], T],
    done: Callable[[T], object] = bool,
    *,
    timeout: float = 15,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll `read()` every `interval` s until `done(value)` and return that value; fail on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}; last value: {value!r}")
        time.sleep(interval)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
    """SIGTERM `proc` (when still running) and return its exit code; kill it and fail if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            pytest.fail(f"{proc.args!r} did not exit within {timeout} s of SIGTERM")
    return int(proc.returncode)


def run_threads(count: int, target: Callable[[int], None], timeout: float = 60) -> None:
    """Run `target(0)` ... `target(count - 1)` in threads at once; fail if one is still running after."""
    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"


# --------------------------------------------------------------------------- configuration


def make_config(tmp_path: Path, **sections: dict[str, Any]) -> Config:
    """A config on free loopback ports and a fresh database file; `sections` override keys."""
    data: dict[str, Any] = {
        "receivers": {"host": "127.0.0.1", "grpc_port": 0, "http_port": 0},
        "store": {"path": str(tmp_path / "ragpulse.duckdb")},
        # Map in the assembler thread: a worker process per test service would cost a second of
        # start-up each. The worker-process path has its own tests.
        "assembler": {"workers": 0},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return Config.model_validate(data)


def fast_assembler(**values: Any) -> dict[str, Any]:
    """Assembler settings for tests: short decision wait, fast polling, short wait for company
    before a write; `values` override."""
    return {"decision_wait": 0.3, "poll_interval": 0.05, "batch_wait": 0.1, **values}


# --------------------------------------------------------------------------- talking to a service


class Served(Protocol):
    """A ragpulse on loopback: an in-process `Service` or a `ragpulse serve` subprocess."""

    @property
    def http_url(self) -> str: ...

    @property
    def grpc_port(self) -> int: ...


def http_url_of(target: Served | str) -> str:
    """The OTLP/HTTP and API base URL of a service, or `target` itself when it is a URL."""
    return target if isinstance(target, str) else target.http_url


def sql(target: Served | str, query: str) -> list[dict[str, Any]]:
    """Rows of a query through the running service's /api/sql."""
    response = httpx.post(f"{http_url_of(target)}/api/sql", json={"query": query}, timeout=30)
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()
    return rows


def file_rows(db: Path, query: str) -> list[dict[str, Any]]:
    """Rows of a query on a database file no service holds, opened read-only."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        cursor = con.execute(query)
        names = [d[0] for d in cursor.description or []]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    finally:
        con.close()


def file_execute(db: Path, *statements: str) -> None:
    """Run SQL statements on a database file no service holds (created when missing), then close it."""
    con = duckdb.connect(str(db))
    try:
        for statement in statements:
            con.execute(statement)
    finally:
        con.close()


def metric_samples(target: Served | str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample called `name` on the service's /metrics."""
    text = httpx.get(f"{http_url_of(target)}/metrics", timeout=10).text
    return [
        (dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def metric(target: Served | str, metric_name: str, /, **labels: str) -> float:
    """A sample's value on /metrics: 0 for a labelled child never touched; an unlabelled one must exist."""
    name = metric_name
    for sample_labels, value in metric_samples(target, name):
        if sample_labels == labels:
            return value
    if labels:
        return 0.0
    raise AssertionError(f"metric {name} not exposed")


def post_otlp(
    target: Served | str,
    body: Any,
    content_type: str | None,
    encoding: str | None = None,
    *,
    signal: str = "traces",
    timeout: float = 30,
) -> httpx.Response:
    """POST a body to the service's OTLP/HTTP `/v1/{signal}` with these Content-Type and -Encoding."""
    headers = {}
    if content_type is not None:
        headers["Content-Type"] = content_type
    if encoding:
        headers["Content-Encoding"] = encoding
    return httpx.post(f"{http_url_of(target)}/v1/{signal}", content=body, headers=headers, timeout=timeout)


# --------------------------------------------------------------------------- OTLP requests and SDK exporters


def any_value(value: Any) -> AnyValue:
    """The OTLP AnyValue of a Python value (bool, int, float, str, bytes, list, dict)."""
    out = AnyValue()
    if isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, bytes):
        out.bytes_value = value
    elif isinstance(value, list):
        out.array_value.values.extend(any_value(v) for v in value)
    elif isinstance(value, dict):
        out.kvlist_value.values.extend(key_values(value))
    else:
        raise TypeError(f"no OTLP value for {value!r}")
    return out


def key_values(attributes: Mapping[str, Any]) -> list[KeyValue]:
    """OTLP attributes (KeyValue list) of a mapping, in its order."""
    return [KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()]


def trace_request(
    spans: Iterable[Span], service_name: str, scope_name: str, scope_version: str = ""
) -> ExportTraceServiceRequest:
    """A protobuf export of `spans` under one resource (`service.name`) and one scope."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.extend(key_values({"service.name": service_name}))
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name, scope_spans.scope.version = scope_name, scope_version
    scope_spans.spans.extend(spans)
    return request


def root_spans_request(count: int, **attributes: Any) -> tuple[ExportTraceServiceRequest, list[str]]:
    """An export of `count` root spans, each its own trace, started now and 100 ms long, with these
    attributes; and the span ids it carries (hex), to look them up once stored."""
    now = time.time_ns()
    spans = [
        Span(
            trace_id=secrets.token_bytes(16),
            span_id=secrets.token_bytes(8),
            name="rag-query",
            start_time_unix_nano=now,
            end_time_unix_nano=now + 100_000_000,
            attributes=key_values(attributes),
        )
        for _ in range(count)
    ]
    return trace_request(spans, "tests", "tests"), [s.span_id.hex() for s in spans]


def named_spans_batch(names: Iterable[str], service_name: str = "tests") -> SpanBatch:
    """The decoded batch of one export of bare spans named `names`, in order, each in a trace of its
    own (random ids), 100 ms long."""
    spans = [
        Span(
            trace_id=secrets.token_bytes(16),
            span_id=secrets.token_bytes(8),
            name=name,
            start_time_unix_nano=1_700_000_000_000_000_000,
            end_time_unix_nano=1_700_000_000_100_000_000,
        )
        for name in names
    ]
    return decode_request(trace_request(spans, service_name, "tests"))


def trace_request_json(spans: list[Any], service_name: str, scope_name: str) -> dict[str, Any]:
    """An OTLP/JSON export of `spans` under one resource (`service.name`) and one scope."""
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": service_name}}]}
    return {
        "resourceSpans": [
            {"resource": resource, "scopeSpans": [{"scope": {"name": scope_name}, "spans": spans}]}
        ]
    }


_EXPORTERS: dict[tuple[str, str], Any] = {
    ("traces", "grpc"): GrpcSpanExporter,
    ("traces", "http"): HttpSpanExporter,
    ("logs", "grpc"): GrpcLogExporter,
    ("logs", "http"): HttpLogExporter,
}


def sdk_exporter(target: Served, signal: str, transport: str, use_gzip: bool = False) -> Any:
    """The OpenTelemetry SDK's OTLP exporter of `signal` ("traces", "logs") over "grpc" or "http"."""
    exporter = _EXPORTERS[(signal, transport)]
    if transport == "grpc":
        return exporter(
            endpoint=f"127.0.0.1:{target.grpc_port}",
            insecure=True,
            timeout=10,
            compression=grpc.Compression.Gzip if use_gzip else grpc.Compression.NoCompression,
        )
    return exporter(
        endpoint=f"{target.http_url}/v1/{signal}",
        timeout=10,
        compression=HttpCompression.Gzip if use_gzip else HttpCompression.NoCompression,
    )


def sdk_tracer_provider(target: Served, service_name: str, transport: str = "http") -> TracerProvider:
    """An SDK TracerProvider that exports every span at its end to the service (SimpleSpanProcessor)."""
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(SimpleSpanProcessor(sdk_exporter(target, "traces", transport)))
    return provider


def emit_rag_request(
    tracer: Tracer,
    question: str,
    document: str,
    answer: str,
    before_root_ends: Callable[[], object] | None = None,
    on_chat: Callable[[Any], object] | None = None,
) -> str:
    """One RAG request in the ragpulse convention, through the real SDK: a root, a retrieval of one
    document (`crm-1`) and a chat step. `on_chat(span)` runs on the chat step's span before it ends
    (an attribute, an event); `before_root_ends` once the children have ended, before the root does.
    Returns the trace id (hex)."""
    with emit.request(tracer, question) as request:
        with emit.retrieval(tracer, question, data_source="kb", top_k=1) as step:
            step.documents([{"id": "crm-1", "score": 0.9, "content": document}])
        with emit.chat(tracer, model="gpt-test", provider="openai") as chat:
            chat.messages([{"role": "user", "content": question}])
            chat.output(answer, input_tokens=50, output_tokens=12)
            if on_chat is not None:
                on_chat(chat.span)
        request.answer(answer)
        if before_root_ends is not None:
            before_root_ends()
        return format(request.span.get_span_context().trace_id, "032x")


class EarlierTracer:
    """A tracer whose spans start and end `ago` seconds in the past (`semconv.emit` only calls
    `start_as_current_span`): traffic of the last hours, sent now."""

    def __init__(self, tracer: Tracer, ago: float) -> None:
        self._tracer = tracer
        self._shift = int(ago * 1e9)

    @contextlib.contextmanager
    def start_as_current_span(self, name: str, **kwargs: Any) -> Iterator[trace_api.Span]:
        start = time.time_ns() - self._shift
        with self._tracer.start_as_current_span(name, start_time=start, end_on_exit=False, **kwargs) as span:
            yield span
        span.end(end_time=time.time_ns() - self._shift)


def versioned_provider(target: Served, version: str, transport: str = "grpc") -> TracerProvider:
    """An SDK TracerProvider of the service `shop-bot` at `service.version` `version` (a resource
    attribute, for slices by version), exporting every span at its end."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": "shop-bot", "service.version": version})
    )
    provider.add_span_processor(SimpleSpanProcessor(sdk_exporter(target, "traces", transport)))
    return provider


def emit_topic_request(tracer: Any, question: str, topic: str, category: str | None, right: bool) -> str:
    """One RAG request about `topic` (with `rag.category` when `category` is given) that expects the
    document `<topic>-doc` and retrieves it (`right`) or an unrelated one. Returns the trace id."""
    attributes = {"rag.category": category} if category else {}
    with emit.request(tracer, question, attributes=attributes) as request:
        request.expected([f"{topic}-doc"], None)
        with emit.retrieval(tracer, question, data_source="kb", top_k=1) as step:
            found = f"{topic}-doc" if right else "unrelated-doc"
            step.documents([{"id": found, "score": 0.9, "content": f"About {topic}."}])
        with emit.chat(tracer, model="gpt-test", provider="openai") as chat:
            chat.messages([{"role": "user", "content": question}])
            chat.output(f"About {topic}.", input_tokens=10, output_tokens=5)
        request.answer(f"About {topic}.")
        return format(request.span.get_span_context().trace_id, "032x")


# --------------------------------------------------------------------------- `ragpulse serve` as a subprocess


class ServeProcess:
    """`ragpulse serve` as a subprocess on fixed ports (a restart is reachable at the same address),
    for tests that kill it. `start(**assembler)` sets `RAGPULSE_ASSEMBLER__*` for that run."""

    def __init__(self, db: Path, log: Path, config: Path | None = None) -> None:
        self.db = db
        self.log = log
        self.config = config
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, **assembler: str) -> None:
        """Start it and wait until it answers /healthz and advertises itself in its server file."""
        assert self.proc is None or self.proc.poll() is not None
        env = clean_env(PYTHONUNBUFFERED="1")
        env.update({f"RAGPULSE_ASSEMBLER__{k.upper()}": v for k, v in assembler.items()})
        command = [str(RAGPULSE), "serve", "--db", str(self.db)]
        command += ["--grpc-port", str(self.grpc_port), "--http-port", str(self.http_port)]
        if self.config is not None:
            command += ["--config", str(self.config)]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=self.db.parent, env=env
            )
        try:
            wait_for(self._ready, timeout=30, what=f"ragpulse serve on {self.http_url} to become ready")
        except pytest.fail.Exception as exc:
            self.cleanup()
            pytest.fail(f"{exc.msg}\n{self.log.read_text()}")

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            pytest.fail(f"ragpulse serve exited with {self.proc.returncode}")
        if not server_file(self.db).exists():
            return False
        try:
            return httpx.get(f"{self.http_url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        """SIGKILL it and wait for it to be gone."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(10) == -signal.SIGKILL

    def terminate(self, timeout: float = 15) -> int:
        """SIGTERM it and return its exit code; fail if it is not gone within `timeout` s."""
        assert self.proc is not None
        return stop_process(self.proc, timeout)

    def cleanup(self) -> None:
        """Kill it if it still runs (the end of a test, whatever happened)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


# --------------------------------------------------------------------------- mapped traces


def one_step(trace: RagTrace, kind: str) -> Step:
    """The trace's only step of `kind`; fails when there are none or several."""
    steps = trace.steps_of(kind)
    assert len(steps) == 1, f"expected one {kind} step, got {[(s.name, s.span_ids) for s in steps]}"
    return steps[0]


def doc_tuples(step: Step) -> list[tuple[int, str | None, str | None, float | None]]:
    """(rank, id, content, score) of a step's documents, in the order the mapper gives them."""
    return [(d.rank, d.id, d.content, d.score) for d in step.documents]


def step_kinds(trace: RagTrace) -> list[str]:
    """The kinds of the trace's steps, in position order."""
    return [s.kind for s in sorted(trace.steps, key=lambda s: s.position)]


def rag_step_kinds(trace: RagTrace) -> list[str]:
    """`step_kinds` without the steps that are not RAG steps (chains, tools, ...)."""
    return [k for k in step_kinds(trace) if k in RAG_STEP_KINDS]


# The scores of the default evaluator list with no judge (one per entry of DEFAULT_ENTRIES).
DEFAULT_SCORE_NAMES = frozenset(
    {
        "retrieval.hit@5",
        "retrieval.recall@5",
        "retrieval.mrr@5",
        "retrieval.ndcg@5",
        "retrieval.map@5",
        "faithfulness",
        "context_recall",
        "context_entity_recall",
        "citation",
        "context_precision",
        "context_relevance",
        "answer_correctness",
        "answer_relevance",
    }
)


def seed_scores(
    store: Store,
    buckets: Sequence[datetime],
    names: Sequence[str],
    values: Sequence[float | None],
    services: Sequence[str] | str = "shop-bot",
    statuses: Sequence[str] | None = None,
    trace_ids: Sequence[str] | None = None,
    slices: Mapping[str, Sequence[str | None]] | None = None,
    replace: Sequence[str] = (),
) -> None:
    """Write score rows through the store's own path (so `score_aggregates` follows), column-wise:
    one row per bucket, name and value. A status not given is `pass` for a value of at least 0.5,
    `fail` below, `error` without a value. `slices` gives each row's trace a value per dimension
    (the store must have the dimension: `add_dimensions`): a trace row each, as assembly writes.
    `replace`: traces re-assembled, whose earlier rows these replace."""
    n = len(buckets)
    if statuses is None:
        statuses = ["error" if v is None else "pass" if v >= 0.5 else "fail" for v in values]
    columns = {
        "trace_id": list(trace_ids) if trace_ids is not None else [f"{i:032x}" for i in range(n)],
        "span_id": ["0" * 16] * n,
        "name": list(names),
        "value": list(values),
        "status": list(statuses),
        "service_name": [services] * n if isinstance(services, str) else list(services),
        "bucket": list(buckets),
        "created_at": list(buckets),
        "evaluator": ["deterministic"] * n,
        "revision": [1] * n,
    }
    traces = TRACES.arrow_schema().empty_table()
    if slices:
        traces = TRACES.arrow_table({"trace_id": columns["trace_id"]}, n)
        for dimension, values in slices.items():
            traces = traces.append_column(dimension, pa.array(list(values), pa.string()))
    empty = TraceTables(
        traces,
        STEPS.arrow_schema().empty_table(),
        DOCUMENTS.arrow_schema().empty_table(),
        scores=SCORES.arrow_table(columns, n),
    )
    store.write_traces(empty, replace)


# --------------------------------------------------------------------------- a judged example app


Verdict = Callable[[str, str], dict[str, Any]]  # (system prompt, user message) -> the judge's JSON


def verdict_responder(verdict: Verdict) -> Callable[[Any], str]:
    """A test judge's answer to each request: `verdict(system, user)` of its first and last
    messages, as JSON (for `tests.support.openai_stub.OpenAIStub`)."""

    def respond(request: Any) -> str:
        messages = request.json["messages"]
        return json.dumps(verdict(messages[0]["content"], messages[-1]["content"]))

    return respond


@contextlib.contextmanager
def judged_example_app(
    tmp_path: Path,
    runs: Sequence[str | tuple[str, str]],
    verdict: Verdict,
    judge: Mapping[str, Any] | None = None,
    **sections: Any,
) -> Iterator[Service]:
    """A running service fed the example app's questions once per run (a mode, or a mode and a
    service name), every trace judged by a test judge answering `verdict(system, user)`; yields once
    every trace's judge scores are in."""
    from collector.service import BackgroundService
    from collector.shop_assistant.runner import run as run_app
    from tests.support.openai_stub import OpenAIStub

    with OpenAIStub(responder=verdict_responder(verdict)) as stub:
        config = make_config(
            tmp_path,
            assembler=fast_assembler(),
            sampling={"judge_rate": 1.0, "budget": {"judge_calls_per_minute": None}},
            judge={
                "base_url": stub.base_url,
                "model": "judge-test",
                "api_key": "test",
                "max_retries": 0,
                **(judge or {}),
            },
            **sections,
        )
        with BackgroundService(config) as service:
            endpoint = f"127.0.0.1:{service.grpc_port}"
            sent = 0
            for run in runs:
                mode, service_name = (run, "shop-assistant") if isinstance(run, str) else run
                report = run_app(endpoint, mode=mode, labels=True, latency=0.05, service_name=service_name)
                assert report.ok
                sent += len(report.answers)
            done = "SELECT count(*) AS n FROM traces WHERE judge_status = 'done'"
            wait_for(lambda: sql(service, done)[0]["n"] == sent, timeout=90)
            yield service


def logs_request(*records: LogRecord) -> ExportLogsServiceRequest:
    """One OTLP logs export holding these records."""
    request = ExportLogsServiceRequest()
    scope_logs = request.resource_logs.add().scope_logs.add()
    scope_logs.log_records.extend(records)
    return request


def drop_schema_15(con: Any) -> None:
    """Take from a store (a connection in a transaction or not) what schema 15 added: re-scoring's
    tables, its view and the two columns of `scores`, to simulate a store of an older schema."""
    for statement in (
        "DROP VIEW scores_all",
        "DROP TABLE score_history",
        "DROP TABLE rescore_runs",
        "ALTER TABLE scores DROP COLUMN evaluator_version",
        "ALTER TABLE scores DROP COLUMN rescore_run",
    ):
        con.execute(statement)
