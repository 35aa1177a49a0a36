"""A real PostgreSQL server for the lake tests: Debian's `postgresql` package (`.ci/run` installs
it), a cluster made by `initdb` in a temporary directory, listening on a free loopback port.

PostgreSQL refuses to run as root: under root (CI) the server runs as the `postgres` user the
package creates, in a directory handed to it."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

from tests.support.helpers import free_port, wait_for


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise RuntimeError(
            "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin): "
            "apt-get install postgresql (.ci/run does)"
        )
    return Path(found[-1]).parent


class PostgresServer:
    """`start()` a throwaway cluster, `create_database(name)` per test, `stop()` removes it all."""

    def __init__(self) -> None:
        self.port = free_port()
        self.bin = _bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="ragpulse-pg-"))
        self.data = self.root / "data"
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]

    def _run(self, *command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self._as_user, *command], check=True, capture_output=True, text=True, cwd=self.root
        )

    def start(self) -> PostgresServer:
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8"
        )
        self._start_server()
        return self

    def _start_server(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        )
        pg_ctl = str(self.bin / "pg_ctl")
        self._run(pg_ctl, "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "start")
        wait_for(self._ready, timeout=30, what="PostgreSQL to accept connections")

    def _ready(self) -> bool:
        done = subprocess.run(
            [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)], capture_output=True
        )
        return done.returncode == 0

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run SQL with psql as the superuser; returns its unaligned output."""
        done = subprocess.run(
            [
                "psql",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                database,
                "-At",
                "-c",
                sql,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        return done.stdout.strip()

    def create_database(self, name: str) -> str:
        """A new, empty database; returns the DuckLake catalog string for it."""
        self.psql(f'CREATE DATABASE "{name}"')
        return self.catalog(name)

    def new_lake(self, directory: Path) -> dict[str, Any]:
        """The `store:` section of a new lake: a catalog database of its own, data under `directory`."""
        catalog = self.create_database(f"lake_{uuid.uuid4().hex[:10]}")
        return {"backend": "ducklake", "catalog": catalog, "data_path": f"{directory}/lake/"}

    def catalog(self, name: str) -> str:
        return f"postgres:dbname={name} host=127.0.0.1 port={self.port} user=postgres"

    def pause(self) -> None:
        """Stop the server (its data stays): the catalog goes down under the lake's users."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop")

    def resume(self) -> None:
        """Start the paused server again, on the same port."""
        self._start_server()

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
