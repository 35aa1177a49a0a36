"""Keys on the OTLP/gRPC port: a server interceptor reading the `authorization` metadata (what the
SDK exporters send from OTEL_EXPORTER_OTLP_HEADERS, and the Collector's bearertokenauth). Every
method there is an export, so every call needs the ingest scope."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from collector.auth.keys import Decision, Keyring
from collector.telemetry import Metrics


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, keyring: Keyring, metrics: Metrics) -> None:
        self._keyring = keyring
        self._metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        if not self._keyring.enabled:
            return await continuation(handler_call_details)
        metadata = dict(handler_call_details.invocation_metadata or ())
        authorization = metadata.get("authorization")
        if isinstance(authorization, bytes):
            authorization = authorization.decode("latin-1")
        decision = self._keyring.check(authorization, "ingest")
        if decision is Decision.ALLOWED:
            return await continuation(handler_call_details)
        self._metrics.auth_refusals.labels("grpc", decision.value).inc()
        if decision is Decision.UNAUTHENTICATED:
            return _abort(
                grpc.StatusCode.UNAUTHENTICATED, "a valid API key is required (authorization: Bearer <key>)"
            )
        return _abort(grpc.StatusCode.PERMISSION_DENIED, "this key lacks the ingest scope")


def _abort(code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(code, message)

    return grpc.unary_unary_rpc_method_handler(refuse)
