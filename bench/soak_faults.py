"""The soak's faults that live outside the service (bench/soak.py): a loopback OpenAI-protocol judge and
an alert webhook receiver, each switched between `up`, `refuse` and `503` (`FlakyServer`), and a
tmpfs for the store with a ballast file that fills it (`Tmpfs`). The SIGKILL and restart of the
service itself are in bench/soak_service.py (`Service.kill_and_restart`); when each fault happens is
in bench/soak_schedule.py."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# The judge answers with the test suite's verdicts: tests/ is importable from the repository root.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.openai_stub import passing_verdict  # noqa: E402


class FlakyServer:
    """A loopback HTTP server on a fixed port that can be `up`, `refuse` (its listening socket closed,
    so new connections are refused, and requests on kept-alive connections answered by closing the
    connection without a reply) or `503`. Subclasses answer POSTs in `handle`."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.mode = "down"
        self.lock = threading.Lock()
        self.modes: list[tuple[float, str]] = []  # (time, mode) at every change
        self._server: ThreadingHTTPServer | None = None

    def handle(self, path: str, body: bytes) -> tuple[int, bytes]:
        raise NotImplementedError

    def refused(self, path: str, body: bytes, how: str) -> None:
        """Called for each request answered 503 or cut (the attempt is recorded by subclasses)."""

    def set_mode(self, mode: str) -> None:
        assert mode in ("up", "refuse", "503")
        with self.lock:
            if mode == self.mode:
                return
            listening = mode in ("up", "503")
            if listening and self._server is None:
                self._listen()
            elif not listening and self._server is not None:
                server, self._server = self._server, None
                server.shutdown()
                server.server_close()
            self.mode = mode
            self.modes.append((time.time(), mode))

    def stop(self) -> None:
        with self.lock:
            if self._server is not None:
                self._server.shutdown()
                self._server.server_close()
                self._server = None
            self.mode = "down"

    def _listen(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                self._reply(404, b"{}")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                mode = owner.mode
                if mode == "refuse":
                    owner.refused(self.path, body, "cut")
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if mode == "503":
                    owner.refused(self.path, body, "503")
                    self._reply(503, b'{"error": {"message": "soak: down", "type": "server_error"}}')
                    return
                status, payload = owner.handle(self.path, body)
                self._reply(status, payload)

            def _reply(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(payload)

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        threading.Thread(
            target=lambda: server.serve_forever(poll_interval=0.05), name=f"flaky-{self.port}", daemon=True
        ).start()
        self._server = server


class FlakyJudge(FlakyServer):
    """The judge: `POST /v1/chat/completions` answered with a valid verdict for any ragpulse judge
    prompt (tests/support/openai_stub.py's `passing_verdict`); for faithfulness, one trace in `fail_every`
    (by a hash of the prompt's input) gets an unsupported claim, so the score is a real fail."""

    def __init__(self, port: int, fail_every: int = 5) -> None:
        super().__init__(port)
        self.fail_every = fail_every
        self.counts: Counter[str] = Counter()  # answered | 503 | cut | health

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def refused(self, path: str, body: bytes, how: str) -> None:
        with self.lock:
            self.counts[how] += 1

    def handle(self, path: str, body: bytes) -> tuple[int, bytes]:
        if not path.split("?", 1)[0].endswith("/chat/completions"):
            return 404, b'{"error": {"message": "no route", "type": "not_found"}}'
        request = json.loads(body)
        messages = request["messages"]
        system, user = messages[0]["content"], messages[-1]["content"]
        verdict = passing_verdict(system, user)
        if "claims" in verdict and "health check" not in system:
            digest = hashlib.blake2b(user.encode(), digest_size=8).digest()
            if int.from_bytes(digest, "big") % self.fail_every == 0:
                verdict["claims"][1].update(
                    verdict="unsupported", doc_id=None, quote=None, reason="not stated"
                )
        with self.lock:
            self.counts["health" if "health check" in system else "answered"] += 1
        reply = {
            "id": "chatcmpl-soak",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model") or "soak-judge",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": json.dumps(verdict), "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 400, "completion_tokens": 60, "total_tokens": 460},
        }
        return 200, json.dumps(reply).encode()


class WebhookReceiver(FlakyServer):
    """The alert webhook (`format: json`): records every notification it accepted, with the time it
    arrived and its order, and every attempt it refused (503) or cut (`refuse`)."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.received: list[dict[str, Any]] = []
        self.refusals: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    @staticmethod
    def _summary(body: bytes) -> dict[str, Any]:
        try:
            payload = json.loads(body)
        except ValueError:
            return {"raw": body[:200].decode(errors="replace")}
        keys = ("event_id", "alert", "state", "repeat", "value", "n", "time", "started_at")
        return {k: payload.get(k) for k in keys}

    def refused(self, path: str, body: bytes, how: str) -> None:
        with self.lock:
            self.refusals.append({"t": time.time(), "how": how, **self._summary(body)})

    def handle(self, path: str, body: bytes) -> tuple[int, bytes]:
        with self.lock:
            self.received.append({"seq": len(self.received), "t": time.time(), **self._summary(body)})
        return 200, b"{}"


def intervals(modes: list[tuple[float, str]], t0: float, end: float, up: str = "up") -> list[list[Any]]:
    """[start, end, mode] (seconds from t0) of the stretches a flaky server was not `up`."""
    out: list[list[Any]] = []
    for i, (t, mode) in enumerate(modes):
        if mode == up:
            continue
        until = modes[i + 1][0] if i + 1 < len(modes) else end
        out.append([round(t - t0, 2), round(until - t0, 2), mode])
    return out


class Tmpfs:
    """A tmpfs of `size_mb` mounted on `path` (root), with a ballast file that fills it and is freed
    later. While filled, a keeper thread tops the ballast up every 0.5 s, so space the service frees
    (a checkpoint truncating its log) is taken again and the filesystem stays full."""

    def __init__(self, path: Path, size_mb: int) -> None:
        self.path, self.size_mb = path, size_mb
        self.mounted = False
        self.ballast = path / "ballast.bin"
        self.events: list[dict[str, Any]] = []
        self._keep = threading.Event()
        self._keeper: threading.Thread | None = None

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0700", "tmpfs", str(self.path)],
            check=True,
            capture_output=True,
        )
        self.mounted = True

    def unmount(self) -> str | None:
        """Unmounts (lazily when busy); returns an error text, or None."""
        self.unfill()
        if not self.mounted:
            return None
        done = subprocess.run(["umount", str(self.path)], capture_output=True, text=True)
        if done.returncode != 0:
            lazy = subprocess.run(["umount", "-l", str(self.path)], capture_output=True, text=True)
            if lazy.returncode != 0:
                return f"umount failed: {done.stderr.strip()}; umount -l: {lazy.stderr.strip()}"
            self.mounted = False
            return f"umount busy ({done.stderr.strip()}); unmounted lazily"
        self.mounted = False
        return None

    def usage(self) -> dict[str, int]:
        st = os.statvfs(self.path)
        total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        ballast = self.ballast.stat().st_size if self.ballast.exists() else 0
        return {"fs_total": total, "fs_used": total - free, "fs_free": free, "ballast": ballast}

    def _top_up(self) -> int:
        """Extends the ballast over every free byte; returns the bytes added."""
        added = 0
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for _ in range(64):
                st = os.statvfs(self.path)
                free = st.f_bavail * st.f_frsize
                if free <= 0:
                    break
                size = os.fstat(fd).st_size
                chunk = free
                while chunk >= 4096:
                    try:
                        os.posix_fallocate(fd, size, chunk)
                        added += chunk
                        break
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        chunk //= 2
                else:
                    break
        finally:
            os.close(fd)
        return added

    def fill(self) -> None:
        started, before = time.time(), self.usage()
        added = self._top_up()
        self.events.append(
            {
                "t": started,
                "event": "fill",
                "took_s": round(time.time() - started, 2),
                "added": added,
                "before": before,
                "after": self.usage(),
            }
        )
        self._keep.set()
        self._keeper = threading.Thread(target=self._keep_full, name="soak-ballast", daemon=True)
        self._keeper.start()

    def _keep_full(self) -> None:
        while self._keep.is_set():
            time.sleep(0.5)
            if not self._keep.is_set():
                break
            with contextlib.suppress(OSError):
                added = self._top_up()
                if added:
                    self.events.append({"t": time.time(), "event": "top_up", "added": added})

    def unfill(self) -> None:
        was_kept = self._keep.is_set()
        self._keep.clear()
        if self._keeper is not None:
            self._keeper.join(5)
            self._keeper = None
        if self.ballast.exists():
            size = self.ballast.stat().st_size
            self.ballast.unlink()
            self.events.append({"t": time.time(), "event": "free", "freed": size, "after": self.usage()})
        elif was_kept:
            self.events.append({"t": time.time(), "event": "free", "freed": 0})
