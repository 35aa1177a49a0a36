"""What the read-only SQL surface must refuse, shared by every surface that takes a user's SQL
(`POST /api/sql`, a file opened read-only, the MCP tool `query_sql`): writes, and reads of files
or the network, with a real HTTP server on loopback that records any request that gets through."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

# Statements that would change the store or its settings; each is refused with "only ...".
REFUSED_WRITES = [
    "DELETE FROM spans",
    "DROP TABLE spans",
    "UPDATE spans SET name = 'x'",
    "INSERT INTO spans (trace_id, span_id) VALUES ('a', 'b')",
    "CREATE TABLE t AS SELECT 1",
    "ATTACH ':memory:' AS m",
    "COPY spans TO 'x.csv'",
    "SET enable_external_access = true",
    "CHECKPOINT",
    "SELECT 1; DELETE FROM spans",
]


def file_queries(tmp_path: Path, url: str) -> list[tuple[str, str]]:
    """Queries reaching files or the network, with the text the refusal must contain."""
    parquet = tmp_path / "real.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), parquet)
    json_file = tmp_path / "real.json"
    json_file.write_text('[{"a": 1}]')
    disabled = "disabled by configuration"
    return [
        ("SELECT * FROM read_csv('/etc/passwd')", disabled),
        ("SELECT * FROM read_csv_auto('/etc/passwd')", disabled),
        (f"SELECT * FROM read_parquet('{parquet}')", disabled),
        (f"SELECT * FROM parquet_metadata('{parquet}')", disabled),
        (f"SELECT * FROM read_json('{json_file}')", disabled),
        ("SELECT * FROM read_text('/etc/passwd')", disabled),
        ("SELECT * FROM read_blob('/etc/passwd')", disabled),
        ("SELECT * FROM glob('/etc/*')", disabled),
        ("SELECT * FROM sniff_csv('/etc/passwd')", disabled),
        ("FROM '/etc/passwd'", "/etc/passwd"),
        (f"SELECT * FROM '{parquet}'", "real.parquet"),
        ("SELECT * FROM read_csv('http://127.0.0.1:1/x.csv')", disabled),
        (f"SELECT * FROM read_csv('{url}/x.csv')", disabled),
        (f"SELECT * FROM read_text('{url}/x.txt')", disabled),
        (f"SELECT * FROM '{url}/y.csv'", "y.csv"),
    ]


class _CountingHandler(BaseHTTPRequestHandler):
    hits: list[str]

    def do_GET(self) -> None:
        self.hits.append(self.path)
        body = b"a,b\n1,2\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def counting_http_server() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on loopback serving a CSV; the list records every request it gets."""
    hits: list[str] = []
    handler = type("Handler", (_CountingHandler,), {"hits": hits})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()
