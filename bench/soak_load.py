"""The soak's load (bench/soak.py): OTLP/gRPC Exports of the shared load generator's RAG traces at a
steady rate, with span ids that follow from the batch number, so the acknowledged batches name every
span the service acknowledged. `BatchTemplate` patches one serialized request per batch,
`LoadSender` paces and sends them (retrying as the OpenTelemetry SDK does) and records each batch in a
`BatchRecord`."""

from __future__ import annotations

import queue
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from load_generator import build
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

SPANS_PER_TRACE = 4  # the shared load generator's shape: rag-query (root), retrieve, embed, llm
GOOD_EXPECTED, BAD_EXPECTED = b"doc-1", b"doc-9"  # rag.expected.documents: retrieved / not retrieved
_EXPECTED_PLACEHOLDER = b"doc-Q"
_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
# The OpenTelemetry SDK's OTLP/gRPC exporter retries these codes (and drops the batch on others).
RETRYABLE = {
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DATA_LOSS,
}
TRACES_PER_BATCH = 100  # traces in one Export request (one batch)


class BatchTemplate:
    """One Export request of `traces` traces of bench/load_generator.py (4 spans each), serialized
    once; `encode(batch, now_ns, bad)` patches ids, timestamps and one attribute in a copy of the
    bytes, so a batch costs a bytearray copy and a few thousand slice assignments, not a protobuf
    build.

    Ids are a function of the batch number, so the acknowledged batches name every acknowledged span:
    trace `seq = batch * traces + i` has trace id `prefix (8 bytes) + seq (8 bytes, big-endian)` and
    span k (0 root, 1 retrieve, 2 embed, 3 llm) the span id `seq * 4 + k + 1` (8 bytes, big-endian).
    The retrieval's documents are `doc-1`..`doc-4`; the root carries `rag.expected.documents`, `doc-1`
    (retrieval.hit@5 = 1) or, with `bad`, `doc-9` (hit@5 = 0). Every span starts at `now_ns`."""

    def __init__(self, traces: int, prefix: bytes) -> None:
        assert len(prefix) == 8
        self.traces, self.prefix = traces, prefix
        request = build(traces, seed=20261204)
        spans = request.resource_spans[0].scope_spans[0].spans
        assert len(spans) == traces * SPANS_PER_TRACE
        template_now = spans[0].start_time_unix_nano
        trace_ids, span_ids = [], []
        for i in range(traces):
            group = spans[i * SPANS_PER_TRACE : (i + 1) * SPANS_PER_TRACE]
            root, retrieve = group[0], group[1]
            assert not root.parent_span_id and root.name == "rag-query" and retrieve.name == "retrieve"
            kv = root.attributes.add(key="rag.expected.documents")
            kv.value.string_value = _EXPECTED_PLACEHOLDER.decode()
            for attribute in retrieve.attributes:
                found = re.fullmatch(r"retrieval\.documents\.(\d+)\.document\.id", attribute.key)
                if found:
                    attribute.value.string_value = f"doc-{int(found.group(1)) + 1}"
            trace_ids.append(root.trace_id)
            span_ids.append([s.span_id for s in group])
            assert all(s.trace_id == root.trace_id for s in group)
            assert all(s.start_time_unix_nano == template_now for s in group)
        data = request.SerializeToString()
        self.data = bytes(data)
        # Offsets of every placeholder in the serialized bytes, checked against the counts they must have.
        self.trace_at = [self._find(t, SPANS_PER_TRACE) for t in trace_ids]
        self.span_at = [
            [self._find(s, SPANS_PER_TRACE if k == 0 else 1) for k, s in enumerate(ids)] for ids in span_ids
        ]
        self.expected_at = self._find(_EXPECTED_PLACEHOLDER, traces)
        # fixed64 timestamps: tag 0x39 (field 7, start) / 0x41 (field 8, end), then 8 bytes little-endian.
        self.times: list[tuple[int, list[int]]] = []  # (offset from the start time, positions)
        deltas = {s.end_time_unix_nano - template_now for s in spans} | {0}
        for delta in sorted(deltas):
            value = (template_now + delta).to_bytes(8, "little")
            at = [p + 1 for p in self._find_all(b"\x39" + value) + self._find_all(b"\x41" + value)]
            self.times.append((delta, at))
        assert sum(len(at) for _, at in self.times) == 2 * len(spans)
        self.spans = len(spans)

    def _find_all(self, needle: bytes) -> list[int]:
        found, start = [], 0
        while (at := self.data.find(needle, start)) >= 0:
            found.append(at)
            start = at + 1
        return found

    def _find(self, needle: bytes, count: int) -> list[int]:
        found = self._find_all(needle)
        if len(found) != count:
            raise AssertionError(f"placeholder {needle!r} found {len(found)} times, expected {count}")
        return found

    def encode(self, batch: int, now_ns: int, bad: bool) -> bytes:
        out = bytearray(self.data)
        first = batch * self.traces
        prefix = self.prefix
        for i in range(self.traces):
            seq = first + i
            trace_id = prefix + seq.to_bytes(8, "big")
            for at in self.trace_at[i]:
                out[at : at + 16] = trace_id
            base = seq * SPANS_PER_TRACE + 1
            for k, positions in enumerate(self.span_at[i]):
                span_id = (base + k).to_bytes(8, "big")
                for at in positions:
                    out[at : at + 8] = span_id
        expected = BAD_EXPECTED if bad else GOOD_EXPECTED
        for at in self.expected_at:
            out[at : at + 5] = expected
        for delta, positions in self.times:
            value = (now_ns + delta).to_bytes(8, "little")
            for at in positions:
                out[at : at + 8] = value
        return bytes(out)

    def trace_hex_prefix(self) -> str:
        return self.prefix.hex()


@dataclass
class BatchRecord:
    """One batch: when it was due, when it was acknowledged (None: never), its attempts and the codes
    of the failed ones."""

    batch: int
    due: float
    bad: bool = False
    first_sent: float | None = None
    acked: float | None = None
    attempts: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    dropped: str | None = None  # a non-retryable answer (an SDK drops the batch): the code


class LoadSender:
    """Offers `rate` spans/s: a pacer thread queues one batch number every `traces * 4 / rate` s,
    `concurrency` sender threads encode and export them over OTLP/gRPC (one channel each),
    retrying retryable codes with a growing pause (0.2 s doubling to 2 s) for as long as the run
    lasts, as the OpenTelemetry SDK exporter retries. A batch is acknowledged when an Export returns
    OK without `partial_success.rejected_spans`; only those batches' spans count as acked.

    The queue holds batch numbers only, so a long refusal (a full disk, a restart) builds a backlog
    that costs nothing, and it is sent when the service takes exports again. A batch's bytes are
    encoded when first sent (its spans start then) and re-sent unchanged on retries. `bad_at(t)`
    says whether a batch sent at time t carries the bad expected document (the alert's flip)."""

    def __init__(
        self,
        target: str,
        template: BatchTemplate,
        rate: float,
        concurrency: int,
        bad_at: Callable[[float], bool],
    ) -> None:
        self.target, self.template, self.rate = target, template, rate
        self.concurrency, self.bad_at = concurrency, bad_at
        self.interval = template.spans / rate
        self.records: list[BatchRecord] = []
        self.lock = threading.Lock()
        self.todo: queue.Queue[BatchRecord | None] = queue.Queue()
        self.pacing = threading.Event()
        self.stopping = threading.Event()  # senders give up retrying (end of the drain)
        self.in_flight = 0
        self.codes: Counter[str] = Counter()  # every failed attempt's code
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self.pacing.set()
        self.threads = [threading.Thread(target=self._pace, name="soak-pacer", daemon=True)]
        self.threads += [
            threading.Thread(target=self._send, name=f"soak-sender-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        for thread in self.threads:
            thread.start()

    def stop_pacing(self) -> None:
        self.pacing.clear()

    def backlog(self) -> int:
        return self.todo.qsize() + self.in_flight

    def drain(self, timeout: float) -> bool:
        """After `stop_pacing`: wait until every queued batch was sent (acked or dropped), then stop the
        senders; True when the backlog emptied in time."""
        deadline = time.monotonic() + timeout
        while self.backlog() and time.monotonic() < deadline:
            time.sleep(0.2)
        drained = not self.backlog()
        self.stopping.set()
        for _ in range(self.concurrency):
            self.todo.put(None)
        for thread in self.threads:
            thread.join(10)
        return drained

    def _pace(self) -> None:
        started = time.monotonic()
        batch = 0
        while self.pacing.is_set():
            delay = started + batch * self.interval - time.monotonic()
            if delay > 0:
                time.sleep(min(delay, 0.5))
                continue
            record = BatchRecord(batch, time.time())
            with self.lock:
                self.records.append(record)
            self.todo.put(record)
            batch += 1

    def _send(self) -> None:
        options = [
            ("grpc.max_send_message_length", 64 << 20),
            # Reconnect soon after the service comes back (gRPC's default backoff grows to 120 s).
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.min_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", 1000),
        ]
        channel = grpc.insecure_channel(self.target, options=options)
        export = channel.unary_unary(
            _EXPORT, request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString
        )
        try:
            while True:
                record = self.todo.get()
                if record is None:
                    return
                with self.lock:
                    self.in_flight += 1
                try:
                    self._export(export, record)
                finally:
                    with self.lock:
                        self.in_flight -= 1
        finally:
            channel.close()

    def _export(self, export: Any, record: BatchRecord) -> None:
        now = time.time()
        record.first_sent = now
        record.bad = self.bad_at(now)
        payload = self.template.encode(record.batch, time.time_ns(), record.bad)
        pause = 0.2
        while not self.stopping.is_set():
            record.attempts += 1
            try:
                response = export(payload, timeout=30)
            except grpc.RpcError as exc:
                code = exc.code().name if exc.code() else "UNKNOWN"
                record.failures[code] += 1
                with self.lock:
                    self.codes[code] += 1
                if exc.code() not in RETRYABLE:
                    record.dropped = code
                    return
                time.sleep(pause)
                pause = min(2.0, pause * 2)
                continue
            if response.HasField("partial_success") and response.partial_success.rejected_spans:
                record.dropped = f"partial_success rejected {response.partial_success.rejected_spans}"
                return
            record.acked = time.time()
            return

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            records = list(self.records)
        acked = sum(1 for r in records if r.acked is not None)
        return {
            "batches_due": len(records),
            "batches_acked": acked,
            "spans_acked": acked * self.template.spans,
            "backlog_batches": self.backlog(),
        }
