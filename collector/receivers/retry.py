"""How a receiver tells a client to come back later (shared by gRPC and HTTP)."""

from __future__ import annotations

from google.protobuf.duration_pb2 import Duration
from google.rpc import code_pb2, error_details_pb2, status_pb2


def retry_delay(seconds: float) -> Duration:
    whole = int(seconds)
    return Duration(seconds=whole, nanos=int((seconds - whole) * 1e9))


def grpc_retry_metadata(seconds: float, message: str) -> tuple[tuple[str, bytes], ...]:
    """Trailing metadata carrying RetryInfo, in both places clients look for it.

    `grpc-status-details-bin` is the standard google.rpc.Status with details (Go, Java exporters);
    `google.rpc.retryinfo-bin` is what the OpenTelemetry Python exporter reads.
    """
    info = error_details_pb2.RetryInfo(retry_delay=retry_delay(seconds))
    status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message=message)
    status.details.add().Pack(info)
    return (
        ("grpc-status-details-bin", status.SerializeToString()),
        ("google.rpc.retryinfo-bin", info.SerializeToString()),
    )


def http_retry_after(seconds: float) -> str:
    """Retry-After takes whole seconds (RFC 9110); never 0, or clients would spin."""
    return str(max(1, round(seconds)))
