#!/usr/bin/env python3
"""The dashboard API on a large store: how long `GET /api/overview` and a filtered `GET /api/traces`
take over 1 million traces (13 million scores), through a running `ragpulse serve`.

The store is generated here (and kept for re-runs with `--db`): `--traces` traces spread over the
last `--days` days, 3 services, with the 13 default score names per trace, written through the
store's own write path (so `score_aggregates` is maintained as `serve` maintains it). Then
`ragpulse serve --db F` starts on it, and each request is timed from the client, as the median of
`--repeat` runs after one warm-up.

    .venv/bin/python bench/api.py                          # 1,000,000 traces over 7 days
    .venv/bin/python bench/api.py --traces 100000 --db /tmp/api-100k.duckdb
    .venv/bin/python bench/api.py --browser                # and each dashboard page in Chromium
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collector.schema.tables import DOCUMENTS, SCORES, STEPS, TRACES  # noqa: E402
from collector.schema.trace_rows import TraceTables  # noqa: E402
from collector.schema.windows import utc_now  # noqa: E402
from collector.store.duckdb_store import DuckDBStore  # noqa: E402
from tests.support.helpers import DEFAULT_SCORE_NAMES, free_port, wait_for  # noqa: E402

NAMES = sorted(DEFAULT_SCORE_NAMES)  # the 13 scores of the default evaluators
SERVICES = ["shop-bot", "support-bot", "search-bot"]
QUESTIONS = [
    "How long do I have to ask for a refund?",
    "Do you ship to Canada?",
    "How do I reset my password?",
]
CHUNK = 50_000  # traces per write


def generate(db: Path, traces: int, days: float) -> None:
    rng = random.Random(1)
    now = utc_now()
    started = time.perf_counter()
    with DuckDBStore(db) as store:
        for offset in range(0, traces, CHUNK):
            n = min(CHUNK, traces - offset)
            ids = [f"{i:032x}" for i in range(offset, offset + n)]
            # Traces arrive in time order, as they do in production (DuckDB's min/max per row group
            # then skips most of the table for a recent window).
            first = days * 86400 * (1 - offset / traces)
            width = days * 86400 * n / traces
            starts = sorted(now - timedelta(seconds=first - rng.random() * width) for _ in range(n))
            services = [SERVICES[i % 3] for i in range(offset, offset + n)]
            retrieval = [rng.uniform(20, 200) for _ in range(n)]
            generation = [rng.uniform(200, 2000) for _ in range(n)]
            trace_rows = TRACES.arrow_table(
                {
                    "trace_id": ids,
                    "service_name": services,
                    "start_time": starts,
                    "end_time": starts,
                    "duration_ms": [r + g + 10 for r, g in zip(retrieval, generation, strict=True)],
                    "question": [QUESTIONS[i % 3] for i in range(n)],
                    "answer": ["You can ask within 30 days of delivery."] * n,
                    "status": ["error" if rng.random() < 0.01 else "ok" for _ in range(n)],
                    "convention": ["openinference"] * n,
                    "retrieval_ms": retrieval,
                    "generation_ms": generation,
                    "input_tokens": [400] * n,
                    "output_tokens": [50] * n,
                    "step_count": [3] * n,
                    "sample_decision": ["deterministic"] * n,
                },
                n,
            )
            values = [rng.choice([1.0, 1.0, 1.0, 0.0, rng.random()]) for _ in range(n * len(NAMES))]
            write_with_scores(store, trace_rows, NAMES, values)
            print(f"  {offset + n:,} traces written ({time.perf_counter() - started:.0f} s)", flush=True)
        store.checkpoint()


def write_with_scores(
    store: DuckDBStore, trace_rows: pa.Table, names: Sequence[str], values: list[float]
) -> None:
    """Write generated `traces` rows through the store's own write path, each with a deterministic
    score of every name (`values`: trace by trace, names in order; pass from 0.5), on its root."""
    ids = trace_rows["trace_id"].to_pylist()
    services = trace_rows["service_name"].to_pylist()
    starts = trace_rows["start_time"].to_pylist()
    k = len(ids) * len(names)
    score_rows = SCORES.arrow_table(
        {
            "trace_id": [t for t in ids for _ in names],
            "span_id": ["0" * 16] * k,
            "name": list(names) * len(ids),
            "value": values,
            "status": ["pass" if v >= 0.5 else "fail" for v in values],
            "service_name": [s for s in services for _ in names],
            "bucket": [b.replace(second=0, microsecond=0) for b in starts for _ in names],
            "created_at": [b for b in starts for _ in names],
            "evaluator": ["deterministic"] * k,
            "revision": [1] * k,
        },
        k,
    )
    empty_steps, empty_docs = STEPS.arrow_schema().empty_table(), DOCUMENTS.arrow_schema().empty_table()
    store.write_traces(TraceTables(trace_rows, empty_steps, empty_docs, scores=score_rows), [])


REQUESTS = [
    ("overview, 24 h", "/api/overview", {"since": "24h"}),
    ("overview, 7 d", "/api/overview", {"since": "7d"}),
    ("overview, 24 h, one service", "/api/overview", {"since": "24h", "service": "shop-bot"}),
    ("regressions, 24 h against the day before", "/api/regressions", {"since": "24h"}),
    ("regressions, 1 h against the hour before", "/api/regressions", {"since": "1h"}),
    ("traces, 24 h, newest 50", "/api/traces", {"since": "24h"}),
    (
        "traces, 24 h, faithfulness below 0.5",
        "/api/traces",
        {"since": "24h", "score": "faithfulness", "below": "0.5"},
    ),
    (
        "traces, 24 h, failing recall, one service",
        "/api/traces",
        {"since": "24h", "failing": "retrieval.recall@5", "service": "shop-bot"},
    ),
    ("traces, 24 h, text 'refund'", "/api/traces", {"since": "24h", "q": "refund"}),
    ("traces, 24 h, worst first", "/api/traces", {"since": "24h", "sort": "worst", "order": "asc"}),
    (
        "traces, 7 d, failing faithfulness, page 10",
        "/api/traces",
        {"since": "7d", "failing": "faithfulness", "offset": "450"},
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, default=Path("/tmp/ragpulse-api-bench.duckdb"))
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument("--browser", action="store_true", help="also time the pages in headless Chromium")
    parser.add_argument("--screenshot", type=Path, help="with --browser: save the 7-day overview here (PNG)")
    args = parser.parse_args()
    if args.regenerate or not args.db.exists():
        args.db.unlink(missing_ok=True)
        print(f"generating {args.traces:,} traces ({args.traces * len(NAMES):,} scores) in {args.db}")
        generate(args.db, args.traces, args.days)
    with serving(args.db) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            for label, path, params in REQUESTS:
                client.get(path, params=params).raise_for_status()  # warm-up
                times = []
                for _ in range(args.repeat):
                    started = time.perf_counter()
                    response = client.get(path, params=params)
                    times.append(time.perf_counter() - started)
                    response.raise_for_status()
                body = response.json()
                size = _size(body)
                print(
                    f"{label}: {statistics.median(times) * 1000:.0f} ms median of {args.repeat} "
                    f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}; {size})"
                )
        if args.browser:
            time_pages(url, args.repeat, args.screenshot)


@contextlib.contextmanager
def serving(db: Path, config: dict[str, Any] | None = None) -> Iterator[str]:
    """`ragpulse serve --db DB` (with `config` as its config file) on free ports; yields its URL."""
    http_port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        command = [str(ROOT / ".venv/bin/ragpulse"), "serve", "--db", str(db)]
        command += ["--grpc-port", str(free_port()), "--http-port", str(http_port)]
        if config is not None:
            (config_file := Path(workdir) / "ragpulse.yaml").write_text(yaml.safe_dump(config))
            command += ["--config", str(config_file)]
        log = (Path(workdir) / "serve.log").open("wb")
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
        url = f"http://127.0.0.1:{http_port}"
        try:
            wait_for(lambda: _up(url), timeout=120, what="ragpulse serve")
            yield url
        finally:
            server.terminate()
            server.wait(60)


def _report(label: str, times: list[float]) -> None:
    print(
        f"{label}: {statistics.median(times) * 1000:.0f} ms median of {len(times)} "
        f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f})"
    )


def _size(body: dict[str, Any]) -> str:
    if "total" in body:
        return f"total {body['total']:,}"
    if "comparisons" in body:
        return f"{len(body['comparisons'])} comparisons"
    return f"{len(body['scores'])} scores"


# Pages of the dashboard, timed in headless Chromium from navigation to drawn (`main[data-ready]`,
# set once every request of the page answered and its charts are drawn).
PAGES = [
    ("page: overview, 24 h", "#/overview"),
    ("page: traces, 24 h", "#/traces"),
    ("page: traces, 24 h, failing faithfulness", "#/traces?failing=faithfulness"),
    ("page: alerts", "#/alerts"),
]


def time_pages(url: str, repeat: int, screenshot: Path | None) -> None:
    """Each page's load time in a real browser (Debian's chromium), median of `repeat` loads; with
    `screenshot`, the 7-day overview is saved there as a picture."""
    from playwright.sync_api import sync_playwright

    from tests.support.browser import CHROMIUM, CHROMIUM_ARGS

    newest = httpx.get(f"{url}/api/traces", params={"since": "24h", "limit": 1}, timeout=60).json()
    pages = [*PAGES, ("page: one trace", f"#/trace/{newest['traces'][0]['trace_id']}")]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1360, "height": 900})
        for label, route in pages:
            times, panels = [], []
            for _ in range(repeat + 1):  # the first load warms the server and the browser
                page.goto("about:blank")
                started = time.perf_counter()
                page.goto(f"{url}/{route}")
                page.wait_for_selector("main[data-ready]", timeout=60_000)
                times.append(time.perf_counter() - started)
                if route == "#/overview":
                    # The regression panel fills in after the page is drawn; wait for it, so its
                    # query does not run into the next load's.
                    page.wait_for_selector("#regressions[data-state=done]", timeout=120_000)
                    panels.append(time.perf_counter() - started)
            _report(label, times[1:])
            if panels:
                _report(f"{label}, regression panel filled", panels[1:])
        if screenshot is not None:
            page.goto(f"{url}/#/overview")
            page.evaluate("sessionStorage.setItem('ragpulse.since', '7d')")
            page.reload()
            page.wait_for_selector("#regressions[data-state=done]", timeout=120_000)
            page.screenshot(path=str(screenshot), full_page=True)
            print(f"overview, 7 d: saved in {screenshot}")
        browser.close()


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
