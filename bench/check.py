#!/usr/bin/env python3
"""`ragpulse check` on a large store: how long gates and regression detection take over 10 million
score rows.

The store is generated here (and kept for re-runs with `--db`): `--rows` score rows spread evenly
over `--days` days up to now, over 13 score names and 3 services, written through the store's own
path (so `score_aggregates` is maintained as `serve` maintains it). Then, on the file:

- gates over 24 h (`--min`, `--min-pass-rate`, `--max-error-rate`): read `score_aggregates`;
- `--regression` over 1 h and over 24 h, against the day before: ranks the raw `scores` rows.

Each is timed in-process (the queries and statistics: what `check` adds) and as the command a user
runs (`ragpulse check --db F`, process start-up included), median of `--repeat` runs.

    .venv/bin/python bench/check.py                      # 10,000,000 rows over 7 days
    .venv/bin/python bench/check.py --db /tmp/check-bench.duckdb --rows 10000000
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collector.monitoring.gates import Gate, check_gates  # noqa: E402
from collector.monitoring.regression import Baseline, RegressionSettings, compare  # noqa: E402
from collector.schema.windows import Window, utc_now  # noqa: E402
from collector.store.duckdb_store import DuckDBStore  # noqa: E402
from tests.support.helpers import DEFAULT_SCORE_NAMES, seed_scores  # noqa: E402

NAMES = sorted(DEFAULT_SCORE_NAMES)  # the 13 scores of the default evaluators
SERVICES = ["shop-bot", "support-bot", "search-bot"]
CHUNK = 500_000
GATES = ["--min", "faithfulness=0.8", "--min-pass-rate", "retrieval.recall@5=0.7", "--max-error-rate", "0.05"]


def generate(db: Path, rows: int, days: float) -> None:
    """`rows` scores at random times over the last `days` days; values as scores come (many 1s and
    0s, the rest spread), 2 % errors."""
    rng = random.Random(1)
    now = utc_now()
    span = days * 86400
    started = time.perf_counter()
    with DuckDBStore(db) as store:
        for offset in range(0, rows, CHUNK):
            n = min(CHUNK, rows - offset)
            buckets = [now - timedelta(seconds=rng.random() * span) for _ in range(n)]
            buckets = [b.replace(second=0, microsecond=0) for b in buckets]
            values: list[float | None] = [
                None if rng.random() < 0.02 else rng.choice([1.0, 1.0, 0.0, rng.random()]) for _ in range(n)
            ]
            seed_scores(
                store,
                buckets,
                [NAMES[i % len(NAMES)] for i in range(offset, offset + n)],
                values,
                [SERVICES[i % len(SERVICES)] for i in range(offset, offset + n)],
                trace_ids=[f"{i // len(NAMES):032x}" for i in range(offset, offset + n)],
            )
            print(f"  {offset + n:,} rows written ({time.perf_counter() - started:.0f} s)", flush=True)
        store.checkpoint()


def timed(action: Any, repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, default=Path("/tmp/ragpulse-check-bench.duckdb"))
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--regenerate", action="store_true", help="write the store again even if it exists")
    args = parser.parse_args()

    if args.regenerate or not args.db.exists():
        args.db.unlink(missing_ok=True)
        print(f"generating {args.rows:,} score rows over {args.days} days in {args.db}")
        generate(args.db, args.rows, args.days)
    with DuckDBStore(args.db, read_only=True) as store:
        (count,) = store.query("SELECT count(*) FROM scores", 1, 60).rows[0]
        (aggregates,) = store.query("SELECT count(*) FROM score_aggregates", 1, 60).rows[0]
        size = args.db.stat().st_size / 2**20
        print(f"store: {count:,} score rows, {aggregates:,} score_aggregates rows, {size:.0f} MiB")

        def query(sql: str) -> list[dict[str, Any]]:
            return store.query(sql, 100_000, 300).records()

        end = utc_now()
        gates = [Gate.parse("min", "faithfulness=0.8"), Gate.parse("min_pass_rate", "retrieval.recall@5=0.7")]
        gates.append(Gate.parse("max_error_rate", "0.05"))
        day, hour = Window.ending(end, 86400), Window.ending(end, 3600)
        settings = RegressionSettings()
        day_before = Baseline(shift=86400)
        figures = {
            "gates over 24 h (3 gates), in-process": timed(
                lambda: check_gates(query, gates, day, None, 20), args.repeat
            )[0],
            "regression over 1 h vs the day before, in-process": timed(
                lambda: compare(query, hour, day_before, None, settings), args.repeat
            )[0],
            "regression over 24 h vs the day before, in-process": timed(
                lambda: compare(query, day, day_before, None, settings), args.repeat
            )[0],
        }
    command = [str(ROOT / ".venv/bin/ragpulse"), "check", "--db", str(args.db), "--json"]
    for label, extra in (
        ("`ragpulse check --since 24h` (3 gates), command", ["--since", "24h", *GATES]),
        (
            "`ragpulse check --since 24h --regression` (3 gates), command",
            ["--since", "24h", "--regression", *GATES],
        ),
    ):
        run = [*command, *extra]
        figures[label] = timed(lambda run=run: subprocess.run(run, capture_output=True), args.repeat)[0]
    for label, seconds in figures.items():
        print(f"{label}: {seconds * 1000:.0f} ms (median of {args.repeat})")


if __name__ == "__main__":
    main()
