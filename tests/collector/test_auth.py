"""API keys on every surface: OTLP/gRPC and OTLP/HTTP (traces and logs), the SQL and cases API, the
dashboard and its API, /metrics. Without a key: 401 / UNAUTHENTICATED; with a key lacking the scope:
403 / PERMISSION_DENIED; nothing stored either way. The real SDK exporters send keys the standard
way (OTEL_EXPORTER_OTLP_HEADERS); the CLI sends `--key` / $RAGPULSE_KEY."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

from collector.auth import AuthConfig, Decision, Keyring, KeyringError
from collector.auth.keys import key_of
from collector.config import ConfigError
from collector.service import BackgroundService, Service
from tests.support.helpers import clean_env, make_config, run_ragpulse, trace_request

INGEST, READ, ADMIN = (secrets.token_urlsafe(24) for _ in range(3))
GRPC_TRACES = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
GRPC_LOGS = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp_path = tmp_path_factory.mktemp("auth")
    for name, key in (("ingest", INGEST), ("read", READ), ("admin", ADMIN)):
        (tmp_path / name).write_text(key + "\n")
    config = make_config(
        tmp_path,
        auth={
            "keys": [
                {"name": "app", "key_file": str(tmp_path / "ingest"), "scopes": ["ingest"]},
                {"name": "analysts", "key_file": str(tmp_path / "read"), "scopes": ["read"]},
                {"name": "ops", "key_file": str(tmp_path / "admin"), "scopes": ["admin"]},
            ]
        },
    )
    with BackgroundService(config) as service:
        yield service


def one_span(service_name: str) -> bytes:
    """An OTLP/protobuf trace export of one span."""
    span = Span(
        trace_id=secrets.token_bytes(16),
        span_id=secrets.token_bytes(8),
        name="rag.request",
        start_time_unix_nano=1_700_000_000_000_000_000,
        end_time_unix_nano=1_700_000_000_100_000_000,
    )
    return trace_request([span], service_name, "test").SerializeToString()


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def span_count(service: Service) -> int:
    return int(sql_as(service, "SELECT count(*) AS n FROM spans")[0]["n"])


def sql_as(service: Service, query: str) -> list[dict[str, Any]]:
    response = httpx.post(
        f"{service.http_url}/api/sql", json={"query": query}, headers=bearer(READ), timeout=10
    )
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()
    return rows


def grpc_call(service: Service, method: str, body: bytes, key: str | None) -> grpc.StatusCode:
    with grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        call = channel.unary_unary(method)
        metadata = [("authorization", f"Bearer {key}")] if key else None
        try:
            call(body, metadata=metadata, timeout=10)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


@pytest.mark.parametrize("method", [GRPC_TRACES, GRPC_LOGS])
def test_grpc_exports_need_an_ingest_key(served: Service, method: str) -> None:
    body = one_span("auth-grpc") if method == GRPC_TRACES else ExportLogsServiceRequest().SerializeToString()
    before = span_count(served)
    assert grpc_call(served, method, body, None) == grpc.StatusCode.UNAUTHENTICATED
    assert grpc_call(served, method, body, "not-a-key-of-ours-at-all") == grpc.StatusCode.UNAUTHENTICATED
    assert grpc_call(served, method, body, READ) == grpc.StatusCode.PERMISSION_DENIED
    assert span_count(served) == before  # nothing stored
    assert grpc_call(served, method, body, INGEST) == grpc.StatusCode.OK


@pytest.mark.parametrize("signal", ["traces", "logs"])
@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_http_exports_need_an_ingest_key(served: Service, signal: str, encoding: str) -> None:
    before = span_count(served)
    url = f"{served.http_url}/v1/{signal}"
    if encoding == "json":
        content, media = b'{"resourceSpans": []}' if signal == "traces" else b'{"resourceLogs": []}', "json"
    else:
        content, media = one_span("auth-http") if signal == "traces" else b"", "x-protobuf"
    headers = {"Content-Type": f"application/{media}"}

    def post(key: str | None) -> httpx.Response:
        return httpx.post(url, content=content, headers={**headers, **bearer(key)}, timeout=10)

    missing, wrong_scope = post(None), post(READ)
    assert missing.status_code == 401 and "Bearer" in missing.headers["www-authenticate"]
    assert wrong_scope.status_code == 403
    # The refusal is a google.rpc.Status in the request's encoding, as exporters expect.
    assert missing.headers["content-type"].startswith(f"application/{media}")
    assert span_count(served) == before
    assert post(INGEST).status_code == 200


def test_the_sdk_exporters_send_keys_from_the_standard_variable(
    served: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_EXPORTER_OTLP_HEADERS (URL-encoded `key=value`) is how every SDK and the Collector send it."""

    def export(exporter: Any) -> SpanExportResult:
        provider = TracerProvider(resource=Resource.create({"service.name": "auth-sdk"}))
        results: list[SpanExportResult] = []

        class Recording(SimpleSpanProcessor):
            def on_end(self, span: Any) -> None:
                results.append(self.span_exporter.export([span]))

        provider.add_span_processor(Recording(exporter))
        with provider.get_tracer("test").start_as_current_span("rag.request"):
            pass
        provider.shutdown()
        return results[0]

    def exporters() -> list[Any]:
        return [
            GrpcSpanExporter(endpoint=f"127.0.0.1:{served.grpc_port}", insecure=True, timeout=5),
            HttpSpanExporter(endpoint=f"{served.http_url}/v1/traces", timeout=5),
        ]

    for exporter in exporters():  # no key: refused (and not retried: 401 / UNAUTHENTICATED are final)
        assert export(exporter) == SpanExportResult.FAILURE
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer%20{INGEST}")
    for exporter in exporters():
        assert export(exporter) == SpanExportResult.SUCCESS
    assert sql_as(served, "SELECT count(*) AS n FROM spans WHERE service_name = 'auth-sdk'")[0]["n"] == 2


@pytest.mark.parametrize(
    ("method", "path", "scope"),
    [
        ("POST", "/api/sql", "read"),
        ("GET", "/api/overview", "read"),
        ("GET", "/api/traces", "read"),
        ("GET", "/api/alerts", "read"),
        ("GET", "/", "read"),
        ("GET", "/ui/app.js", "read"),
        ("POST", "/api/cases", "admin"),
    ],
)
def test_api_and_dashboard_need_their_scope(served: Service, method: str, path: str, scope: str) -> None:
    body = {"query": "SELECT 1 AS one"} if path == "/api/sql" else {"source": "t", "cases": []}
    keys = {"read": READ, "admin": ADMIN}

    def call(key: str | None) -> httpx.Response:
        return httpx.request(
            method,
            f"{served.http_url}{path}",
            json=body if method == "POST" else None,
            headers=bearer(key),
            timeout=10,
        )

    missing = call(None)
    assert missing.status_code == 401 and missing.json()["error"].startswith("a valid API key is required")
    assert call(INGEST).status_code == 403
    assert call(keys[scope]).status_code == 200
    other = ADMIN if scope == "read" else READ  # scopes are independent: admin is not read, nor read admin
    assert call(other).status_code == 403


def test_a_browser_sends_the_key_as_a_basic_password(served: Service) -> None:
    """A 401 offers Basic too: the browser asks for a user name (any) and password (the key), then
    sends them with every request of the dashboard."""
    assert (
        'Basic realm="ragpulse"' in httpx.get(f"{served.http_url}/", timeout=10).headers["www-authenticate"]
    )
    assert httpx.get(f"{served.http_url}/", auth=("anyone", READ), timeout=10).status_code == 200
    assert (
        httpx.get(f"{served.http_url}/api/overview", auth=("anyone", INGEST), timeout=10).status_code == 403
    )


def test_health_is_open_and_metrics_open_by_default(served: Service) -> None:
    assert httpx.get(f"{served.http_url}/healthz", timeout=10).status_code == 200
    assert httpx.get(f"{served.http_url}/api/alerts", headers=bearer(INGEST), timeout=10).status_code == 403
    metrics = httpx.get(f"{served.http_url}/metrics", timeout=10)
    assert metrics.status_code == 200
    # Refusals are counted by surface and reason.
    forbidden = 'ragpulse_auth_refusals_total{reason="forbidden",surface="http"}'
    (line,) = [line for line in metrics.text.splitlines() if line.startswith(forbidden)]
    assert float(line.split()[-1]) >= 1


def test_metrics_can_need_a_read_key(tmp_path: Path) -> None:
    (tmp_path / "read").write_text(READ)
    config = make_config(
        tmp_path,
        auth={
            "metrics": "read",
            "keys": [{"name": "r", "key_file": str(tmp_path / "read"), "scopes": ["read"]}],
        },
    )
    with BackgroundService(config) as service:
        assert httpx.get(f"{service.http_url}/metrics", timeout=10).status_code == 401
        assert httpx.get(f"{service.http_url}/metrics", headers=bearer(READ), timeout=10).status_code == 200
        assert httpx.get(f"{service.http_url}/healthz", timeout=10).status_code == 200


def test_the_cli_sends_its_key_to_the_server(served: Service, tmp_path: Path) -> None:
    query = ["sql", "SELECT 1 AS one", "--server", served.http_url, "--format", "json"]
    refused = run_ragpulse(*query, cwd=tmp_path)
    assert refused.returncode == 1
    assert "a valid API key is required" in refused.stderr and "--key" in refused.stderr
    assert run_ragpulse(*query, "--key", READ, cwd=tmp_path).returncode == 0
    assert run_ragpulse("--key", READ, *query, cwd=tmp_path).returncode == 0
    from_env = run_ragpulse(*query, cwd=tmp_path, env=clean_env(RAGPULSE_KEY=READ))
    assert from_env.returncode == 0 and '"one": 1' in from_env.stdout.replace('"one":1', '"one": 1')
    check = ["check", "--server", served.http_url, "--since", "1h", "--max-error-rate", "0.5"]
    assert run_ragpulse(*check, "--key", READ, cwd=tmp_path).returncode in (
        0,
        2,
    )  # answered: pass or too little data


def test_keys_are_not_logged(served: Service, caplog: pytest.LogCaptureFixture) -> None:
    attempt = secrets.token_urlsafe(24)
    httpx.post(
        f"{served.http_url}/v1/traces",
        content=one_span("auth-log"),
        headers={"Content-Type": "application/x-protobuf", **bearer(attempt)},
        timeout=10,
    )
    httpx.get(f"{served.http_url}/api/overview", headers=bearer(attempt), timeout=10)
    assert attempt not in caplog.text and READ not in caplog.text and INGEST not in caplog.text


# --------------------------------------------------------------------------- the keyring alone


def keyring(**keys: tuple[str, list[str]]) -> Keyring:
    environ = {f"K_{name.upper()}": secret for name, (secret, _) in keys.items()}
    config = AuthConfig.model_validate(
        {"keys": [{"name": n, "key_env": f"K_{n.upper()}", "scopes": s} for n, (_, s) in keys.items()]}
    )
    return Keyring.from_config(config, environ)


def test_keyring_decisions() -> None:
    ring = keyring(app=(INGEST, ["ingest"]), ops=(ADMIN, ["ingest", "read", "admin"]))
    assert ring.check(f"Bearer {INGEST}", "ingest") is Decision.ALLOWED
    assert ring.check(f"bearer   {INGEST}  ", "ingest") is Decision.ALLOWED  # the scheme is case-insensitive
    assert ring.check(f"Bearer {INGEST}", "read") is Decision.FORBIDDEN
    assert ring.check(f"Bearer {INGEST}x", "ingest") is Decision.UNAUTHENTICATED
    assert ring.check(None, "ingest") is Decision.UNAUTHENTICATED
    assert ring.check(INGEST, "ingest") is Decision.UNAUTHENTICATED  # no scheme
    assert ring.check(f"Bearer {ADMIN}", "read") is Decision.ALLOWED
    assert Keyring.from_config(AuthConfig()).check(None, "admin") is Decision.ALLOWED  # no keys: open


def test_basic_and_bearer_parsing() -> None:
    basic = base64.b64encode(f"user:{READ}".encode()).decode()
    assert key_of(f"Basic {basic}") == READ
    assert key_of("Basic !!not-base64!!") is None
    assert key_of(f"Basic {base64.b64encode(b'user-only').decode()}") is None
    assert key_of("Digest abc") is None and key_of("Bearer ") is None and key_of("") is None


def test_bad_keys_are_refused_at_start_with_their_name(tmp_path: Path) -> None:
    with pytest.raises(
        KeyringError, match=r"auth.keys\[0\] \(app\): the environment variable NOPE is not set"
    ):
        Keyring.from_config(
            AuthConfig.model_validate({"keys": [{"name": "app", "key_env": "NOPE", "scopes": ["read"]}]}), {}
        )
    with pytest.raises(KeyringError, match="at least 16 characters"):
        keyring(app=("short", ["read"]))
    missing = AuthConfig.model_validate(
        {"keys": [{"name": "f", "key_file": str(tmp_path / "none"), "scopes": ["read"]}]}
    )
    with pytest.raises(KeyringError, match=r"auth.keys\[0\] \(f\): cannot read"):
        Keyring.from_config(missing)
    config = make_config(
        tmp_path, auth={"keys": [{"name": "app", "key_env": "RAGPULSE_TEST_UNSET", "scopes": ["read"]}]}
    )
    with pytest.raises(ConfigError, match="RAGPULSE_TEST_UNSET is not set"), BackgroundService(config):
        pass


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ([{"name": "a", "scopes": ["read"]}], "exactly one of key_env"),
        ([{"name": "a", "key_env": "X", "key_file": "f", "scopes": ["read"]}], "exactly one of key_env"),
        ([{"name": "a", "key_env": "X", "scopes": ["write"]}], "scopes.0"),
        ([{"name": "a", "key_env": "X", "scopes": []}], "scopes"),
        (
            [
                {"name": "a", "key_env": "X", "scopes": ["read"]},
                {"name": "a", "key_env": "Y", "scopes": ["read"]},
            ],
            "unique",
        ),
    ],
)
def test_bad_auth_config_names_the_key(keys: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AuthConfig.model_validate({"keys": keys})
