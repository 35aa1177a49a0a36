"""TLS on both receivers and the API from `tls:`, with a CA and certificates made in the test:
the real SDK exporters connect over TLS (gRPC and HTTP) with their certificate options, plaintext
is refused, mutual TLS refuses a client without a certificate, and the CLI reaches an HTTPS server
with $RAGPULSE_CA_FILE (and a client certificate)."""

from __future__ import annotations

import secrets
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from collector.config import ConfigError
from collector.service import BackgroundService, Service
from tests.support.certificates import Pki, make_pki
from tests.support.helpers import clean_env, make_config, run_ragpulse


@pytest.fixture(autouse=True)
def no_requests_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    """`requests` lets $REQUESTS_CA_BUNDLE / $CURL_CA_BUNDLE override the CA a session was given
    (psf/requests#3829), and the Python SDK's HTTP exporter goes through `requests`: a machine that
    sets them (this one does) would silently ignore `certificate_file`."""
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_served(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    config = make_config(
        tmp_path_factory.mktemp("tls"),
        tls={"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)},
    )
    with BackgroundService(config) as service:
        yield service


@pytest.fixture(scope="module")
def mtls_served(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    config = make_config(
        tmp_path_factory.mktemp("mtls"),
        tls={
            "cert_file": str(pki.server_cert),
            "key_file": str(pki.server_key),
            "client_ca_file": str(pki.ca),
        },
    )
    with BackgroundService(config) as service:
        yield service


def send_one(exporter: SpanExporter) -> tuple[SpanExportResult, str]:
    """One span through `exporter` (the real SDK); its result and trace id."""
    results: list[SpanExportResult] = []

    class Recording(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            results.append(exporter.export(spans))
            return results[-1]

    provider = TracerProvider(resource=Resource.create({"service.name": "tls-test"}))
    provider.add_span_processor(SimpleSpanProcessor(Recording()))
    with provider.get_tracer("test").start_as_current_span("rag.request") as span:
        trace_id = format(span.get_span_context().trace_id, "032x")
    provider.shutdown()
    return results[0], trace_id


def stored(service: Service, trace_id: str, pki: Pki, client_cert: bool = False) -> int:
    """How many spans of `trace_id` the store holds, asked over HTTPS."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    if client_cert:
        context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    response = httpx.post(
        f"{service.http_url}/api/sql",
        json={"query": f"SELECT count(*) AS n FROM spans WHERE trace_id = '{trace_id}'"},
        verify=context,
        timeout=10,
    )
    assert response.status_code == 200, response.text
    return int(response.json()[0]["n"])


def grpc_exporter(
    service: Service, pki: Pki, cert: Path | None = None, key: Path | None = None
) -> GrpcSpanExporter:
    credentials = grpc.ssl_channel_credentials(
        pki.ca.read_bytes(),
        key.read_bytes() if key else None,
        cert.read_bytes() if cert else None,
    )
    return GrpcSpanExporter(endpoint=f"127.0.0.1:{service.grpc_port}", credentials=credentials, timeout=3)


def test_the_http_url_is_https(tls_served: Service) -> None:
    assert tls_served.http_url.startswith("https://127.0.0.1:")


def test_sdk_exporters_send_over_tls(tls_served: Service, pki: Pki) -> None:
    result, trace_id = send_one(grpc_exporter(tls_served, pki))
    assert result is SpanExportResult.SUCCESS
    assert stored(tls_served, trace_id, pki) == 1

    http = HttpSpanExporter(
        endpoint=f"{tls_served.http_url}/v1/traces", certificate_file=str(pki.ca), timeout=3
    )
    result, trace_id = send_one(http)
    assert result is SpanExportResult.SUCCESS
    assert stored(tls_served, trace_id, pki) == 1


def test_sdk_exporters_take_the_certificate_from_the_standard_variable(
    tls_served: Service, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(pki.ca))
    result, trace_id = send_one(HttpSpanExporter(endpoint=f"{tls_served.http_url}/v1/traces", timeout=3))
    assert result is SpanExportResult.SUCCESS
    assert stored(tls_served, trace_id, pki) == 1


def test_plaintext_is_refused(tls_served: Service, pki: Pki) -> None:
    plain_grpc = GrpcSpanExporter(endpoint=f"127.0.0.1:{tls_served.grpc_port}", insecure=True, timeout=2)
    result, trace_id = send_one(plain_grpc)
    assert result is SpanExportResult.FAILURE
    assert stored(tls_served, trace_id, pki) == 0

    plain_url = tls_served.http_url.replace("https://", "http://")
    result, trace_id = send_one(HttpSpanExporter(endpoint=f"{plain_url}/v1/traces", timeout=2))
    assert result is SpanExportResult.FAILURE
    assert stored(tls_served, trace_id, pki) == 0
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{plain_url}/healthz", timeout=3)


def test_a_client_that_does_not_trust_the_ca_is_refused(tls_served: Service) -> None:
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{tls_served.http_url}/healthz", timeout=3)


def test_mutual_tls_needs_a_client_certificate_the_ca_signed(mtls_served: Service, pki: Pki) -> None:
    for cert, key in ((None, None), (pki.stranger_cert, pki.stranger_key)):
        result, trace_id = send_one(grpc_exporter(mtls_served, pki, cert, key))
        assert result is SpanExportResult.FAILURE
        assert stored(mtls_served, trace_id, pki, client_cert=True) == 0
        http = HttpSpanExporter(
            endpoint=f"{mtls_served.http_url}/v1/traces",
            certificate_file=str(pki.ca),
            client_certificate_file=str(cert) if cert else None,
            client_key_file=str(key) if key else None,
            timeout=3,
        )
        result, trace_id = send_one(http)
        assert result is SpanExportResult.FAILURE
        assert stored(mtls_served, trace_id, pki, client_cert=True) == 0

    result, trace_id = send_one(grpc_exporter(mtls_served, pki, pki.client_cert, pki.client_key))
    assert result is SpanExportResult.SUCCESS
    http = HttpSpanExporter(
        endpoint=f"{mtls_served.http_url}/v1/traces",
        certificate_file=str(pki.ca),
        client_certificate_file=str(pki.client_cert),
        client_key_file=str(pki.client_key),
        timeout=3,
    )
    result, second = send_one(http)
    assert result is SpanExportResult.SUCCESS
    assert stored(mtls_served, trace_id, pki, client_cert=True) == 1
    assert stored(mtls_served, second, pki, client_cert=True) == 1


def test_the_cli_reaches_an_https_server(mtls_served: Service, pki: Pki, tmp_path: Path) -> None:
    query = ("sql", "--server", mtls_served.http_url, "SELECT 41 + 1 AS answer")
    refused = run_ragpulse(*query, cwd=tmp_path, env=clean_env(RAGPULSE_CA_FILE=str(pki.ca)))
    assert refused.returncode != 0
    assert "Traceback" not in refused.stderr

    env = clean_env(
        RAGPULSE_CA_FILE=str(pki.ca),
        RAGPULSE_CLIENT_CERT=str(pki.client_cert),
        RAGPULSE_CLIENT_KEY=str(pki.client_key),
    )
    answered = run_ragpulse(*query, "--format", "csv", cwd=tmp_path, env=env)
    assert answered.returncode == 0, answered.stderr
    assert "42" in answered.stdout

    # A TLS variable meant for another server does not get in the way of a plaintext one.
    plain = tmp_path / "plain"
    plain.mkdir()
    with BackgroundService(make_config(plain)) as served_plain:
        answered_plain = run_ragpulse(
            "sql",
            "--server",
            served_plain.http_url,
            "SELECT 1 AS one",
            cwd=tmp_path,
            env=clean_env(RAGPULSE_CA_FILE=str(tmp_path / "nope.pem")),
        )
    assert answered_plain.returncode == 0, answered_plain.stderr

    missing = run_ragpulse(*query, cwd=tmp_path, env=clean_env(RAGPULSE_CA_FILE=str(tmp_path / "nope.pem")))
    assert missing.returncode != 0
    assert "RAGPULSE_CA_FILE" in missing.stderr
    assert "Traceback" not in missing.stderr


@pytest.mark.parametrize(
    ("tls", "message"),
    [
        ({"cert_file": "c.pem"}, "tls: Value error, cert_file and key_file go together"),
        ({"client_ca_file": "ca.pem"}, "tls: Value error, client_ca_file (mutual TLS) needs"),
        ({"cert_file": "c.pem", "key_file": "k.pem", "tls_version": 3}, "tls.tls_version: unknown key"),
    ],
)
def test_incomplete_tls_config_names_the_key(tls: dict[str, Any], message: str, tmp_path: Path) -> None:
    (tmp_path / "ragpulse.yaml").write_text(f"tls: {tls!r}\n".replace("'", '"'))
    result = run_ragpulse("serve", "--config", str(tmp_path / "ragpulse.yaml"), cwd=tmp_path)
    assert result.returncode != 0
    assert message in result.stderr


def test_unusable_certificate_files_stop_the_start(pki: Pki, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate " + secrets.token_hex(8))
    cases = [
        ((tmp_path / "none.pem", pki.server_key), r"tls\.cert_file: no such file"),
        ((pki.server_cert, pki.client_key), "cannot be used"),  # a key that is not the certificate's
        ((garbage, garbage), "cannot be used"),
    ]
    for (cert, key), message in cases:
        config = make_config(tmp_path, tls={"cert_file": str(cert), "key_file": str(key)})
        with pytest.raises(ConfigError, match=message), BackgroundService(config):
            pass
