"""The `receivers:` config section: where the OTLP/gRPC and OTLP/HTTP receivers listen."""

from __future__ import annotations

import ipaddress

from pydantic import Field

from collector.config_base import Section


class ReceiversConfig(Section):
    host: str = "127.0.0.1"
    grpc_port: int = Field(4317, ge=0, le=65535)
    http_port: int = Field(4318, ge=0, le=65535)
    max_request_bytes: int = Field(16 * 1024 * 1024, gt=0)
    # Seconds a client is told to wait (Retry-After / RetryInfo) when the store is behind.
    retry_after: float = Field(1.0, gt=0)

    @property
    def loopback(self) -> bool:
        """Whether `host` is reachable from this machine only."""
        return host_is_loopback(self.host)


def host_is_loopback(host: str) -> bool:
    """Whether a host name or address is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
