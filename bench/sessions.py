#!/usr/bin/env python3
"""`GET /api/sessions` on a large store: its p50 over `--sessions` sessions (default 100,000) of
`--turns` turns each, through a running `ragpulse serve`.

The store is generated here (and kept for re-runs with `--db`), as bench/api.py generates its own:
traces with session ids and users, spread over the last `--days` days, 3 services, 4 score names per
trace (a session's turns fail at its own rate, so sessions differ), written through the store's own
write path, each chunk's sessions then computed as the sessions refresher does (the time it takes is
printed). Then `ragpulse serve --db F` starts on it, and each request is timed from the client, as
the median of `--repeat` runs after one warm-up.

    .venv/bin/python bench/sessions.py                                # 100,000 sessions x 5 turns
    .venv/bin/python bench/sessions.py --sessions 10000 --db /tmp/sessions-10k.duckdb
    .venv/bin/python bench/sessions.py --refresh 100,1000,10000      # and the refresher's rounds
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from api import SERVICES, serving, write_with_scores  # noqa: E402

from collector.schema.tables import TRACES  # noqa: E402
from collector.schema.windows import utc_now  # noqa: E402
from collector.store.duckdb_store import DuckDBStore  # noqa: E402

NAMES = ["answer_relevance", "context_relevance", "faithfulness", "retrieval.recall@5"]
CHUNK = 20_000  # sessions per write


def generate(db: Path, sessions: int, turns: int, days: float) -> None:
    """`sessions` sessions of `turns` turns each, in time order (as they arrive in production)."""
    rng = random.Random(1)
    now = utc_now()
    started = time.perf_counter()
    with DuckDBStore(db) as store:
        for offset in range(0, sessions, CHUNK):
            n = min(CHUNK, sessions - offset)
            first = days * 86400 * (1 - offset / sessions)
            width = days * 86400 * n / sessions
            session_starts = sorted(now - timedelta(seconds=first - rng.random() * width) for _ in range(n))
            ids, session_ids, users, services, starts, fail_rates = [], [], [], [], [], []
            for s, at in enumerate(session_starts, offset):
                fail_rate = rng.choice([0.0, 0.0, 0.05, 0.2, 0.6])
                for turn in range(turns):
                    ids.append(f"{s * turns + turn:032x}")
                    session_ids.append(f"session-{s:08d}")
                    users.append(f"user-{s % 20_000:05d}")
                    services.append(SERVICES[s % 3])
                    starts.append(at + timedelta(seconds=40 * turn))
                    fail_rates.append(fail_rate)
            m = len(ids)
            trace_rows = TRACES.arrow_table(
                {
                    "trace_id": ids,
                    "service_name": services,
                    "session_id": session_ids,
                    "user_id": users,
                    "start_time": starts,
                    "end_time": [t + timedelta(seconds=1.5) for t in starts],
                    "duration_ms": [1500.0] * m,
                    "question": ["And for shoes?"] * m,
                    "answer": ["You can return shoes within 30 days."] * m,
                    "status": ["ok"] * m,
                    "convention": ["openinference"] * m,
                    "sample_decision": ["deterministic"] * m,
                },
                m,
            )
            values = [
                0.0 if rng.random() < rate else rng.uniform(0.6, 1.0) for rate in fail_rates for _ in NAMES
            ]
            write_with_scores(store, trace_rows, NAMES, values)
            # What the sessions refresher does after these writes (in `serve`, every refresh_interval).
            begun = time.perf_counter()
            computed = store.refresh_sessions()
            print(
                f"  {offset + n:,} sessions written ({time.perf_counter() - started:.0f} s); "
                f"{computed:,} computed again in {time.perf_counter() - begun:.2f} s",
                flush=True,
            )
        store.checkpoint()


def time_refresh(db: Path, counts: list[int], repeat: int) -> None:
    """The sessions refresher's round for `counts` sessions touched (random ones of the store): what
    a round costs when that many sessions had a new turn or score since the last."""
    rng = random.Random(2)
    with DuckDBStore(db) as store:
        keys = store.query("SELECT session_id, service_name FROM sessions", 10**7, 600).rows
        for count in counts:
            times = []
            for _ in range(repeat):
                store._touched.add(rng.sample(keys, count))  # as the writes would have noted them
                begun = time.perf_counter()
                computed = store.refresh_sessions()
                times.append(time.perf_counter() - begun)
                assert computed == count, (computed, count)
            print(
                f"refresh of {count:,} sessions: {statistics.median(times) * 1000:.0f} ms p50 of {repeat} "
                f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f})",
                flush=True,
            )


def time_earlier_turns(db: Path, counts: list[int], repeat: int) -> None:
    """The judge stage's read of the conversation before the traces it judges (`Store.earlier_turns`,
    3 turns), for batches of `counts` random traces of the store."""
    rng = random.Random(3)
    with DuckDBStore(db) as store:
        ids = [
            r[0] for r in store.query("SELECT trace_id FROM traces USING SAMPLE 2000 ROWS", 5000, 600).rows
        ]
        for count in counts:
            times = []
            for _ in range(repeat):
                batch = rng.sample(ids, count)
                begun = time.perf_counter()
                store.earlier_turns(batch, 3)
                times.append(time.perf_counter() - begun)
            print(
                f"earlier turns of {count} traces: {statistics.median(times) * 1000:.0f} ms p50 of {repeat} "
                f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f})",
                flush=True,
            )


REQUESTS = [
    ("sessions, 24 h, worst first", "/api/sessions", {"since": "24h"}),
    ("sessions, 7 d, worst first", "/api/sessions", {"since": "7d"}),
    (
        "sessions, 7 d, latest activity, page 10",
        "/api/sessions",
        {"since": "7d", "sort": "last_activity", "offset": "450"},
    ),
    (
        "sessions, 7 d, one service, ended",
        "/api/sessions",
        {"since": "7d", "service": "shop-bot", "status": "ended"},
    ),
    ("sessions, 7 d, one user", "/api/sessions", {"since": "7d", "user": "user-00042"}),
    ("one session with its turns", "/api/sessions/session-00099999", {}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, default=Path("/tmp/ragpulse-sessions-bench.duckdb"))
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument(
        "--refresh", default="", help="comma-separated session counts: time the refresher's round for each"
    )
    parser.add_argument(
        "--earlier-turns",
        default="",
        help="comma-separated batch sizes: time the judge's read of conversations",
    )
    args = parser.parse_args()
    if args.regenerate or not args.db.exists():
        args.db.unlink(missing_ok=True)
        traces = args.sessions * args.turns
        print(f"generating {args.sessions:,} sessions ({traces:,} traces, {traces * len(NAMES):,} scores)")
        generate(args.db, args.sessions, args.turns, args.days)
    if args.refresh:
        time_refresh(args.db, [int(c) for c in args.refresh.split(",")], args.repeat)
    if args.earlier_turns:
        time_earlier_turns(args.db, [int(c) for c in args.earlier_turns.split(",")], args.repeat)
    with serving(args.db) as url, httpx.Client(base_url=url, timeout=120) as client:
        for label, path, params in REQUESTS:
            if path.endswith("session-00099999"):  # the newest session of the default store
                path = f"/api/sessions/session-{args.sessions - 1:08d}"
            client.get(path, params=params).raise_for_status()  # warm-up
            times = []
            for _ in range(args.repeat):
                begun = time.perf_counter()
                response = client.get(path, params=params)
                times.append(time.perf_counter() - begun)
                response.raise_for_status()
            body = response.json()
            shown = f"total {body['total']:,}" if "total" in body else f"{len(body['turns'])} turns"
            print(
                f"{label}: {statistics.median(times) * 1000:.0f} ms p50 of {args.repeat} "
                f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}; {shown})"
            )


if __name__ == "__main__":
    main()
