#!/usr/bin/env python3
"""Ingest benchmark: persisted spans/s, Export latency and peak RSS of `ragpulse serve`.

Starts `ragpulse serve` on a fresh DuckDB file, drives it with the OTLP load generator
(bench/load_generator.py: OpenInference RAG traces of 4 spans, ~770 bytes/span), then counts the
spans in DuckDB. A second pass sends the same kind of requests from an instrumented client to
measure per-Export latency (p50/p99). Peak RSS is the server's VmHWM from /proc, alone and
plus its mapping workers' (the sum of the peaks: an upper bound of the peak of the sum); the sum of
their RSS is sampled every 0.1 s, the sum of their PSS at each new peak of it (`MemorySampler`).
`--memory-cap` runs the service in a memory cgroup with that hard limit and reports its OOM kills.

    .venv/bin/python bench/ingest.py                  # gRPC, 100k traces (400k spans)
    .venv/bin/python bench/ingest.py --traces 20000 --protocol http-json
    .venv/bin/python bench/ingest.py --no-assembly --redact   # the cost of redaction
    sudo .venv/bin/python bench/ingest.py --traces 250000 --memory-cap 1024   # inside a 1 GiB cgroup
    .venv/bin/python bench/ingest.py --rate 10000 --traces 150000 --stored-traces 2000000
                                                      # restarted over 2,000,000 stored traces
    .venv/bin/python bench/ingest.py --rate 10000 --traces 150000 --behind-gateway
                                                      # an app whose entry spans have a remote parent
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
from google.protobuf import json_format
from load_generator import behind_gateway, build
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
# A gRPC burst is sent by the load generator run as its own process (`python load_generator.py ...`).
LOAD_GENERATOR = Path(__file__).resolve().with_name("load_generator.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def memory_mib(pid: int, field: str = "VmRSS") -> float:
    """A memory figure of a process from /proc/<pid>/status (VmRSS: now; VmHWM: its peak)."""
    match = re.search(rf"{field}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(match.group(1)) / 1024 if match else float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pss_mib(pid: int) -> float:
    """A process's proportional set size (/proc/<pid>/smaps_rollup): its private pages plus its
    share of the pages it shares (the libraries every process maps, counted once over them all)."""
    match = re.search(r"^Pss:\s+(\d+) kB", Path(f"/proc/{pid}/smaps_rollup").read_text(), re.M)
    return int(match.group(1)) / 1024 if match else float("nan")


class MemorySampler(threading.Thread):
    """Samples the memory of the service plus its mapping workers every 0.1 s: the peak of the sum
    of their RSS (which the sum of each process's own peak, `VmHWM`, only bounds from above), and
    the peak of the sum of their PSS. RSS counts a shared library's pages once per process that
    maps it (pyarrow's in all three); PSS shares them out, so its sum is what the group occupies.

    Reading PSS walks a process's page tables (about 8 ms of CPU for the service at 700 MiB), so
    it is read only when the RSS sum reaches a new peak, and at most once a second otherwise: at 10
    reads a second it took a seventh of a core from the service under test."""

    def __init__(self, pid: int, cgroup: MemoryCgroup | None = None) -> None:
        super().__init__(daemon=True)
        self.pid, self.cgroup = pid, cgroup
        self.peak_mib = 0.0
        self.peak_pss_mib = 0.0
        self.peak_cgroup_anon_mib = 0.0
        self.stopped = threading.Event()

    def run(self) -> None:
        pss_read_at = 0.0
        while not self.stopped.wait(0.1):
            processes = [self.pid, *children(self.pid)]
            try:
                total = sum(memory_mib(p) for p in processes)
                if total > self.peak_mib or time.monotonic() - pss_read_at >= 1.0:
                    pss_read_at = time.monotonic()
                    self.peak_pss_mib = max(self.peak_pss_mib, sum(pss_mib(p) for p in processes))
            except OSError:  # a process ended between listing and reading
                continue
            self.peak_mib = max(self.peak_mib, total)
            if self.cgroup:
                self.peak_cgroup_anon_mib = max(self.peak_cgroup_anon_mib, self.cgroup.anon_mib())


class MemoryCgroup:
    """A memory cgroup with a hard limit that the service and its workers run in (`--memory-cap`):
    past the limit the kernel reclaims page cache and then kills a process (an OOM kill), as a
    container's limit would. Needs a writable cgroup hierarchy (root on a cgroup v1 or v2 host)."""

    V1, V2 = Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup")

    def __init__(self, limit_bytes: int) -> None:
        name = f"ragpulse-bench-{os.getpid()}"
        self.v1 = (self.V1 / "memory.limit_in_bytes").exists()
        self.path = (self.V1 if self.v1 else self.V2) / name
        self.path.mkdir()
        (self.path / ("memory.limit_in_bytes" if self.v1 else "memory.max")).write_text(str(limit_bytes))
        if self.v1:  # no swap here: a limit on memory and swap together makes it a hard limit
            with contextlib.suppress(OSError):
                (self.path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))

    def enter(self) -> None:
        """Moves the calling process in (run in the child before exec: its children follow)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def anon_mib(self) -> float:
        """The cgroup's anonymous memory now: what it cannot give back without a kill (no swap)."""
        stat = (self.path / "memory.stat").read_text()
        match = re.search(r"^total_rss (\d+)$" if self.v1 else r"^anon (\d+)$", stat, re.M)
        return int(match.group(1)) / 2**20 if match else float("nan")

    def report(self) -> str:
        """The cgroup's peak usage (page cache included) and its OOM kills."""
        if self.v1:
            peak = int((self.path / "memory.max_usage_in_bytes").read_text())
            events = (self.path / "memory.oom_control").read_text()
        else:
            peak_file = self.path / "memory.peak"
            peak = int(peak_file.read_text()) if peak_file.exists() else -1
            events = (self.path / "memory.events").read_text()
        kills = re.search(r"oom_kill (\d+)", events)
        return (
            f"memory cgroup: peak usage {peak / 2**20:.0f} MiB (page cache included); "
            f"OOM kills {kills.group(1) if kills else 'unknown'}"
        )

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()


def children(pid: int) -> list[int]:
    """The processes `pid` started, from any of its threads (the mapping workers)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


# One client for every poll: a new httpx client per request builds an SSL context each time, which
# cost the benchmark process half a core that the service under test should have had.
_api = httpx.Client(timeout=60)


def count_rows(http_url: str, table: str = "spans") -> int:
    query = {"query": f"SELECT count(*) AS n FROM {table}"}
    response = _api.post(f"{http_url}/api/sql", json=query)
    response.raise_for_status()
    return int(response.json()[0]["n"])


def metric(http_url: str, name: str) -> float:
    """One sample of a Prometheus metric (summed over labels)."""
    return metric_value(_api.get(f"{http_url}/metrics").text, name)


def metric_value(text: str, name: str) -> float:
    """A metric's value (summed over labels) in a `/metrics` page."""
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


class PersistWatcher(threading.Thread):
    """Polls the service's `/metrics` (spans committed, traces assembled, traces in flight); the rate
    is measured from the first stored span to the last, and the final count is checked in DuckDB."""

    def __init__(self, url: str, expected: int) -> None:
        super().__init__(daemon=True)
        self.url, self.expected = url, expected
        self.first: tuple[float, int] | None = None
        self.last: tuple[float, int] = (0.0, 0)
        self.max_in_flight = 0.0
        self.assembled: list[tuple[float, float]] = []  # (time, traces assembled so far) per poll
        self.stored: list[tuple[float, int]] = []  # (time, spans stored so far) per poll
        self.counted = 0  # spans counted in DuckDB once the metric reached `expected`

    def run(self) -> None:
        deadline = time.perf_counter() + 900
        while self.last[1] < self.expected and time.perf_counter() < deadline:
            # One scrape a poll (about 0.7 ms of the service's CPU): a `count(*)` through /api/sql
            # as well cost twice that again, ten times a second, taken from the service measured.
            now = time.perf_counter()
            page = _api.get(f"{self.url}/metrics").text
            sample = (now, int(metric_value(page, "ragpulse_spans_stored_total")))
            self.max_in_flight = max(self.max_in_flight, metric_value(page, "ragpulse_traces_in_flight"))
            self.assembled.append((now, metric_value(page, "ragpulse_traces_assembled_total")))
            self.stored.append(sample)
            if sample[1] and self.first is None:
                self.first = sample
            self.last = sample
            time.sleep(0.1)
        self.counted = count_rows(self.url)

    def report(self) -> str:
        if self.first is None or self.last[0] <= self.first[0]:
            return f"persisted: {self.last[1]} spans (too few samples for a rate)"
        rate = (self.last[1] - self.first[1]) / (self.last[0] - self.first[0])
        return (
            f"persisted: {self.counted} of {self.expected} spans counted in DuckDB; "
            f"{rate:.0f} spans/s from first to last stored span"
        )


# Seconds after the first assemblies before the rate while spans arrive is measured: the pipeline
# (complete traces waiting for a job, jobs in the workers, results waiting for their write) fills.
PIPELINE_FILL = 2.0


def assembly_rate_while_arriving(watcher: PersistWatcher, decision_wait: float) -> str:
    """Traces assembled per second while spans were still arriving, from `decision_wait` plus the
    pipeline's fill after the first stored span to the last stored span: the rate assembly keeps,
    apart from its latency (the drain after the last span is the latency, not the rate)."""
    if watcher.first is None:
        return "n/a"
    begin = watcher.first[0] + decision_wait + PIPELINE_FILL
    window = [(t, n) for t, n in watcher.assembled if begin <= t <= watcher.last[0]]
    if len(window) < 2 or window[-1][0] - window[0][0] < 5.0:
        return "n/a (fewer than 5 s of spans arriving after the first assemblies)"
    (t0, n0), (t1, n1) = window[0], window[-1]
    rate = (n1 - n0) / (t1 - t0)
    return f"{rate:.0f} traces/s = {rate * 4:.0f} spans/s over the {t1 - t0:.1f} s before the last span"


def assembly_lag(watcher: PersistWatcher, decision_wait: float, spans_per_trace: int = 4) -> str:
    """How far assembly trailed the stored spans while they arrived, in seconds beyond
    `decision_wait`: for each poll, the time since the spans of as many traces as were assembled by
    then had been stored (each load-generator trace's spans are stored together). A lag that stays
    flat means assembly keeps up with the offered rate; one that grows means it does not."""
    lags = []
    stored = watcher.stored
    counts = [n for _, n in stored]  # non-decreasing
    for t, assembled in watcher.assembled:
        if not assembled or t > watcher.last[0]:
            continue
        needed = assembled * spans_per_trace
        reached = bisect.bisect_left(counts, needed)
        if reached == len(counts):
            continue
        (t1, n1), (t0, n0) = stored[reached], stored[max(reached - 1, 0)]
        at = t1 if n1 == n0 else t0 + (t1 - t0) * (needed - n0) / (n1 - n0)
        lags.append(t - at - decision_wait)
    if len(lags) < 10:
        return "n/a (too few polls)"
    tenths = " ".join(f"{lags[len(lags) * k // 10]:.1f}" for k in range(10))
    return (
        f"median {statistics.median(lags):.1f} s, max {max(lags):.1f} s, at the last stored span "
        f"{lags[-1]:.1f} s (over {len(lags)} polls; at each tenth of them: {tenths})"
    )


def report_assembly(
    url: str, traces: int, watcher: PersistWatcher, decision_wait: float, stored_before: int = 0
) -> None:
    """Traces assembled while spans streamed in, and how long until every trace was assembled,
    counted from the first stored span (request building and start-up excluded). `stored_before`:
    the traces the store held before the run."""
    started = watcher.first[0] if watcher.first else time.perf_counter()
    at_persisted = count_rows(url, "traces") - stored_before
    persisted_at = time.perf_counter()
    deadline = time.perf_counter() + 600
    done = at_persisted
    while done < traces and time.perf_counter() < deadline:
        time.sleep(0.1)
        done = count_rows(url, "traces") - stored_before
    finished = time.perf_counter()
    busy = finished - started - decision_wait
    rate = f"{done * 4 / busy:.0f} spans/s" if busy > 1 else "n/a (decision_wait longer than the run)"
    print(
        f"end to end: {rate} stored and assembled (spans / (time to the last trace assembled "
        f"- decision_wait)); backlog when the last span was stored: {traces - at_persisted} traces, "
        f"drained in {finished - persisted_at:.1f} s"
    )
    print(f"assembly while spans arrived: {assembly_rate_while_arriving(watcher, decision_wait)}")
    print(f"assembly lag beyond decision_wait while spans arrived: {assembly_lag(watcher, decision_wait)}")
    print(
        f"assembly: {at_persisted} traces assembled when the last span was stored; all {done} after "
        f"{finished - started:.1f} s ({done / (finished - started):.0f} traces/s overall, including the "
        f"final decision_wait); peak traces in flight {watcher.max_in_flight:.0f}; "
        f"unknown convention {metric(url, 'ragpulse_traces_unknown_convention_total'):.0f}"
    )


def start_server(
    db: Path, extra: list[str], env: dict[str, str], log: Path, cgroup: MemoryCgroup | None = None
) -> tuple[subprocess.Popen[bytes], int, str]:
    grpc_port, http_port = free_port(), free_port()
    cmd = [
        str(ROOT / ".venv/bin/ragpulse"),
        "serve",
        "--db",
        str(db),
        "--grpc-port",
        str(grpc_port),
        "--http-port",
        str(http_port),
        *extra,
    ]
    with log.open("wb") as out:  # a file, not a pipe: a chatty server must never block on stderr
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=out,
            env={**os.environ, **env},
            preexec_fn=cgroup.enter if cgroup else None,
        )
    url = f"http://127.0.0.1:{http_port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, grpc_port, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not start: " + log.read_text())


def timed_exports(
    requests: list[Any], concurrency: int, send: Any, interval: float = 0.0
) -> tuple[list[float], float]:
    """Send every request from `concurrency` threads, request i no earlier than i * `interval` s
    after the start (0: as fast as possible); returns per-Export seconds and wall time."""
    latencies: list[float] = []
    lock = threading.Lock()
    todo = iter(range(len(requests)))
    begin = time.perf_counter()

    def worker() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            delay = begin + i * interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            for attempt in range(100):
                started = time.perf_counter()
                if send(requests[i]):
                    with lock:
                        latencies.append(time.perf_counter() - started)
                    break
                time.sleep(0.05 * (attempt + 1))

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, time.perf_counter() - started


def seed_traces(db: Path, traces: int) -> None:
    """A store holding `traces` trace rows assembled a day ago (their spans are not needed: the
    service reads `traces` to learn whether a trace was assembled before), checkpointed."""
    from collector.store.duckdb_store import DuckDBStore

    store = DuckDBStore(db)
    store._con.execute(
        f"""INSERT INTO traces BY NAME
        SELECT md5(i::VARCHAR) AS trace_id, 'seed' AS service_name,
               now()::TIMESTAMP - INTERVAL 1 DAY AS start_time,
               now()::TIMESTAMP - INTERVAL 1 DAY AS assembled_at,
               'complete' AS assembly_reason, 1 AS assembly_count
        FROM range({traces}) r(i)"""
    )
    store.close()


def grpc_sender(port: int) -> Any:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)])
    stub = trace_service_pb2_grpc.TraceServiceStub(channel)

    def send(request: Any) -> bool:
        try:
            stub.Export(request, timeout=30)
            return True
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED):
                return False
            raise

    return send


def http_sender(url: str, as_json: bool) -> tuple[Any, Any]:
    client = httpx.Client(timeout=30)
    media = "application/json" if as_json else "application/x-protobuf"

    def encode(request: Any) -> bytes:
        if not as_json:
            return bytes(request.SerializeToString())
        # OTLP/JSON wants hex ids; json_format writes base64, which ragpulse also accepts.
        return json_format.MessageToJson(request, indent=None).encode()

    def send(body: bytes) -> bool:
        response = client.post(f"{url}/v1/traces", content=body, headers={"Content-Type": media})
        if response.status_code == 503:
            return False
        response.raise_for_status()
        return True

    return encode, send


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100, help="traces per Export (4 spans each)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--protocol", choices=["grpc", "http-protobuf", "http-json"], default="grpc")
    parser.add_argument("--keep", action="store_true", help="keep the database directory")
    parser.add_argument("--no-assembly", action="store_true", help="ingest only (assembler.enabled: false)")
    parser.add_argument("--decision-wait", type=float, default=5.0, help="assembler.decision_wait")
    parser.add_argument("--max-traces", type=int, default=50_000, help="assembler.max_traces")
    parser.add_argument("--workers", type=int, default=2, help="assembler.workers (mapping processes)")
    parser.add_argument("--worker-nice", type=int, default=10, help="assembler.worker_nice")
    parser.add_argument(
        "--rate", type=float, default=0, help="offer this many spans/s (gRPC, paced) instead of a burst"
    )
    parser.add_argument(
        "--redact", action="store_true", help="redaction: every preset, applied before storage"
    )
    parser.add_argument(
        "--pii", action="store_true", help="personal data in every trace (load_generator.py --pii)"
    )
    parser.add_argument(
        "--memory-cap",
        type=int,
        default=0,
        metavar="MIB",
        help="run the service and its workers in a memory cgroup limited to MIB (root; Linux)",
    )
    parser.add_argument(
        "--behind-gateway",
        action="store_true",
        help="with --rate: each root span has a parent in another process that reports elsewhere",
    )
    parser.add_argument(
        "--stored-traces",
        type=int,
        default=0,
        metavar="N",
        help="start over a store that already holds N traces assembled a day before (a service "
        "restarted over its history)",
    )
    args = parser.parse_args()
    if args.behind_gateway and not args.rate:
        parser.error("--behind-gateway needs --rate")

    workdir = Path(tempfile.mkdtemp(prefix="ragpulse-bench-"))
    db = workdir / "bench.duckdb"
    if args.stored_traces:
        seed_traces(db, args.stored_traces)
    env = {
        "RAGPULSE_ASSEMBLER__ENABLED": "false" if args.no_assembly else "true",
        "RAGPULSE_ASSEMBLER__DECISION_WAIT": str(args.decision_wait),
        "RAGPULSE_ASSEMBLER__MAX_TRACES": str(args.max_traces),
        "RAGPULSE_ASSEMBLER__WORKERS": str(args.workers),
        "RAGPULSE_ASSEMBLER__WORKER_NICE": str(args.worker_nice),
    }
    if args.redact:
        env["RAGPULSE_REDACTION__PRESETS"] = "[email, phone, credit_card, iban, ip_address, api_key]"
    cgroup = MemoryCgroup(args.memory_cap << 20) if args.memory_cap else None
    proc, grpc_port, url = start_server(db, [], env, workdir / "serve.log", cgroup)
    try:
        batches = args.traces // args.batch
        expected = batches * args.batch * 4
        print(
            f"ragpulse serve pid {proc.pid}; {expected} spans in {batches} exports of {args.batch * 4}, "
            f"{args.concurrency} concurrent, protocol {args.protocol}"
        )
        watcher = PersistWatcher(url, expected)
        watcher.start()
        memory = MemorySampler(proc.pid, cgroup)
        memory.start()
        if args.rate:
            requests = [build(args.batch, i) for i in range(batches)]
            if args.behind_gateway:
                requests = [behind_gateway(r) for r in requests]
            _, wall = timed_exports(
                requests, args.concurrency, grpc_sender(grpc_port), args.batch * 4 / args.rate
            )
            print(
                f"offered {args.rate:.0f} spans/s: sent {expected} spans in {wall:.2f}s "
                f"= {expected / wall:.0f}/s"
            )
        elif args.protocol == "grpc":
            out = subprocess.run(
                [
                    sys.executable,
                    str(LOAD_GENERATOR),
                    f"127.0.0.1:{grpc_port}",
                    str(args.traces),
                    str(args.batch),
                    str(args.concurrency),
                    *(["--pii"] if args.pii else []),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            print("load tool:", out.stdout.strip())
        else:
            encode, send = http_sender(url, args.protocol == "http-json")
            bodies = [encode(build(args.batch, i)) for i in range(batches)]
            _, wall = timed_exports(bodies, args.concurrency, send)
            print(f"sent {expected} spans in {wall:.2f}s = {expected / wall:.0f} spans/s accepted")
        watcher.join(900)
        print(watcher.report())
        if not args.no_assembly:
            report_assembly(url, args.traces, watcher, args.decision_wait, args.stored_traces)
        memory.stopped.set()
        worker_cpu = sum(cpu_seconds(child) for child in children(proc.pid))
        server_cpu = cpu_seconds(proc.pid)
        print(f"CPU used so far: ragpulse serve {server_cpu:.1f} s, mapping workers {worker_cpu:.1f} s")

        # Latency pass: the same kind of requests from an instrumented client (new trace ids).
        n = max(args.concurrency * 25, min(batches, 250))
        if args.protocol == "grpc":
            requests = [build(args.batch, 10_000 + i) for i in range(n)]
            latencies, wall = timed_exports(requests, args.concurrency, grpc_sender(grpc_port))
        else:
            encode, send = http_sender(url, args.protocol == "http-json")
            bodies = [encode(build(args.batch, 10_000 + i)) for i in range(n)]
            latencies, wall = timed_exports(bodies, args.concurrency, send)
        print(
            f"export latency over {len(latencies)} exports of {args.batch * 4} spans: "
            f"p50 {percentile(latencies, 50) * 1000:.1f} ms, p99 {percentile(latencies, 99) * 1000:.1f} ms "
            f"({n * args.batch * 4 / wall:.0f} spans/s during this pass)"
        )
        server = memory_mib(proc.pid, "VmHWM")
        workers = sum(memory_mib(child, "VmHWM") for child in children(proc.pid))
        print(
            f"peak RSS of ragpulse serve: {server:.0f} MiB; with its mapping workers' peaks: "
            f"{server + workers:.0f} MiB; peak of their sum until every trace was assembled (sampled "
            f"every 0.1 s): {memory.peak_mib:.0f} MiB; peak of the sum of their PSS (shared pages "
            f"counted once): {memory.peak_pss_mib:.0f} MiB"
        )
        if cgroup:
            print(
                f"{cgroup.report()}; peak anonymous memory in it (sampled every 0.1 s): "
                f"{memory.peak_cgroup_anon_mib:.0f} MiB"
            )
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        if not args.keep:
            for p in sorted(workdir.glob("*")):
                p.unlink()
            os.rmdir(workdir)
        if cgroup:
            cgroup.remove()


if __name__ == "__main__":
    main()
