"""The soak's samples (bench/soak.py): `Sampler` reads the service's memory, CPU, health endpoints and
metrics every few seconds during the run (and restarts a service that exited on its own); the
functions after it sum the samples up: RSS slopes, health by phase, export outcomes, CPU cores."""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx
from soak_faults import FlakyJudge, Tmpfs, WebhookReceiver
from soak_helpers import children, cpu_seconds, parse_metrics, rnd, slope_per_hour, status_kib
from soak_load import LoadSender
from soak_service import METRIC_PREFIXES, Service

# DuckDB's account of its memory by tag (buffer pool, hash tables, metadata, ...): what fills
# store.memory_limit.
DUCKDB_MEMORY = (
    "SELECT tag, memory_usage_bytes::BIGINT AS b FROM duckdb_memory() WHERE memory_usage_bytes > 0"
)


class Sampler(threading.Thread):
    """Every `every` s: the service's VmRSS (and its workers'), CPU, `/healthz`, `/healthz/ready`,
    `/metrics` (selected), the filesystem, the load's progress; one JSON line each in samples.jsonl.
    It also restarts a service that exited on its own (`Service.check_alive`)."""

    def __init__(
        self,
        every: float,
        t0: float,
        service: Service,
        sender: LoadSender,
        tmpfs: Tmpfs,
        judge: FlakyJudge,
        webhook: WebhookReceiver,
        out: Path,
    ) -> None:
        super().__init__(name="soak-sampler", daemon=True)
        self.every, self.t0, self.service, self.sender = every, t0, service, sender
        self.tmpfs, self.judge, self.webhook, self.out = tmpfs, judge, webhook, out
        self.samples: list[dict[str, Any]] = []
        self.stopped = threading.Event()
        self.client = httpx.Client(timeout=5)

    def run(self) -> None:
        with self.out.open("a") as out:
            while not self.stopped.is_set():
                due = time.time() + self.every
                try:
                    sample = self.sample()
                    self.samples.append(sample)
                    out.write(json.dumps(sample) + "\n")
                    out.flush()
                except Exception as exc:  # never let the sampler die
                    self.samples.append({"t": round(time.time() - self.t0, 2), "sampler_error": repr(exc)})
                threading.Thread(target=self.service.check_alive, daemon=True).start()
                self.stopped.wait(max(0.0, due - time.time()))

    def sample(self) -> dict[str, Any]:
        now = time.time()
        pid = self.service.pid
        sample: dict[str, Any] = {"t": round(now - self.t0, 2), "wall": now, "pid": pid}
        if pid is not None:
            workers = children(pid)
            sample["rss_kib"] = status_kib(pid)
            sample["workers"] = len(workers)
            sample["workers_rss_kib"] = sum(status_kib(w) or 0 for w in workers)
            sample["cpu_s"] = cpu_seconds(pid)
            sample["workers_cpu_s"] = sum(cpu_seconds(w) or 0 for w in workers)
        for path, key in (("/healthz", "healthz"), ("/healthz/ready", "ready")):
            try:
                response = self.client.get(self.service.http_url + path)
                sample[f"{key}_status"] = response.status_code
                if key == "healthz" or response.status_code != 404:
                    sample[f"{key}_body"] = response.text[:300]
            except httpx.HTTPError as exc:
                sample[f"{key}_status"] = type(exc).__name__
        try:  # DuckDB's buffer pool (bounded by store.memory_limit), to tell it apart in the RSS
            rows = self.client.post(self.service.http_url + "/api/sql", json={"query": DUCKDB_MEMORY}).json()
            sample["duckdb_memory"] = {row["tag"]: row["b"] for row in rows}
            sample["duckdb_buffer_bytes"] = sum(sample["duckdb_memory"].values())
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            sample["duckdb_error"] = type(exc).__name__
        try:
            page = self.client.get(self.service.http_url + "/metrics").text
            sample["metrics"] = parse_metrics(page, METRIC_PREFIXES)
        except httpx.HTTPError as exc:
            sample["metrics_error"] = type(exc).__name__
        with contextlib.suppress(OSError):
            sample["fs"] = self.tmpfs.usage()
        sample["load"] = self.sender.snapshot()
        sample["judge_mode"], sample["webhook_mode"] = self.judge.mode, self.webhook.mode
        sample["judge_counts"] = dict(self.judge.counts)
        sample["webhook_received"] = len(self.webhook.received)
        return sample


def rss_slopes(samples: list[dict[str, Any]], service: Service, t0: float, warmup: float) -> dict[str, Any]:
    """Least-squares slope of the service's RSS per start, from `warmup` s after the later of the load's
    start and the service's readiness, in MiB/hour; the workers' and the sum beside it."""
    out = []
    for start in service.starts:
        if start.ready is None:
            continue
        begin = max(t0, start.ready) + warmup
        points = [s for s in samples if s.get("pid") == start.pid and s.get("rss_kib") and s["wall"] >= begin]
        main = [(s["wall"], s["rss_kib"] / 1024) for s in points]
        both = [(s["wall"], (s["rss_kib"] + s.get("workers_rss_kib", 0)) / 1024) for s in points]
        workers = [(s["wall"], s.get("workers_rss_kib", 0) / 1024) for s in points]
        # The RSS without DuckDB's buffer pool, which fills up to store.memory_limit as the store grows.
        besides = [
            (s["wall"], s["rss_kib"] / 1024 - s["duckdb_buffer_bytes"] / 2**20)
            for s in points
            if isinstance(s.get("duckdb_buffer_bytes"), int)
        ]
        buffer = [
            (s["wall"], s["duckdb_buffer_bytes"] / 2**20)
            for s in points
            if isinstance(s.get("duckdb_buffer_bytes"), int)
        ]
        out.append(
            {
                "pid": start.pid,
                "reason": start.reason,
                "from_s": round(begin - t0, 1),
                "to_s": round(points[-1]["wall"] - t0, 1) if points else None,
                "samples": len(points),
                "rss_mib_first_last": [rnd(main[0][1]), rnd(main[-1][1])] if main else None,
                "rss_slope_mib_per_hour": rnd(slope_per_hour(main)),
                "workers_slope_mib_per_hour": rnd(slope_per_hour(workers)),
                "service_plus_workers_slope_mib_per_hour": rnd(slope_per_hour(both)),
                "peak_rss_mib": rnd(max((v for _, v in main), default=None)),
                "duckdb_buffer_mib_first_last": [rnd(buffer[0][1]), rnd(buffer[-1][1])] if buffer else None,
                "rss_without_duckdb_buffer_slope_mib_per_hour": rnd(slope_per_hour(besides)),
            }
        )
    return {"warmup_s": warmup, "series": out}


def writable_of(sample: dict[str, Any]) -> str:
    """`ragpulse_store_writable` in a sample, or 'absent' (the service did not answer)."""
    values = [v for k, v in (sample.get("metrics") or {}).items() if k.startswith("ragpulse_store_writable")]
    return f"{values[0]:g}" if values else "absent"


def health_summary(
    samples: list[dict[str, Any]], disk_full: list[float] | None, service: Service
) -> dict[str, Any]:
    """Status codes of /healthz and /healthz/ready and values of ragpulse_store_writable by phase:
    `disk_full` (ballast in place), `after_free` (from the ballast's removal to the first sample with
    /healthz/ready 200), `restarting` (a start not ready yet, or no service), `normal`; and when
    /healthz/ready and the metric turned after the fill and after the free."""
    starting = [(st.spawned, st.ready or math.inf) for st in service.starts]
    starting += [
        (st.exited, nxt.spawned)
        for st, nxt in zip(service.starts, service.starts[1:], strict=False)
        if st.exited
    ]
    back = None
    if disk_full:
        back = next(
            (s["wall"] for s in samples if s.get("wall", 0) >= disk_full[1] and s.get("ready_status") == 200),
            None,
        )
    out: dict[str, dict[str, Counter[str]]] = {}
    for s in samples:
        if "wall" not in s:
            continue
        t = s["wall"]
        if disk_full and disk_full[0] <= t < disk_full[1]:
            phase = "disk_full"
        elif disk_full and disk_full[1] <= t < (back or math.inf):
            phase = "after_free"
        elif s.get("pid") is None or any(a <= t < b for a, b in starting):
            phase = "restarting"
        else:
            phase = "normal"
        entry = out.setdefault(phase, {"healthz": Counter(), "ready": Counter(), "store_writable": Counter()})
        entry["healthz"][str(s.get("healthz_status"))] += 1
        entry["ready"][str(s.get("ready_status"))] += 1
        entry["store_writable"][writable_of(s)] += 1
    summary: dict[str, Any] = {phase: {k: dict(v) for k, v in e.items()} for phase, e in out.items()}
    if disk_full:
        not_ready = next(
            (s["wall"] for s in samples if s.get("wall", 0) >= disk_full[0] and s.get("ready_status") == 503),
            None,
        )
        unwritable = next(
            (s["wall"] for s in samples if s.get("wall", 0) >= disk_full[0] and writable_of(s) == "0"), None
        )
        writable = next(
            (s["wall"] for s in samples if s.get("wall", 0) >= disk_full[1] and writable_of(s) == "1"), None
        )
        summary["disk_transitions_s"] = {
            "ready_503_after_fill": rnd(not_ready - disk_full[0]) if not_ready else None,
            "writable_0_after_fill": rnd(unwritable - disk_full[0]) if unwritable else None,
            "ready_200_after_free": rnd(back - disk_full[1]) if back else None,
            "writable_1_after_free": rnd(writable - disk_full[1]) if writable else None,
            "sample_every_s": rnd(samples[1]["wall"] - samples[0]["wall"]) if len(samples) > 1 else None,
        }
    return summary


def export_outcomes(samples: list[dict[str, Any]]) -> dict[str, float]:
    """`ragpulse_export_requests_total` by label set, summed over the service's starts (each start's
    last sample)."""
    last: dict[int, dict[str, float]] = {}
    for s in samples:
        if s.get("pid") and s.get("metrics"):
            last[s["pid"]] = s["metrics"]
    total: dict[str, float] = defaultdict(float)
    for metrics in last.values():
        for k, v in metrics.items():
            if k.startswith(
                (
                    "ragpulse_export_requests_total",
                    "ragpulse_commit_errors_total",
                    "ragpulse_alert_evaluation_errors_total",
                    "ragpulse_assembly_errors_total",
                )
            ):
                total[k] += v
    return dict(sorted(total.items()))


def cpu_summary(
    samples: list[dict[str, Any]], service: Service, t0: float, end: float, script_cpu: float
) -> dict[str, Any]:
    """CPU cores used on average by the service and its mapping workers (per start, from its first
    to its last sample) and by this script (the load generator, judge, webhook and sampler)."""
    per_start = []
    for start in service.starts:
        points = [s for s in samples if s.get("pid") == start.pid and s.get("cpu_s") is not None]
        if len(points) < 2:
            continue
        first, last = points[0], points[-1]
        seconds = last["wall"] - first["wall"]
        per_start.append(
            {
                "pid": start.pid,
                "seconds": rnd(seconds),
                "service_cores": rnd((last["cpu_s"] - first["cpu_s"]) / seconds, 3),
                "workers_cores": rnd((last["workers_cpu_s"] - first["workers_cpu_s"]) / seconds, 3),
            }
        )
    return {"service": per_start, "soak_script_cores": rnd(script_cpu / max(1.0, end - t0), 3)}
