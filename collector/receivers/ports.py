"""Whether a port can be listened on, asked before anything binds it: the gRPC receiver (gRPC core
would log its own bind error to stderr) and `ragpulse demo --serve` (which would otherwise run the
whole demo before finding its ports taken)."""

from __future__ import annotations

import socket


def port_taken(host: str, port: int) -> str | None:
    """Why `host:port` cannot be listened on now (the system's reason, e.g. "Address already in
    use"), or None when it can. Port 0 (any free port) always can."""
    if port == 0:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None
