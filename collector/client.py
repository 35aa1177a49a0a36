"""ragpulse from a notebook or a script: a running server's SQL as Arrow tables, its traces, and the
gates of `ragpulse check`.

    from collector.client import Client

    rp = Client("http://127.0.0.1:4318", key=None)    # key: or $RAGPULSE_KEY
    rp.sql("SELECT name, avg(value) FROM scores GROUP BY name").to_pandas()
    rp.traces(failing="faithfulness", since="1h")["traces"]
    rp.trace("4bf92f3577b34da6a3ce929d0e0e4736")["scores"]
    rp.sessions(since="7d", status="ended")["sessions"]              # worst first
    rp.session("chat-42")["turns"]
    rp.check(min={"faithfulness": 0.8}, since="1h")["status"]     # pass | fail | insufficient

SQL results travel as Arrow IPC (`Accept: application/vnd.apache.arrow.stream` on `/api/sql`), in
DuckDB's own types; `.to_pandas()` on them needs pandas, which ragpulse does not install. The
answers of `traces`, `trace` and `check` are those of the MCP tools `list_traces`, `get_trace` and
`check_quality` (docs/mcp.md), made here from the server's SQL as the tools make them."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pyarrow as pa

from collector.api_client import ApiClient, ApiError
from collector.config import Config
from collector.mcp.tools import BadArgument, Tools
from collector.monitoring.gates import GateKind

__all__ = ["ApiError", "BadArgument", "Client", "TruncatedResult"]


class TruncatedResult(UserWarning):
    """A query's rows were cut at the server's row limit (`sql.max_rows`, or `max_rows`)."""


class Client:
    """One connection pool to a running ragpulse (its HTTP port, e.g. http://127.0.0.1:4318)."""

    def __init__(self, url: str, key: str | None = None, timeout: float = 120.0) -> None:
        self._api = ApiClient(url, timeout=timeout, key=key)
        self.url = self._api.url
        self.truncated = False  # whether the last `sql` was cut at the row limit
        self._tools = Tools(self._api.query, Config())

    def close(self) -> None:
        self._api.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sql(self, query: str, max_rows: int | None = None) -> pa.Table:
        """One read-only query as an Arrow table (`.to_pandas()`, `.to_pylist()`). At most the
        server's `sql.max_rows` rows (or `max_rows`); `truncated` says whether more matched."""
        table, self.truncated = self._api.arrow(query, max_rows)
        return table

    def traces(self, **filters: Any) -> dict[str, Any]:
        """One page of traces: `since`, `until`, `service`, `status`, `failing`, `score` with
        `below`, `q`, `probe`, `sort`, `order`, `limit`, `offset` (those of `GET /api/traces`)."""
        params = {name: str(value) for name, value in filters.items() if value is not None}
        answer: dict[str, Any] = self._api.get("/api/traces", params)
        return answer

    def trace(self, trace_id: str) -> dict[str, Any]:
        """One trace: question, answer, steps, documents, every score with its items (failing
        first) and its judge's provenance."""
        return self._tools.get_trace(trace_id).content

    def sessions(self, **filters: Any) -> dict[str, Any]:
        """One page of sessions, worst first: `since`, `until`, `service`, `status`, `user`, `sort`,
        `order`, `limit`, `offset` (those of `GET /api/sessions`)."""
        params = {name: str(value) for name, value in filters.items() if value is not None}
        answer: dict[str, Any] = self._api.get("/api/sessions", params)
        return answer

    def session(self, session_id: str, service: str | None = None) -> dict[str, Any]:
        """One session's figures and its turns in order, each with its scores (`service`: when
        the id exists under several)."""
        path = f"/api/sessions/{quote(session_id, safe='')}"
        answer: dict[str, Any] = self._api.get(path, {} if service is None else {"service": service})
        return answer

    def check(
        self,
        min: dict[str, float] | None = None,
        min_pass_rate: dict[str, float] | None = None,
        max_error_rate: dict[str, float] | float | None = None,
        since: str | None = None,
        until: str | None = None,
        service: str | None = None,
        probe: str | None = None,
    ) -> dict[str, Any]:
        """The gates of `ragpulse check` (`min={"faithfulness": 0.8}`, ...) over the window (`since`
        default 24h): each gate's value, n, interval and result, and `status` pass | fail |
        insufficient, with the server's scores and this machine's default `monitoring:` settings."""
        gates: dict[GateKind, dict[str, float] | float | None] = {
            "min": min,
            "min_pass_rate": min_pass_rate,
            "max_error_rate": max_error_rate,
        }
        window = {"since": since, "until": until, "service": service, "probe": probe}
        return self._tools.check_quality(gates, window).content
