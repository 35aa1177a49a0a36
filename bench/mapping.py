#!/usr/bin/env python3
"""Mapping benchmark: traces read as RAG requests per second by `semconv.map_trace` alone, in one
thread, on bench/load_generator.py's OpenInference traces (4 spans each), or with `--agent` on
agent-shaped OpenTelemetry GenAI traces (8 spans: an `invoke_agent` root, four `chat` turns, two
`execute_tool search_docs` calls whose results are document lists, one failing order tool).
Decoding and turning Arrow rows into span records are done before the clock starts; only mapping
is timed, in CPU seconds of the thread (so the figure is per core and other load on the machine
does not skew it).

    .venv/bin/python bench/mapping.py                  # 20,000 traces, median of 3 passes
    .venv/bin/python bench/mapping.py --agent          # the agent-shaped traces
    .venv/bin/python bench/mapping.py --profile        # cProfile's top entries instead
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import statistics
import time
from typing import Any

from load_generator import DOC, INTERNAL, build, kv
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from collector.otlp.batch import decode_request
from collector.schema.span_records import records_by_trace, span_records
from semconv import SpanRecord, map_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--agent", action="store_true", help="agent-shaped GenAI traces (8 spans)")
    args = parser.parse_args()

    traces: list[list[SpanRecord]] = []
    for i in range(args.traces // 100):
        batch = decode_request(build_agents(100, i) if args.agent else build(100, i))
        traces.extend(records_by_trace(span_records(batch.spans, batch.events)).values())

    def run() -> float:
        # CPU time of this thread, so other processes on the two cores do not skew the figure.
        started = time.thread_time()
        for spans in traces:
            map_trace(spans)
        return time.thread_time() - started

    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(run)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return
    passes = [run() for _ in range(args.repeat)]
    per_second = [len(traces) / p for p in passes]
    median = statistics.median(per_second)
    print(
        f"mapped {len(traces)} traces x {args.repeat}: median {median:,.0f} traces/s "
        f"({1e6 / median:.0f} µs per trace; passes {', '.join(f'{p:,.0f}' for p in per_second)})"
    )


def build_agents(n_traces: int, seed: int) -> trace_service_pb2.ExportTraceServiceRequest:
    """`n_traces` agent requests as OTel GenAI spans: `invoke_agent` > chat (asks for a search) >
    `execute_tool search_docs` (four documents) > chat > search > chat (asks for the order's
    status) > `execute_tool get_order_status` (fails) > chat (the answer)."""
    rnd = random.Random(seed)
    request = trace_service_pb2.ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.append(kv("service.name", "agent-load"))
    scope_spans = resource_spans.scope_spans.add()
    now = time.time_ns()
    for _ in range(n_traces):
        _add_agent_trace(scope_spans, rnd, now)
    return request


def _add_agent_trace(scope_spans: Any, rnd: random.Random, now: int) -> None:
    """One agent request's eight spans (see `build_agents`)."""
    trace_id, root_id = rnd.randbytes(16), rnd.randbytes(8)
    question = f"Where is the refund for order {rnd.randint(1, 10**6)}?"
    user = [{"role": "user", "parts": [{"type": "text", "content": question}]}]
    root = scope_spans.spans.add(
        trace_id=trace_id,
        span_id=root_id,
        name="invoke_agent support",
        kind=INTERNAL,
        start_time_unix_nano=now,
        end_time_unix_nano=now + 2_000_000_000,
    )
    root.attributes.extend(
        [kv("gen_ai.operation.name", "invoke_agent"), kv("gen_ai.input.messages", json.dumps(user))]
    )
    at = now

    def child(name: str, attributes: list[tuple[str, str | int]], error: bool = False) -> None:
        nonlocal at
        span = scope_spans.spans.add(
            trace_id=trace_id,
            span_id=rnd.randbytes(8),
            parent_span_id=root_id,
            name=name,
            start_time_unix_nano=at,
            end_time_unix_nano=at + 200_000_000,
        )
        span.attributes.extend(kv(k, v) for k, v in attributes)
        if error:
            span.status.code = span.status.STATUS_CODE_ERROR
        at += 250_000_000

    def chat(parts: list[dict[str, object]]) -> None:
        output = [{"role": "assistant", "parts": parts, "finish_reason": "stop"}]
        child(
            "chat gpt-4.1-mini",
            [
                ("gen_ai.operation.name", "chat"),
                ("gen_ai.request.model", "gpt-4.1-mini"),
                ("gen_ai.input.messages", json.dumps(user)),
                ("gen_ai.output.messages", json.dumps(output)),
                ("gen_ai.usage.input_tokens", 900),
                ("gen_ai.usage.output_tokens", 20),
            ],
        )

    def tool(name: str, arguments: dict[str, object], result: object, error: bool = False) -> None:
        chat([{"type": "tool_call", "id": "c", "name": name, "arguments": arguments}])
        child(
            f"execute_tool {name}",
            [
                ("gen_ai.operation.name", "execute_tool"),
                ("gen_ai.tool.name", name),
                ("gen_ai.tool.call.arguments", json.dumps(arguments)),
                ("gen_ai.tool.call.result", json.dumps(result)),
            ],
            error,
        )

    for query in ("refund timing", "order refunds"):
        docs = [
            {"id": f"doc-{rnd.randint(1, 500)}", "text": DOC * 4, "score": rnd.random()} for _ in range(4)
        ]
        tool("search_docs", {"query": query}, docs)
    tool("get_order_status", {"order_id": "A-1"}, "timeout", error=True)
    chat([{"type": "text", "content": "A refund is issued within 5 business days."}])


if __name__ == "__main__":
    main()
