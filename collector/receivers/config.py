"""The `receivers:` config section: where the OTLP/gRPC and OTLP/HTTP receivers listen."""

from __future__ import annotations

from pydantic import Field

from collector.config_base import Section


class ReceiversConfig(Section):
    host: str = "127.0.0.1"
    grpc_port: int = Field(4317, ge=0, le=65535)
    http_port: int = Field(4318, ge=0, le=65535)
    max_request_bytes: int = Field(16 * 1024 * 1024, gt=0)
    # Seconds a client is told to wait (Retry-After / RetryInfo) when the store is behind.
    retry_after: float = Field(1.0, gt=0)
