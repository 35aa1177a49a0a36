"""The service under soak (bench/soak.py): `ragpulse serve` from .venv/bin/ragpulse in a subprocess,
its config file (`write_config`), every start, SIGKILL, restart and final stop (`Service`, one
`Start` each), and the wait after the load until it has caught up (`settle`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from soak_faults import FlakyJudge, WebhookReceiver
from soak_helpers import alive, children, parse_metrics
from soak_schedule import Schedule

ROOT = Path(__file__).resolve().parent.parent
RAGPULSE = ROOT / ".venv" / "bin" / "ragpulse"
DECISION_WAIT = 5.0  # assembler.decision_wait in the config; the store check allows for it
# The /metrics samples the sampler records and `settle` watches.
METRIC_PREFIXES = (
    "ragpulse_store_",
    "ragpulse_spans_stored_total",
    "ragpulse_spans_received_total",
    "ragpulse_export_requests_total",
    "ragpulse_commit_errors_total",
    "ragpulse_queue_spans",
    "ragpulse_exports_throttled_total",
    "ragpulse_traces_in_flight",
    "ragpulse_traces_assembled_total",
    "ragpulse_assembly_errors_total",
    "ragpulse_alert_notifications_pending",
    "ragpulse_alert_notifications_total",
    "ragpulse_alert_evaluation_errors_total",
    "ragpulse_alert_events_total",
    "ragpulse_judge_calls_total",
    "ragpulse_judge_queue",
    "ragpulse_scoring_lag_seconds_sum",
    "ragpulse_scoring_lag_seconds_count",
)


@dataclass
class Start:
    """One start of the service: why, when, its pid and log, and when it was ready and exited."""

    reason: str
    spawned: float
    pid: int
    log: str
    ready: float | None = None
    exit_code: int | None = None
    exited: float | None = None
    note: str = ""


@dataclass
class Service:
    """`ragpulse serve --config F` in a subprocess, restarted by `start()` on the same store; every
    start is one `Start`, with its own log file in the results directory."""

    config: Path
    http_url: str
    results: Path
    starts: list[Start] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    expected_down: bool = False  # set while the script itself stops or kills the service
    unexpected_exits: list[dict[str, Any]] = field(default_factory=list)
    lingering_workers: list[dict[str, Any]] = field(default_factory=list)
    killed_at: float = 0.0
    # The command before `serve --config F`: `ragpulse`, or bench/serve_memory.py (`--memory-probe`).
    command: list[str] = field(default_factory=lambda: [str(RAGPULSE)])

    @property
    def pid(self) -> int | None:
        proc = self.proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self, reason: str, ready_timeout: float = 300) -> bool:
        with self.lock:
            log = self.results / f"serve-{len(self.starts) + 1}.log"
            env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
            env["SERVE_MEMORY_OUT"] = str(self.results / f"serve-memory-{len(self.starts) + 1}.jsonl")
            with log.open("wb") as out:
                self.proc = subprocess.Popen(
                    [*self.command, "serve", "--config", str(self.config)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=str(self.config.parent),
                )
            start = Start(reason, time.time(), self.proc.pid, log.name)
            self.starts.append(start)
            proc = self.proc
        deadline = time.time() + ready_timeout
        with httpx.Client(timeout=2) as client:
            while time.time() < deadline:
                if proc.poll() is not None:
                    start.exit_code, start.exited = proc.returncode, time.time()
                    start.note = "exited before /healthz answered: " + tail(self.results / start.log, 6)
                    return False
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.http_url}/healthz").status_code == 200:
                        start.ready = time.time()
                        return True
                time.sleep(0.2)
        start.note = f"not ready within {ready_timeout:.0f} s"
        return False

    def start_until_ready(self, reason: str, attempts: int = 30, pause: float = 5.0) -> bool:
        for attempt in range(attempts):
            if self.start(reason if attempt == 0 else f"{reason} (attempt {attempt + 1})"):
                return True
            self.kill_quietly()
            time.sleep(pause)
        return False

    def kill(self) -> dict[str, Any]:
        """SIGKILL the service (not its mapping workers, as a crash would leave them); reports the
        workers still alive 2 s later (they are then killed by pid, 10 s after)."""
        with self.lock:
            self.expected_down = True
            proc = self.proc
            assert proc is not None
            workers = children(proc.pid)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            self.killed_at = time.time()
            start = self.starts[-1]
            start.exit_code, start.exited, start.note = proc.returncode, time.time(), "SIGKILL (scheduled)"
        time.sleep(2)
        lingering = [w for w in workers if alive(w)]
        result: dict[str, Any] = {
            "killed_pid": proc.pid,
            "workers": workers,
            "workers_alive_after_2s": lingering,
        }
        if lingering:
            time.sleep(8)
            still = [w for w in lingering if alive(w)]
            for w in still:
                with contextlib.suppress(OSError):
                    os.kill(w, signal.SIGKILL)
            result["workers_alive_after_10s_killed"] = still
            self.lingering_workers.append(result)
        return result

    def kill_and_restart(self) -> dict[str, Any]:
        result = self.kill()
        restarted = self.start_until_ready("restart after SIGKILL")
        with self.lock:
            self.expected_down = False
        start = self.starts[-1]
        result.update(
            restarted=restarted,
            restart_ready_s=round(start.ready - self.killed_at, 2) if start.ready else None,
        )
        return result

    def check_alive(self) -> None:
        """Called by the sampler: a service that exited on its own is recorded and restarted."""
        with self.lock:
            proc = self.proc
            if self.expected_down or proc is None or proc.poll() is None:
                return
            start = self.starts[-1]
            if start.exited is None:
                start.exit_code, start.exited = proc.returncode, time.time()
            self.unexpected_exits.append(
                {
                    "t": time.time(),
                    "pid": proc.pid,
                    "exit_code": proc.returncode,
                    "log": start.log,
                    "log_tail": tail(self.results / start.log, 20),
                }
            )
            self.expected_down = True
        ok = self.start_until_ready("restart after an unexpected exit")
        with self.lock:
            self.expected_down = False
            self.unexpected_exits[-1]["restarted"] = ok

    def terminate(self, timeout: float = 180) -> dict[str, Any]:
        """SIGTERM and wait; SIGKILL when it does not exit in time."""
        with self.lock:
            self.expected_down = True
            proc = self.proc
            if proc is None or proc.poll() is not None:
                return {"already_exited": True, "exit_code": proc.returncode if proc else None}
            workers = children(proc.pid)
            started = time.time()
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout)
                killed = False
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
                killed = True
            start = self.starts[-1]
            start.exit_code, start.exited, start.note = code, time.time(), "SIGTERM (end of the soak)"
        time.sleep(1)
        lingering = [w for w in workers if alive(w)]
        for w in lingering:
            with contextlib.suppress(OSError):
                os.kill(w, signal.SIGKILL)
        return {
            "exit_code": code,
            "stop_seconds": round(time.time() - started - 1, 1),
            "killed_after_timeout": killed,
            "workers_alive_after_exit": lingering,
        }

    def kill_quietly(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            workers = children(proc.pid)
            proc.kill()
            proc.wait()
            for w in workers:
                if alive(w):
                    with contextlib.suppress(OSError):
                        os.kill(w, signal.SIGKILL)


def tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a log, empty when it cannot be read."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def write_config(
    path: Path,
    db: Path,
    grpc_port: int,
    http_port: int,
    judge: FlakyJudge,
    webhook: WebhookReceiver,
    schedule: Schedule,
    judge_rate: float,
    memory_limit: str | None = None,
) -> dict[str, Any]:
    """The service's config: the store, the judge, the alerts and the webhook of the soak."""
    config = {
        "receivers": {"host": "127.0.0.1", "grpc_port": grpc_port, "http_port": http_port},
        "store": {"path": str(db)},
        "assembler": {"decision_wait": DECISION_WAIT},
        "judge": {"base_url": judge.base_url, "model": "soak-judge", "api_key": "soak", "cache_size": 0},
        "sampling": {
            "judge_rate": judge_rate,
            "budget": {"judge_calls_per_minute": None, "judge_tokens_per_day": None},
        },
        "evaluators": [
            {"name": "retrieval.hit@5"},
            {"name": "retrieval.recall@5"},
            {"name": "retrieval.mrr@5"},
            {"name": "retrieval.ndcg@5"},
            {"name": "faithfulness"},
        ],
        "monitoring": {
            "evaluate_every": 5,
            "min_samples": 20,
            "retry_initial": 1,
            "retry_max": schedule.webhook_retry_max,
            "webhooks": [{"name": "soak", "url": webhook.url, "format": "json"}],
            "alerts": [
                {
                    "name": "hit-flip",
                    "score": "retrieval.hit@5",
                    "min": 0.5,
                    "window": 60,
                    "notify": ["soak"],
                },
                {
                    "name": "judge-errors",
                    "score": "faithfulness",
                    "max_error_rate": 0.05,
                    "window": 60,
                    "notify": ["soak"],
                },
            ],
        },
    }
    if memory_limit is not None:
        config["store"]["memory_limit"] = memory_limit
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return config


def settle(service: Service, timeout: float) -> dict[str, Any]:
    """After the load: wait until nothing is queued, in flight, pending for the judge or pending for
    the webhook (twice in a row), or `timeout`."""
    deadline = time.time() + timeout
    started = time.time()
    last: dict[str, Any] = {}
    quiet = 0
    with httpx.Client(timeout=10) as client:
        while time.time() < deadline:
            try:
                page = client.get(service.http_url + "/metrics").text
                m = parse_metrics(page, METRIC_PREFIXES)
                pending = client.post(
                    service.http_url + "/api/sql",
                    json={"query": "SELECT count(*) AS n FROM traces WHERE judge_status = 'pending'"},
                ).json()[0]["n"]
                last = {
                    "queue_spans": m.get("ragpulse_queue_spans", 0),
                    "traces_in_flight": m.get("ragpulse_traces_in_flight", 0),
                    "judge_pending": pending,
                    "judge_queue": m.get("ragpulse_judge_queue", 0),
                    "notifications_pending": m.get("ragpulse_alert_notifications_pending", 0),
                }
                quiet = quiet + 1 if not any(last.values()) else 0
                if quiet >= 2:
                    break
            except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
                last = {"error": repr(exc)}
                quiet = 0
            time.sleep(2)
    return {"settled": quiet >= 2, "seconds": round(time.time() - started, 1), "last": last}
