#!/usr/bin/env python3
"""Scale-out benchmark: `ragpulse serve` on the embedded file, and on a DuckLake with 1 and 2 replicas.

For each layout it starts the replicas (a fresh file, or a fresh PostgreSQL catalog database and data
directory; PostgreSQL itself is started here, as in the tests), sends `--traces` traces of the load
generator (bench/load_generator.py, 4 spans each, 100 per Export) as a burst, split by trace id over
the replicas the way the Collector's loadbalancing exporter routes, and measures:

- spans persisted / s (first to last stored span, counted through a replica's SQL API, which on the
  lake reads every replica's rows);
- spans stored, assembled and scored / s: all spans / (time until the last trace is assembled,
  from the first stored span, minus `decision_wait`);
- CPU seconds of each replica (service and its mapping worker) over the run;
- latency of the dashboard's and the monitor's queries (JSON API, median of `--repeat`) once the
  traces are in;
- on the lake: Parquet data files before and after one maintenance round (`Store.maintain`: fold
  aggregates, flush inlined rows, merge adjacent files, expire snapshots, delete old files) and the
  time it takes.

    .venv/bin/python bench/lake.py                               # 50,000 traces per layout
    .venv/bin/python bench/lake.py --traces 20000 --layouts lake1 lake2
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml
from api import REQUESTS
from ingest import LOAD_GENERATOR, MemorySampler, children, cpu_seconds, free_port

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collector.store import open_store  # noqa: E402
from collector.store.config import StoreConfig  # noqa: E402
from tests.support.postgres import PostgresServer  # noqa: E402

# The dashboard's and the monitor's reads (bench/api.py's requests, minus the 7-day ones: the run
# holds minutes of data).
QUERIES = [r for r in REQUESTS if "7 d" not in r[0]]
_http = httpx.Client(timeout=120)


class Replica:
    def __init__(self, name: str, store: dict[str, Any], workdir: Path, decision_wait: float) -> None:
        self.name = name
        self.grpc_port, self.http_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.config = workdir / f"{name}.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "receivers": {
                        "host": "127.0.0.1",
                        "grpc_port": self.grpc_port,
                        "http_port": self.http_port,
                    },
                    "store": store,
                    "assembler": {"decision_wait": decision_wait},
                }
            )
        )
        self.log = workdir / f"{name}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(ROOT / ".venv/bin/ragpulse"), "serve", "--config", str(self.config)],
                stdout=subprocess.DEVNULL,
                stderr=out,
                cwd=workdir,
            )
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if _http.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.proc.kill()
        raise SystemExit(f"replica {name} did not start: {self.log.read_text()}")

    def cpu(self) -> float:
        return sum(cpu_seconds(p) for p in [self.proc.pid, *children(self.proc.pid)])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(120)


def count(url: str, table: str) -> int:
    response = _http.post(f"{url}/api/sql", json={"query": f"SELECT count(*) AS n FROM {table}"})
    response.raise_for_status()
    return int(response.json()[0]["n"])


def timed(url: str, path: str, params: dict[str, str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        _http.get(f"{url}{path}", params=params).raise_for_status()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def parquet_files(data_path: Path) -> int:
    return sum(1 for _ in data_path.rglob("*.parquet"))


def run_layout(
    layout: str, args: argparse.Namespace, pg: PostgresServer | None, workdir: Path
) -> dict[str, Any]:
    replicas_wanted = 1 if layout in ("file", "lake1") else 2
    data_path = workdir / "lake"
    if layout == "file":
        store: dict[str, Any] = {"path": str(workdir / "ragpulse.duckdb")}
    else:
        assert pg is not None
        catalog = pg.create_database(f"bench_{uuid.uuid4().hex[:8]}")
        store = {"backend": "ducklake", "catalog": catalog, "data_path": f"{data_path}/"}
    replicas = [
        Replica(
            f"r{i + 1}",
            {**store, **({"replica": f"r{i + 1}"} if layout != "file" else {})},
            workdir,
            args.decision_wait,
        )
        for i in range(replicas_wanted)
    ]
    samplers = [MemorySampler(r.proc.pid) for r in replicas]
    for sampler in samplers:
        sampler.start()
    url = replicas[0].url
    spans_expected = args.traces * 4
    cpu_before = [r.cpu() for r in replicas]
    targets = ",".join(f"127.0.0.1:{r.grpc_port}" for r in replicas)
    sender = subprocess.Popen(
        [sys.executable, str(LOAD_GENERATOR), targets, str(args.traces), "100", "4"],
        stdout=subprocess.PIPE,
        text=True,
    )
    first: tuple[float, int] | None = None
    last = (0.0, 0)
    deadline = time.perf_counter() + 1800
    while last[1] < spans_expected and time.perf_counter() < deadline:
        # The stored rows: the `spans` view would add its search for copies to every poll.
        sample = (time.perf_counter(), count(url, "received_spans"))
        if sample[1] and first is None:
            first = sample
        last = sample
        time.sleep(0.1)
    out, _ = sender.communicate(timeout=600)
    assert first is not None
    persisted_rate = (last[1] - first[1]) / (last[0] - first[0])
    traces_done = count(url, "traces")
    while traces_done < args.traces and time.perf_counter() < deadline:
        time.sleep(0.2)
        traces_done = count(url, "traces")
    finished = time.perf_counter()
    scored_rate = traces_done * 4 / (finished - first[0] - args.decision_wait)
    cpu = [r.cpu() - before for r, before in zip(replicas, cpu_before, strict=True)]
    queries = {label: timed(url, path, params, args.repeat) for label, path, params in QUERIES}
    result: dict[str, Any] = {
        "layout": layout,
        "replicas": replicas_wanted,
        "sent": out.strip(),
        "persisted_spans_per_s": persisted_rate,
        "scored_spans_per_s": scored_rate,
        "traces": traces_done,
        "cpu_s": cpu,
        "queries_s": queries,
    }
    if layout != "file":
        # One maintenance round while the replicas serve (as the leader's would run), then the same
        # queries again on the compacted lake.
        on_disk_before = parquet_files(data_path)
        config = StoreConfig.model_validate({**store, "replica": "bench-maintenance"})
        with open_store(config) as lake:
            listed_before = listed_files(lake)
            started = time.perf_counter()
            lake.maintain()
            result["maintenance_s"] = time.perf_counter() - started
            result["parquet_files_listed"] = (listed_before, listed_files(lake))
        result["parquet_files_on_disk"] = (on_disk_before, parquet_files(data_path))
        result["queries_after_compaction_s"] = {
            label: timed(url, path, params, args.repeat) for label, path, params in QUERIES
        }
    for sampler in samplers:
        sampler.stopped.set()
    result["peak_rss_mib"] = [s.peak_mib for s in samplers]
    for replica in replicas:
        replica.stop()
    return result


def listed_files(lake: Any) -> int:
    """Data files the lake's catalog lists (live ones: merged-away files are no longer listed)."""
    return int(lake.query("SELECT sum(file_count) FROM ducklake_table_info('lake')", 1, 60).rows[0][0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=int, default=50_000)
    parser.add_argument(
        "--layouts", nargs="+", default=["file", "lake1", "lake2"], choices=["file", "lake1", "lake2"]
    )
    parser.add_argument("--decision-wait", type=float, default=5.0, help="assembler.decision_wait")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each query (median)")
    args = parser.parse_args()
    pg = PostgresServer().start() if any(layout != "file" for layout in args.layouts) else None
    results = []
    try:
        for layout in args.layouts:
            with tempfile.TemporaryDirectory(prefix=f"ragpulse-lake-bench-{layout}-") as tmp:
                print(f"--- {layout}", flush=True)
                result = run_layout(layout, args, pg, Path(tmp))
                results.append(result)
                for key, value in result.items():
                    if not key.startswith("queries"):
                        print(f"  {key}: {value}", flush=True)
                after = result.get("queries_after_compaction_s", {})
                for label, seconds in result["queries_s"].items():
                    compacted = f"; after compaction {after[label] * 1000:.0f} ms" if label in after else ""
                    print(f"  query {label}: {seconds * 1000:.0f} ms{compacted}", flush=True)
    finally:
        if pg is not None:
            pg.stop()


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
