"""A client of a running ragpulse's HTTP API (`/api/sql`, `/api/cases`, the dashboard's GETs), for the
CLI, the demo and the notebook client (`collector.client`)."""

from __future__ import annotations

import os
import ssl
from collections.abc import Sequence
from typing import Any

import httpx
import orjson
import pyarrow as pa

from collector.store.sql import ARROW_STREAM, TRUNCATED_HEADER

# The API key a command sends to a server (`ragpulse --key K` sets it too).
KEY_ENV = "RAGPULSE_KEY"
# For a server with `tls:`: the CA that signed its certificate (when not a public one), and the
# client certificate and key a mutual-TLS server asks for.
CA_FILE_ENV = "RAGPULSE_CA_FILE"
CLIENT_CERT_ENV = "RAGPULSE_CLIENT_CERT"
CLIENT_KEY_ENV = "RAGPULSE_CLIENT_KEY"


def auth_headers(key: str | None = None) -> dict[str, str]:
    """`Authorization: Bearer <key>` for `key`, else for $RAGPULSE_KEY; nothing without a key."""
    key = key or os.environ.get(KEY_ENV)
    return {"Authorization": f"Bearer {key}"} if key else {}


class ApiError(RuntimeError):
    """The server could not be reached or refused the request; the message says which."""


def verify_for(url: str) -> ssl.SSLContext | bool:
    """What httpx verifies a server with: `tls_context()` for an https URL; plain HTTP needs none (so
    a TLS variable set for another server does not get in its way)."""
    return tls_context() if url.lower().startswith("https:") else True


def tls_context() -> ssl.SSLContext:
    """The client side of TLS: the system's CAs, or $RAGPULSE_CA_FILE; with $RAGPULSE_CLIENT_CERT
    (and $RAGPULSE_CLIENT_KEY when the key is a file of its own), a client certificate."""
    try:
        context = ssl.create_default_context(cafile=os.environ.get(CA_FILE_ENV) or None)
        cert = os.environ.get(CLIENT_CERT_ENV)
        if cert:
            context.load_cert_chain(cert, os.environ.get(CLIENT_KEY_ENV) or None)
    except (OSError, ssl.SSLError) as exc:
        raise ApiError(f"cannot use ${CA_FILE_ENV} / ${CLIENT_CERT_ENV} / ${CLIENT_KEY_ENV}: {exc}") from None
    return context


class ApiClient:
    """One connection pool to `url` (the server's HTTP port, e.g. http://127.0.0.1:4318)."""

    def __init__(self, url: str, timeout: float = 120.0, key: str | None = None) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.url, timeout=timeout, headers=auth_headers(key), verify=verify_for(self.url)
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def query(self, sql: str, max_rows: int | None = None) -> tuple[list[dict[str, Any]], bool]:
        """(rows as objects, whether the server stopped at its row limit)."""
        body: dict[str, Any] = {"query": sql}
        if max_rows is not None:
            body["max_rows"] = max_rows
        response = self._post("/api/sql", body)
        rows = _json(response, self.url)
        if not isinstance(rows, list):
            raise ApiError(f"unexpected answer from {self.url}: not a list of rows")
        return rows, response.headers.get(TRUNCATED_HEADER) == "true"

    def rows(self, sql: str) -> list[dict[str, Any]]:
        """The rows of one query (a `collector.store.reads.Query`)."""
        return self.query(sql)[0]

    def arrow(self, sql: str, max_rows: int | None = None) -> tuple[pa.Table, bool]:
        """(the rows as an Arrow table in DuckDB's types, whether the server stopped at its row
        limit): `/api/sql` answering an Arrow IPC stream instead of JSON."""
        body: dict[str, Any] = {"query": sql}
        if max_rows is not None:
            body["max_rows"] = max_rows
        response = self._post("/api/sql", body, accept=ARROW_STREAM)
        try:
            table = pa.ipc.open_stream(response.content).read_all()
        except pa.ArrowInvalid:
            raise ApiError(f"unexpected answer from {self.url}: not an Arrow stream") from None
        return table, response.headers.get(TRUNCATED_HEADER) == "true"

    def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        """The JSON answer of `GET path` (`/api/traces`, `/api/traces/{id}`, ...)."""
        try:
            response = self._client.get(path, params=params)
        except httpx.HTTPError as exc:
            raise ApiError(f"cannot reach ragpulse at {self.url}: {exc}") from None
        if response.status_code != 200:
            raise ApiError(_error_message(response, self.url))
        return _json(response, self.url)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """The JSON answer of `POST path` with a JSON `body` (`/api/rescore`, ...)."""
        return _json(self._post(path, body), self.url)

    def load_cases(self, cases: Sequence[dict[str, Any]], source: str) -> int:
        """Insert or replace golden cases; returns how many the server loaded."""
        response = self._post("/api/cases", {"source": source, "cases": list(cases)})
        answer = _json(response, self.url)
        return int(answer.get("loaded", 0)) if isinstance(answer, dict) else 0

    def _post(self, path: str, body: dict[str, Any], accept: str = "application/json") -> httpx.Response:
        try:
            response = self._client.post(
                path,
                content=orjson.dumps(body),
                headers={"Content-Type": "application/json", "Accept": accept},
            )
        except httpx.HTTPError as exc:
            raise ApiError(f"cannot reach ragpulse at {self.url}: {exc}") from None
        if response.status_code != 200:
            raise ApiError(_error_message(response, self.url))
        return response


def _json(response: httpx.Response, url: str) -> Any:
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        raise ApiError(f"unexpected answer from {url} ({response.status_code})") from None


def _error_message(response: httpx.Response, url: str) -> str:
    try:
        payload = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return f"unexpected answer from {url} ({response.status_code})"
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        if response.status_code == 401:
            return f"{payload['error']}: pass --key KEY or set {KEY_ENV}"
        return str(payload["error"])
    return f"unexpected answer from {url} ({response.status_code})"
