"""A probe's requests (pure): the cases and results of a run, the request built from its templates,
the trace context and baggage it carries, and the client span ragpulse stores for it."""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from semconv import names

SCOPE_NAME = "ragpulse.probes"  # the instrumentation scope of ragpulse's client spans
_ENV_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ProbeError(Exception):
    """A run that cannot run at all (its cases cannot be read, a header variable is not set)."""


@dataclass(frozen=True)
class ProbeCase:
    case_id: str
    question: str


@dataclass
class ProbeResult:
    """One request of a run: what was sent and what came back."""

    case_id: str
    question: str
    trace_id: str  # ragpulse's trace (its client span's), which the app continues
    span_id: str
    method: str
    url: str
    start_ns: int
    end_ns: int
    http_status: int | None
    # answered (2xx) | http_error | timeout | unreachable | error | not_sent
    outcome: str
    error: str | None = None
    latency_ms: float | None = None

    @property
    def answered(self) -> bool:
        return self.outcome == "answered"

    @property
    def sent(self) -> bool:
        return self.outcome != "not_sent"


def fill(value: Any, question: str, case_id: str) -> Any:
    """`{question}` and `{case_id}` replaced in every string of `value` (dicts and lists walked)."""
    if isinstance(value, str):
        return value.replace("{question}", question).replace("{case_id}", case_id)
    if isinstance(value, dict):
        return {key: fill(item, question, case_id) for key, item in value.items()}
    if isinstance(value, list):
        return [fill(item, question, case_id) for item in value]
    return value


def request_url(template: str, question: str, case_id: str) -> str:
    """The URL with `{question}` and `{case_id}` replaced, percent-encoded (`?q={question}`)."""
    return template.replace("{question}", quote(question, safe="")).replace(
        "{case_id}", quote(case_id, safe="")
    )


def expand_headers(headers: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """Header values with `${VAR}` read from `environ`; a variable that is not set is a ProbeError
    naming the header and the variable."""
    expanded = {}
    for name, value in headers.items():

        def variable(match: re.Match[str], header: str = name) -> str:
            found = environ.get(match.group(1))
            if found is None:
                raise ProbeError(
                    f"request.headers.{header}: environment variable {match.group(1)} is not set"
                )
            return found

        expanded[name] = _ENV_VAR.sub(variable, value)
    return expanded


def baggage_header(entries: Mapping[str, str]) -> str:
    """A W3C `baggage` value: `key=value` pairs, values percent-encoded."""
    return ",".join(f"{key}={quote(value, safe='')}" for key, value in entries.items())


def trace_headers(trace_id: str, span_id: str, probe: str, case_id: str) -> dict[str, str]:
    """The trace context of one probe request: the app continues ragpulse's trace under its span."""
    return {
        "traceparent": f"00-{trace_id}-{span_id}-01",
        "baggage": baggage_header({names.RAG_CASE_ID: case_id, names.RAG_PROBE: probe}),
    }


def new_ids() -> tuple[str, str]:
    """A fresh trace id (32 hex digits) and span id (16), never all zeros."""
    while True:
        trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
        if int(trace_id, 16) and int(span_id, 16):
            return trace_id, span_id


def _attribute(key: str, value: str | int) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def client_span_request(
    probe: str, service_name: str, run_id: str, result: ProbeResult
) -> ExportTraceServiceRequest:
    """ragpulse's CLIENT span of one probe request, as an OTLP export: the root of the trace the app
    continues (no parent), with the question, the case, the probe and its run, and the HTTP call;
    status ERROR with the reason when the request failed."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.append(_attribute("service.name", service_name))
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = SCOPE_NAME
    span = scope_spans.spans.add()
    span.trace_id = bytes.fromhex(result.trace_id)
    span.span_id = bytes.fromhex(result.span_id)
    span.kind = Span.SpanKind.SPAN_KIND_CLIENT
    span.name = f"probe {probe}"
    span.start_time_unix_nano = result.start_ns
    span.end_time_unix_nano = max(result.end_ns, result.start_ns)
    attributes: list[tuple[str, str | int]] = [
        (names.RAG_PROBE, probe),
        (names.RAG_PROBE_RUN, run_id),
        (names.RAG_CASE_ID, result.case_id),
        (names.RAG_QUESTION, result.question),
        ("http.request.method", result.method),
        ("url.full", result.url),
    ]
    if result.http_status is not None:
        attributes.append(("http.response.status_code", result.http_status))
    span.attributes.extend(_attribute(key, value) for key, value in attributes)
    if result.error is not None:
        span.status.code = Status.StatusCode.STATUS_CODE_ERROR
        span.status.message = result.error
    return request
