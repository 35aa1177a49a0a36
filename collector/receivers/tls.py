"""The `tls:` config section and the credentials it gives both receivers (OTLP/gRPC, and the HTTP
server that carries OTLP/HTTP, the API and the dashboard).

One certificate serves both ports. With `client_ca_file`, every client must present a certificate
signed by that CA (mutual TLS); without `tls:`, both ports speak plaintext.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import grpc
from pydantic import Field, model_validator

from collector.config_base import Section


class TlsConfig(Section):
    cert_file: str | None = Field(None, min_length=1)
    key_file: str | None = Field(None, min_length=1)
    # Set: clients must present a certificate this CA signed (mutual TLS).
    client_ca_file: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together: set both or neither")
        if self.client_ca_file is not None and self.cert_file is None:
            raise ValueError("client_ca_file (mutual TLS) needs cert_file and key_file")
        return self

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None


class TlsError(ValueError):
    """A certificate, key or CA file that cannot be used; the message names the `tls.` key."""


@dataclass(frozen=True)
class ServerTls:
    """The PEM files of `tls:`, read and checked once at start."""

    cert_file: str
    key_file: str
    client_ca_file: str | None

    @classmethod
    def from_config(cls, config: TlsConfig) -> ServerTls | None:
        """None when TLS is off; `TlsError` naming the key when a file is missing or unusable."""
        if config.cert_file is None or config.key_file is None:
            return None
        for key in ("cert_file", "key_file", "client_ca_file"):
            path = getattr(config, key)
            if path is not None and not Path(path).is_file():
                raise TlsError(f"tls.{key}: no such file {path}")
        tls = cls(config.cert_file, config.key_file, config.client_ca_file)
        try:  # load once here, so a bad PEM is one clear line, not a failure deep in a server
            tls.ssl_context()
        except (ssl.SSLError, OSError) as exc:
            raise TlsError(
                f"tls.cert_file / tls.key_file / tls.client_ca_file cannot be used: {exc}"
            ) from None
        return tls

    def ssl_context(self) -> ssl.SSLContext:
        """A server context from the files: what the HTTP server will load (checked at start)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            context.load_verify_locations(self.client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def uvicorn_options(self) -> dict[str, Any]:
        """The same as `uvicorn.Config` options (the HTTP server: OTLP/HTTP, the API, the dashboard)."""
        options: dict[str, Any] = {"ssl_certfile": self.cert_file, "ssl_keyfile": self.key_file}
        if self.client_ca_file is not None:
            options |= {"ssl_ca_certs": self.client_ca_file, "ssl_cert_reqs": ssl.CERT_REQUIRED}
        return options

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """The gRPC server's credentials from the same files."""
        ca = Path(self.client_ca_file).read_bytes() if self.client_ca_file else None
        return grpc.ssl_server_credentials(
            [(Path(self.key_file).read_bytes(), Path(self.cert_file).read_bytes())],
            root_certificates=ca,
            require_client_auth=ca is not None,
        )
