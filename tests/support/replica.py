"""`ragpulse serve` as one replica of a lake, in a process of its own (the lake's tests)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.helpers import RAGPULSE, clean_env, fast_assembler, free_port, stop_process, wait_for


class Replica:
    """`ragpulse serve` on the lake, as replica `name`, on ports of its own."""

    def __init__(self, name: str, lake: dict[str, Any], workdir: Path, **assembler: Any) -> None:
        self.name = name
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.config = workdir / f"{name}.yaml"
        self.log = workdir / f"{name}.log"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "receivers": {
                        "host": "127.0.0.1",
                        "grpc_port": self.grpc_port,
                        "http_port": self.http_port,
                    },
                    "store": {**lake, "replica": name},
                    "assembler": {**fast_assembler(decision_wait=0.5, max_wait=3), "workers": 0, **assembler},
                }
            )
        )
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self) -> Replica:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(RAGPULSE), "serve", "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.config.parent,
                env=clean_env(PYTHONUNBUFFERED="1"),
            )
        wait_for(self._ready, timeout=60, what=f"replica {self.name} to answer /healthz")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            pytest.fail(f"replica {self.name} exited with {self.proc.returncode}:\n{self.log.read_text()}")
        try:
            return httpx.get(f"{self.http_url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
