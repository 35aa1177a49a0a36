#!/usr/bin/env python3
"""People in the loop, timed through a running `ragpulse serve` on the store of bench/api.py
(`--traces` traces over a day, 13 scores each; generated on first use and kept):

- feedback ingest: `POST /api/feedback` on stored traces (attached at once), one item per request
  (a user's thumbs) and 1,000 items per request (an import), in items per second at the client;
- `GET /api/agreement` over `--labels` verdicts in `annotations` (written in bulk before the server
  starts, on four evaluator groups), median of `--repeat` calls after one warm-up.

    .venv/bin/python bench/feedback.py
    .venv/bin/python bench/feedback.py --db /tmp/api-100k.duckdb --traces 100000
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from api import generate, serving  # noqa: E402

from collector.schema.tables import ANNOTATIONS  # noqa: E402
from collector.schema.windows import utc_now  # noqa: E402
from collector.store.duckdb_store import DuckDBStore  # noqa: E402

GROUPS = [("faithfulness", "gpt-4o-mini", "v3"), ("faithfulness", "gpt-4o", "v3"),
          ("context_relevance", "gpt-4o-mini", "v2"), ("answer_relevance", "gpt-4o-mini", "v1")]  # fmt: skip


def add_labels(db: Path, labels: int) -> None:
    """`labels` verdicts in `annotations`, given over the last day, on four evaluator groups; the
    people agree with the score 85 % of the time."""
    rng = random.Random(2)
    now = utc_now()
    with DuckDBStore(db) as store, store._cursor() as con:
        con.execute("DELETE FROM annotations")
        rows = []
        for i in range(labels):
            name, model, prompt = GROUPS[i % len(GROUPS)]
            judged = "pass" if rng.random() < 0.7 else "fail"
            human = judged if rng.random() < 0.85 else ("fail" if judged == "pass" else "pass")
            value = rng.random()
            rows.append(
                {
                    "annotation_id": uuid.uuid4().hex,
                    "trace_id": f"{i:032x}",
                    "name": name,
                    "author": f"reviewer-{i % 7}",
                    "human_status": human,
                    "human_value": min(1.0, max(0.0, value + rng.uniform(-0.2, 0.2))),
                    "queue": "random" if i % 5 else None,
                    "created_at": now - timedelta(seconds=rng.uniform(0, 86400)),
                    "service_name": "shop-bot",
                    "score_status": judged,
                    "score_value": value,
                    "score_evaluator": "judge",
                    "judge_model": model,
                    "prompt_version": prompt,
                }
            )
        columns = {name: [row.get(name) for row in rows] for name in ANNOTATIONS.column_names}
        con.register("_labels", ANNOTATIONS.arrow_table(columns, labels))
        con.execute("INSERT INTO annotations BY NAME SELECT * FROM _labels")


def feedback_rate(url: str, traces: int, items: int, per_request: int) -> tuple[float, list[float]]:
    """Items per second posted `per_request` at a time, on random stored traces, and each request's
    seconds."""
    rng = random.Random(per_request)
    seconds = []
    with httpx.Client(base_url=url, timeout=120) as client:
        started = time.perf_counter()
        for start in range(0, items, per_request):
            sent = time.perf_counter()
            count = min(per_request, items - start)
            body = [
                {
                    "trace_id": f"{rng.randrange(traces):032x}",
                    "name": "thumbs",
                    "label": rng.choice(("up", "down")),
                }
                for _ in range(count)
            ]
            answer = client.post("/api/feedback", json=body)
            assert answer.status_code == 200 and answer.json()["waiting"] == 0, answer.text
            seconds.append(time.perf_counter() - sent)
        return items / (time.perf_counter() - started), seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", type=Path, default=Path("/tmp/api-1m.duckdb"))
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--labels", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    if not args.db.exists():
        print(f"generating {args.traces:,} traces in {args.db}")
        generate(args.db, args.traces, days=1)
    add_labels(args.db, args.labels)
    with serving(args.db) as url:
        single, seconds = feedback_rate(url, args.traces, 1_000, 1)
        per_hundred = ", ".join(
            f"{statistics.mean(seconds[i : i + 100]) * 1000:.0f}" for i in range(0, 1_000, 100)
        )
        print(
            f"feedback, one item per request: {single:,.0f} items/s "
            f"(1,000 requests; ms a request, by 100: {per_hundred})"
        )
        batched, _ = feedback_rate(url, args.traces, 20_000, 1_000)
        print(f"feedback, 1,000 items per request: {batched:,.0f} items/s (20 requests)")
        times = []
        with httpx.Client(base_url=url, timeout=120) as client:
            for attempt in range(args.repeat + 1):
                started = time.perf_counter()
                answer = client.get("/api/agreement", params={"since": "2d"})
                assert answer.status_code == 200, answer.text
                if attempt:
                    times.append(time.perf_counter() - started)
        groups = answer.json()["evaluators"]
        print(
            f"/api/agreement over {args.labels:,} verdicts ({len(groups)} groups, "
            f"n {groups[0]['n']:,} in the first): {statistics.median(times) * 1000:.0f} ms "
            f"median of {len(times)} (min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f})"
        )


if __name__ == "__main__":
    main()
