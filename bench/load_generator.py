#!/usr/bin/env python3
"""OTLP load generator: OpenInference RAG traces, the traffic every ingest-side benchmark sends.

`build(n_traces, seed)` gives one ExportTraceServiceRequest of `n_traces` traces, all in one resource
(`service.name = rag-load`) and one scope. Each trace has 4 spans, all starting at the moment the
request is built, with ids and numbers drawn from `random.Random(seed)` (the same seed and clock give
the same bytes):

- `rag-query`, the root: `openinference.span.kind = CHAIN`, 900 ms, `input.value` a refund question
  naming a random order number, `output.value` a one-sentence answer;
- `retrieve`, its child: `RETRIEVER`, 50 ms, the question as `input.value` and 4 documents in
  OpenInference's flattened form (`retrieval.documents.<i>.document.id` `doc-1`..`doc-500`,
  `.content` 364 characters of refund policy, `.score` a random float);
- `embed` and `llm`, its children: `EMBEDDING` and `LLM`, 700 ms each, each with `llm.model_name`
  `gpt-4.1-mini`, the question and answer as `input.value` / `output.value` and token counts 812 / 14.

About 770 bytes per span serialized; 100 traces (400 spans) per request is the benchmarks' default.

As a script it sends such requests over OTLP/gRPC and prints the spans acknowledged per second (wall
time until every Export returned; UNAVAILABLE and RESOURCE_EXHAUSTED are retried with a growing
pause, up to 50 times):

    .venv/bin/python bench/load_generator.py HOST:PORT[,HOST:PORT...] TRACES [BATCH_TRACES] [CONCURRENCY]

TRACES is rounded down to a multiple of BATCH_TRACES (default 100); request i is `build(BATCH_TRACES,
i)`; CONCURRENCY (default 4) threads send them on one channel per target. With several targets (the
replicas of one lake), each request is split by trace, before the clock starts, the way the
OpenTelemetry Collector's loadbalancing exporter routes (`routing_key: traceID`; tests/support/router.py).
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

DOC = "Refunds go back to the original payment method. A refund is issued within 5 business days. "
ANSWER = "A refund is issued within 5 business days."
MODEL = "gpt-4.1-mini"
DOCUMENTS_PER_RETRIEVAL = 4
SPANS_PER_TRACE = 4
INTERNAL = Span.SpanKind.SPAN_KIND_INTERNAL
REMOTE_PARENT = 0x300  # SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK | SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)
MAX_ATTEMPTS = 50


def kv(key: str, value: str | int | float) -> KeyValue:
    """One OTLP attribute: a string, an int or a double, by the value's Python type."""
    if isinstance(value, str):
        return KeyValue(key=key, value=AnyValue(string_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(double_value=value))


def build(n_traces: int, seed: int, pii: bool = False) -> trace_service_pb2.ExportTraceServiceRequest:
    """One Export request of `n_traces` 4-span RAG traces (see the module docstring); with `pii`,
    every question names an email address and the first document of each retrieval a phone number
    and a card number (for the redaction benchmark)."""
    rnd = random.Random(seed)
    request = trace_service_pb2.ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.append(kv("service.name", "rag-load"))
    scope_spans = resource_spans.scope_spans.add()
    now = time.time_ns()
    # The order of the random draws below fixes the bytes of every request: keep it.
    for _ in range(n_traces):
        trace_id = rnd.randbytes(16)
        root_id = rnd.randbytes(8)
        question = f"What is the refund policy for order {rnd.randint(1, 10**6)}?"
        if pii:
            question += f" Reply to jane.doe{rnd.randint(1, 10**6)}@example.com"
        root = scope_spans.spans.add(
            trace_id=trace_id,
            span_id=root_id,
            name="rag-query",
            kind=INTERNAL,
            start_time_unix_nano=now,
            end_time_unix_nano=now + 900_000_000,
        )
        root.attributes.extend(
            [
                kv("openinference.span.kind", "CHAIN"),
                kv("input.value", question),
                kv("output.value", ANSWER),
            ]
        )
        retriever = scope_spans.spans.add(
            trace_id=trace_id,
            span_id=rnd.randbytes(8),
            parent_span_id=root_id,
            name="retrieve",
            start_time_unix_nano=now,
            end_time_unix_nano=now + 50_000_000,
        )
        retriever.attributes.extend([kv("openinference.span.kind", "RETRIEVER"), kv("input.value", question)])
        for d in range(DOCUMENTS_PER_RETRIEVAL):
            prefix = f"retrieval.documents.{d}.document"
            content = DOC * 4
            if pii and d == 0:
                content = (
                    f"Customer line +44 20 7946 {rnd.randint(1000, 9999)}, card 4111 1111 1111 1111. "
                    + content
                )
            retriever.attributes.extend(
                [
                    kv(f"{prefix}.id", f"doc-{rnd.randint(1, 500)}"),
                    kv(f"{prefix}.content", content),
                    kv(f"{prefix}.score", rnd.random()),
                ]
            )
        for name, kind in (("embed", "EMBEDDING"), ("llm", "LLM")):
            span = scope_spans.spans.add(
                trace_id=trace_id,
                span_id=rnd.randbytes(8),
                parent_span_id=root_id,
                name=name,
                start_time_unix_nano=now,
                end_time_unix_nano=now + 700_000_000,
            )
            span.attributes.extend(
                [
                    kv("openinference.span.kind", kind),
                    kv("llm.model_name", MODEL),
                    kv("input.value", question),
                    kv("output.value", ANSWER),
                    kv("llm.token_count.prompt", 812),
                    kv("llm.token_count.completion", 14),
                ]
            )
    return request


def behind_gateway(
    request: trace_service_pb2.ExportTraceServiceRequest,
) -> trace_service_pb2.ExportTraceServiceRequest:
    """The same traces from an app behind a traced gateway that reports elsewhere: each root span
    gets a parent in another process (span flags: the parent is remote), which never arrives."""
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if not span.parent_span_id:
                    span.parent_span_id = span.trace_id[8:]
                    span.flags = REMOTE_PARENT
    return request


def route(
    requests: list[trace_service_pb2.ExportTraceServiceRequest], targets: list[str]
) -> list[tuple[str, trace_service_pb2.ExportTraceServiceRequest]]:
    """(target, request) pairs: each request whole to the one target, or split by trace id over several
    as the Collector's loadbalancing exporter would."""
    if len(targets) == 1:
        return [(targets[0], r) for r in requests]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.support.router import HashRing, split_by_endpoint

    ring = HashRing(targets)
    return [(target, part) for r in requests for target, part in split_by_endpoint(r, ring).items()]


def send_all(
    target: str,
    requests: list[trace_service_pb2.ExportTraceServiceRequest],
    concurrency: int,
) -> tuple[float, list[grpc.StatusCode]]:
    """Export every request from `concurrency` threads; returns the wall time and the errors.
    `target`: HOST:PORT, or several separated by commas (see `route`)."""
    options = [("grpc.max_send_message_length", 64 << 20)]
    targets = target.split(",")
    channels = {t: grpc.insecure_channel(t, options=options) for t in targets}
    stubs = {t: trace_service_pb2_grpc.TraceServiceStub(c) for t, c in channels.items()}
    routed = route(requests, targets)
    errors: list[grpc.StatusCode] = []
    todo = iter(range(len(routed)))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            for attempt in range(MAX_ATTEMPTS):
                try:
                    where, request = routed[i]
                    stubs[where].Export(request, timeout=30)
                    break
                except grpc.RpcError as exc:
                    code = exc.code()
                    if code in RETRYABLE and attempt + 1 < MAX_ATTEMPTS:
                        time.sleep(0.05 * (attempt + 1))
                        continue
                    with lock:
                        errors.append(code)
                    break

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    for channel in channels.values():
        channel.close()
    return wall, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target", help="HOST:PORT of an OTLP/gRPC receiver, or several, comma-separated")
    parser.add_argument("traces", type=int, help="traces to send (rounded down to a multiple of the batch)")
    parser.add_argument("batch", type=int, nargs="?", default=100, help="traces per Export (default 100)")
    parser.add_argument("concurrency", type=int, nargs="?", default=4, help="sending threads (default 4)")
    parser.add_argument("--pii", action="store_true", help="personal data in every trace (see build)")
    args = parser.parse_args()
    requests = [build(args.batch, i, args.pii) for i in range(args.traces // args.batch)]
    spans = sum(len(r.resource_spans[0].scope_spans[0].spans) for r in requests)
    wall, errors = send_all(args.target, requests, args.concurrency)
    print(f"sent {spans} spans in {wall:.2f}s = {spans / wall:.0f} spans/s accepted; errors={len(errors)}")


if __name__ == "__main__":
    main()
