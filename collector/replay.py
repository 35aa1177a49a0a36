"""`ragpulse replay`: captured OTLP traffic back into ragpulse.

Formats, chosen by file name (a `.gz` suffix is decompressed first):
- `.jsonl` / `.ndjson`: one OTLP/JSON request per line (the OpenTelemetry Collector file exporter);
- `.json`: one OTLP/JSON request, or a JSON array of them;
- anything else: protobuf, either one `ExportTraceServiceRequest` / `TracesData`, or a stream of
  them each prefixed by its length as a 4-byte big-endian integer (the file exporter's proto format).
"""

from __future__ import annotations

import gzip
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from collector.api_client import auth_headers, verify_for
from collector.config import Config
from collector.otlp.batch import concat_batches, decode_request
from collector.otlp.json_request import UndecodableBody, parse_json_request
from collector.pipeline import IngestPipeline
from collector.processors.assembly.assembler import TraceAssembler
from collector.processors.slices import slicing
from collector.schema.span_records import records_by_trace, span_records
from collector.store import open_store
from collector.store.writer import SpanWriter
from collector.telemetry import Metrics
from semconv.mapping import map_trace
from semconv.models import RagTrace
from semconv.options import MappingOptions

JSON = "application/json"
PROTOBUF = "application/x-protobuf"


class ReplayError(ValueError):
    """A file that cannot be read as OTLP traffic."""


@dataclass
class ReplayReport:
    requests: int = 0
    accepted: int = 0
    rejected: int = 0
    traces: int | None = None  # traces assembled (replay into a file); a server assembles on its own
    errors: list[str] = field(default_factory=list)

    def note(self, message: str) -> None:
        if len(self.errors) < 10:
            self.errors.append(message)


@dataclass(frozen=True)
class CapturedRequest:
    body: bytes
    media_type: str
    where: str  # file and line / message number, for error messages


def _length_prefixed(data: bytes) -> list[bytes] | None:
    """Split a stream of 4-byte big-endian length-prefixed messages, or None if it is not one."""
    messages, offset = [], 0
    while offset < len(data):
        if offset + 4 > len(data):
            return None
        (size,) = struct.unpack_from(">I", data, offset)
        offset += 4
        if size == 0 or offset + size > len(data):
            return None
        messages.append(data[offset : offset + size])
        offset += size
    return messages or None


def _protobuf_messages(data: bytes) -> list[bytes]:
    framed = _length_prefixed(data)
    if framed is not None:
        try:
            for message in framed:
                ExportTraceServiceRequest.FromString(message)
            return framed
        except DecodeError:
            pass
    return [data]


def read_captured(path: Path) -> Iterator[CapturedRequest]:
    """The requests stored in one capture file, in order."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ReplayError(f"cannot read {path}: {exc.strerror or exc}") from None
    name = path.name.lower()
    if name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise ReplayError(f"{path} is not valid gzip: {exc}") from None
        name = name[:-3]
    if name.endswith((".jsonl", ".ndjson")):
        for number, line in enumerate(data.splitlines(), 1):
            if line.strip():
                yield CapturedRequest(line, JSON, f"{path}:{number}")
    elif name.endswith(".json"):
        try:
            document = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ReplayError(f"{path} is not valid JSON: {exc}") from None
        documents = document if isinstance(document, list) else [document]
        for number, item in enumerate(documents, 1):
            yield CapturedRequest(orjson.dumps(item), JSON, f"{path}[{number}]")
    else:
        for number, message in enumerate(_protobuf_messages(data), 1):
            yield CapturedRequest(message, PROTOBUF, f"{path}#{number}")


def parse_captured(captured: CapturedRequest) -> tuple[ExportTraceServiceRequest, int, list[str]]:
    """A captured request as protobuf, with the spans the JSON decoder already rejected."""
    try:
        if captured.media_type == JSON:
            parsed = parse_json_request(captured.body)
            return parsed.request, parsed.rejected, parsed.errors
        return ExportTraceServiceRequest.FromString(captured.body), 0, []
    except (UndecodableBody, DecodeError) as exc:
        raise ReplayError(f"{captured.where}: not an OTLP trace request: {exc}") from None


def replay_to_server(paths: list[Path], server_url: str, timeout: float = 30.0) -> ReplayReport:
    """POST every captured request to a running server's /v1/traces, retrying while it is busy."""
    report = ReplayReport()
    url = server_url.rstrip("/") + "/v1/traces"
    with httpx.Client(timeout=timeout, headers=auth_headers(), verify=verify_for(url)) as client:
        for path in paths:
            for captured in read_captured(path):
                response = _post(client, url, captured)
                report.requests += 1
                if response.status_code != 200:
                    raise ReplayError(
                        f"{captured.where}: server answered {response.status_code}: "
                        f"{_status_message(response)}"
                    )
                rejected, message = _partial_success(response, captured.media_type)
                report.rejected += rejected
                if message:
                    report.note(f"{captured.where}: {message}")
                report.accepted += _span_count(captured) - rejected
    return report


def _post(client: httpx.Client, url: str, captured: CapturedRequest) -> httpx.Response:
    for _ in range(60):
        try:
            response = client.post(url, content=captured.body, headers={"Content-Type": captured.media_type})
        except httpx.HTTPError as exc:
            raise ReplayError(f"cannot reach ragpulse at {url}: {exc}") from None
        if response.status_code not in (429, 503):
            return response
        time.sleep(float(response.headers.get("retry-after", "1")))
    raise ReplayError(f"{captured.where}: server stayed busy; gave up")


def _status_message(response: httpx.Response) -> str:
    try:
        return str(orjson.loads(response.content).get("message", response.text))
    except (orjson.JSONDecodeError, AttributeError):
        return response.text[:200]


def _partial_success(response: httpx.Response, media_type: str) -> tuple[int, str]:
    if media_type == JSON:
        body = orjson.loads(response.content or b"{}")
        partial = body.get("partialSuccess") or {}
        return int(partial.get("rejectedSpans", 0)), str(partial.get("errorMessage", ""))
    message = ExportTraceServiceResponse.FromString(response.content)
    return message.partial_success.rejected_spans, message.partial_success.error_message


def _span_count(captured: CapturedRequest) -> int:
    """How many spans a captured request carries (valid or not), without decoding them."""
    if captured.media_type == PROTOBUF:
        request = ExportTraceServiceRequest.FromString(captured.body)
        return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    document = orjson.loads(captured.body)
    count = 0
    for rs in document.get("resourceSpans") or document.get("resource_spans") or []:
        for ss in rs.get("scopeSpans") or rs.get("scope_spans") or []:
            count += len(ss.get("spans") or [])
    return count


def replay_to_store(paths: list[Path], config: Config) -> ReplayReport:
    """Write every captured request straight into the database file, through the ingest pipeline."""
    report = ReplayReport()
    metrics = Metrics()
    store = open_store(config.store_beside_workers())
    writer = SpanWriter(store, metrics, config.store.max_queue_spans, config.store.max_commit_spans)
    writer.start()
    try:
        # The database gets what `serve` would have stored: redacted when `redaction:` says so.
        storage = config.redaction.redactor("storage")
        pipeline = IngestPipeline(writer, metrics, redactor=storage)
        for path in paths:
            for captured in read_captured(path):
                request, rejected, errors = parse_captured(captured)
                outcome, committed = pipeline.submit(request, "replay", rejected, errors)
                committed.result()
                report.requests += 1
                report.accepted += outcome.accepted
                report.rejected += outcome.rejected
                if outcome.message:
                    report.note(f"{captured.where}: {outcome.message}")
        writer.stop()
        if config.assembler.enabled:
            # Scored like the service would; judge-sampled traces stay pending for `serve` to judge.
            scoring = config.scoring_setup()
            dimensions, caps = slicing(
                store,
                config.monitoring.dimensions,
                config.monitoring.dimension_rerank_every,
                time.monotonic(),
            )
            assembler = TraceAssembler(
                store,
                config.assembler,
                metrics,
                scoring=scoring,
                dimensions=dimensions,
                caps=caps,
                mapping=config.mapping.options(),
            )
            try:
                report.traces = assembler.assemble_stored()
            finally:
                assembler.stop()
    finally:
        writer.stop()
        store.close()
    return report


def read_trace(path: Path, trace_id: str | None = None, options: MappingOptions | None = None) -> RagTrace:
    """One trace from a captured OTLP file (any format `read_captured` reads), mapped to a RagTrace.

    `trace_id` picks the trace when the file holds several; `ReplayError` when it is missing or
    ambiguous.
    """
    batches = [decode_request(parse_captured(captured)[0], source="file") for captured in read_captured(path)]
    if not batches:
        raise ReplayError(f"{path}: no spans")
    batch = concat_batches(batches)
    by_trace = records_by_trace(span_records(batch.spans, batch.events))
    if trace_id is None:
        if len(by_trace) != 1:
            raise ReplayError(f"{path}: holds {len(by_trace)} traces; say which with `trace_id:`")
        trace_id = next(iter(by_trace))
    spans = by_trace.get(trace_id.lower())
    if not spans:
        raise ReplayError(f"{path}: no trace {trace_id}")
    return map_trace(spans, options)
