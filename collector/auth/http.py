"""Keys on the HTTP port: one ASGI middleware in front of every route.

What each path needs: `/v1/traces` and `/v1/logs` ingest; `POST /api/feedback` ingest or
feedback; `POST /api/annotations` annotate; `POST /api/cases` and `POST /api/rescore` admin; the
rest of `/api/`, the dashboard (`/`, `/ui/`) read; `/metrics` read or nothing (`auth.metrics`);
`/healthz` nothing. A refusal of an OTLP export is a google.rpc.Status in the request's encoding, as exporters
expect; elsewhere `{"error": ...}`. A 401 offers Bearer and Basic: a browser then asks for the key
(any user name, the key as the password) and sends it with every request of the dashboard.
"""

from __future__ import annotations

from typing import Any

import orjson
from google.rpc import code_pb2
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as AsgiScope

from collector.auth.config import Scope
from collector.auth.keys import Decision, Keyring
from collector.receivers.otlp_http import JSON, status_response
from collector.telemetry import Metrics

# Probes of orchestrators (Kubernetes, load balancers) carry no key.
HEALTH_PATHS = frozenset(("/healthz", "/healthz/live", "/healthz/ready"))
CHALLENGE = 'Bearer realm="ragpulse", Basic realm="ragpulse", charset="UTF-8"'


def required_scope(method: str, path: str, metrics_open: bool) -> tuple[Scope, ...] | None:
    """The scopes a request needs, any of them (None: open to all)."""
    if path in HEALTH_PATHS or (path == "/metrics" and metrics_open):
        return None
    if path in ("/v1/traces", "/v1/logs"):
        return ("ingest",)
    if path == "/api/feedback" and method != "GET":
        return ("ingest", "feedback")
    if path == "/api/annotations" and method != "GET":
        return ("annotate",)
    if path in ("/api/cases", "/api/rescore") and method != "GET":
        return ("admin",)
    return ("read",)


class AuthMiddleware:
    def __init__(self, app: ASGIApp, keyring: Keyring, metrics: Metrics, metrics_open: bool) -> None:
        self._app = app
        self._keyring = keyring
        self._metrics = metrics
        self._metrics_open = metrics_open

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._keyring.enabled:
            await self._app(scope, receive, send)
            return
        needed = required_scope(scope["method"], scope["path"], self._metrics_open)
        headers = {k.lower(): v for k, v in scope["headers"]}
        authorization = headers.get(b"authorization", b"").decode("latin-1") or None
        decision = Decision.ALLOWED if needed is None else self._keyring.check(authorization, needed)
        if decision is Decision.ALLOWED:
            await self._app(scope, receive, send)
            return
        self._metrics.auth_refusals.labels("http", decision.value).inc()
        response = _refusal(decision, needed, scope["path"], headers)
        await response(scope, receive, send)


def _refusal(
    decision: Decision, needed: tuple[Scope, ...] | None, path: str, headers: dict[bytes, bytes]
) -> Response:
    if decision is Decision.UNAUTHENTICATED:
        status, code, message = (
            401,
            code_pb2.UNAUTHENTICATED,
            "a valid API key is required (Authorization: Bearer <key>)",
        )
        extra = {"WWW-Authenticate": CHALLENGE}
    else:
        scopes = " or ".join(needed or ())
        status, code, message = 403, code_pb2.PERMISSION_DENIED, f"this key lacks the {scopes} scope"
        extra = {}
    if path.startswith("/v1/"):
        content_type = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
        return status_response(status, code, message, content_type == JSON, extra)
    if path == "/mcp":  # a JSON-RPC error: MCP clients show its message (a bare 401 reads "internal error")
        rpc = {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32001 if status == 401 else -32003, "message": message},
        }
        return Response(orjson.dumps(rpc), status_code=status, media_type="application/json", headers=extra)
    body: dict[str, Any] = {"error": message}
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=extra)
