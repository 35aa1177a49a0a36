"""A stand-in for the OpenTelemetry Collector's `load_balancing` exporter with `routing_key: traceID`
(no Collector binary can be fetched here): an OTLP/gRPC server that splits each export by trace and
sends every part to the replica the Collector's hash ring picks for that trace id.

The ring is the exporter's own (exporter/loadbalancingexporter/consistent_hashing.go): 100 points
per endpoint at crc32(endpoint + byte(i)) % 36000, a trace at crc32(trace id bytes) % 36000, owned
by the first point at or after it (wrapping around). Endpoints can be changed while it runs, which
is what a resolver does when a replica is added or removed. An export is acknowledged only once
every part was acknowledged by its replica, as the Collector does without a sending queue."""

from __future__ import annotations

import bisect
import threading
import zlib
from collections import defaultdict
from collections.abc import Sequence
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

MAX_POSITIONS = 36000
WEIGHT = 100


class HashRing:
    """The Collector's consistent hash ring over endpoint names."""

    def __init__(self, endpoints: Sequence[str], weight: int = WEIGHT) -> None:
        taken: set[int] = set()
        items: list[tuple[int, str]] = []
        for endpoint in sorted(endpoints):  # the resolvers hand the ring sorted endpoints
            for i in range(weight):
                position = zlib.crc32(endpoint.encode() + bytes([i])) % MAX_POSITIONS
                if position not in taken:
                    taken.add(position)
                    items.append((position, endpoint))
        items.sort()
        self.items = items
        self._positions = [p for p, _ in items]
        self._endpoints = [e for _, e in items]

    def endpoint_for(self, trace_id: bytes) -> str:
        position = zlib.crc32(trace_id) % MAX_POSITIONS
        index = bisect.bisect_left(self._positions, position)
        return self._endpoints[index % len(self._endpoints)]


def split_by_endpoint(
    request: trace_service_pb2.ExportTraceServiceRequest, ring: HashRing
) -> dict[str, trace_service_pb2.ExportTraceServiceRequest]:
    """One request per endpoint, each span under a copy of its resource and scope."""
    parts: dict[str, trace_service_pb2.ExportTraceServiceRequest] = defaultdict(
        trace_service_pb2.ExportTraceServiceRequest
    )
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            by_endpoint: dict[str, list[trace_pb2.Span]] = defaultdict(list)
            for span in scope_spans.spans:
                by_endpoint[ring.endpoint_for(span.trace_id)].append(span)
            for endpoint, spans in by_endpoint.items():
                out_resource = parts[endpoint].resource_spans.add()
                out_resource.resource.CopyFrom(resource_spans.resource)
                out_resource.schema_url = resource_spans.schema_url
                out_scope = out_resource.scope_spans.add()
                out_scope.scope.CopyFrom(scope_spans.scope)
                out_scope.schema_url = scope_spans.schema_url
                out_scope.spans.extend(spans)
    return dict(parts)


class TraceRouter(trace_service_pb2_grpc.TraceServiceServicer):
    """`start()` on a loopback port; `set_endpoints({name: "host:port"})` at any time."""

    def __init__(self, endpoints: dict[str, str]) -> None:
        self._lock = threading.Lock()
        self._stubs: dict[str, trace_service_pb2_grpc.TraceServiceStub] = {}
        self._channels: list[grpc.Channel] = []
        self.routed: dict[str, int] = defaultdict(int)  # spans sent to each endpoint
        # Spans of forwards that failed (a replica slower than the forward's timeout may still have
        # stored them): the client retries the export, so these reach a replica twice.
        self.failed: dict[str, int] = defaultdict(int)
        self.set_endpoints(endpoints)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    def set_endpoints(self, endpoints: dict[str, str]) -> None:
        with self._lock:
            for name, address in endpoints.items():
                if name not in self._stubs:
                    channel = grpc.insecure_channel(address)
                    self._channels.append(channel)
                    self._stubs[name] = trace_service_pb2_grpc.TraceServiceStub(channel)
            self._ring = HashRing(list(endpoints))
            self._active = set(endpoints)

    def start(self) -> TraceRouter:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=2).wait()
        for channel in self._channels:
            channel.close()

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        with self._lock:
            ring = self._ring
            stubs = dict(self._stubs)
        for endpoint, part in split_by_endpoint(request, ring).items():
            spans = sum(len(s.spans) for r in part.resource_spans for s in r.scope_spans)
            try:
                stubs[endpoint].Export(part, timeout=10, wait_for_ready=True)
            except grpc.RpcError as exc:
                with self._lock:
                    self.failed[endpoint] += spans
                context.abort(exc.code(), f"replica {endpoint}: {exc.details()}")
            with self._lock:
                self.routed[endpoint] += spans
        return trace_service_pb2.ExportTraceServiceResponse()
