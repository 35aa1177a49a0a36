#!/usr/bin/env python3
"""Online judge benchmark: judge-scored traces per second and the time from trace completion to
judge scores stored, with a judge that takes its time.

Starts `ragpulse serve` (a subprocess, on a fresh DuckDB file) with one judge evaluator
(`faithfulness`) at `sampling.judge_rate: 1.0`, against a local OpenAI-protocol server that
answers every verdict after `--latency` seconds (tests/support/openai_stub.py, as a model would), and
sends `--traces` traces of bench/load_generator.py. Then it reads from the store:

- judge-scored traces per second: traces / (last judge result stored - first stored);
- completion to scores stored: p50 / p95 of `scored_at - last_received_at` over the judged
  traces (this includes `assembler.decision_wait`, given on the command line);
- the judge calls the server answered, and how many it had in flight at most.

The ceiling is `judge.max_concurrency / latency` calls per second (16 / 0.3 s = 53 a second).

    .venv/bin/python bench/judge_online.py                          # 2,000 traces, 0.3 s, 16 at once
    .venv/bin/python bench/judge_online.py --latency 1.0 --concurrency 32
    .venv/bin/python bench/judge_online.py --rate 40                # paced below the ceiling
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from load_generator import build, send_all

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.helpers import free_port, metric, sql, wait_for  # noqa: E402
from tests.support.openai_stub import ChatReply, OpenAIStub, RecordedRequest, passing_verdict  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=int, default=2_000)
    parser.add_argument("--latency", type=float, default=0.3, help="seconds the judge takes per verdict")
    parser.add_argument("--concurrency", type=int, default=16, help="judge.max_concurrency")
    parser.add_argument("--decision-wait", type=float, default=1.0)
    parser.add_argument(
        "--rate", type=float, default=0, help="offer this many traces/s (10 per Export) instead of a burst"
    )
    args = parser.parse_args()

    def answer(request: RecordedRequest) -> ChatReply:
        messages = request.json["messages"]
        verdict = passing_verdict(messages[0]["content"], messages[-1]["content"])
        return ChatReply(
            content=json.dumps(verdict), delay=args.latency, prompt_tokens=400, completion_tokens=60
        )

    with OpenAIStub(responder=answer) as judge, tempfile.TemporaryDirectory(prefix="ragpulse-judge-") as tmp:
        config = Path(tmp) / "ragpulse.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "judge": {
                        "base_url": judge.base_url,
                        "model": "bench-judge",
                        "api_key": "bench",
                        "max_concurrency": args.concurrency,
                        "cache_size": 0,
                    },
                    "sampling": {"judge_rate": 1.0, "budget": {"judge_calls_per_minute": None}},
                    "scoring": {"judge_queue": 4 * args.concurrency, "judge_poll_interval": 0.1},
                    "assembler": {"decision_wait": args.decision_wait},
                    "evaluators": [{"name": "retrieval.recall@5"}, {"name": "faithfulness"}],
                }
            )
        )
        grpc_port, http_port = free_port(), free_port()
        url = f"http://127.0.0.1:{http_port}"
        command = [str(ROOT / ".venv/bin/ragpulse"), "serve", "--config", str(config)]
        command += ["--db", str(Path(tmp) / "bench.duckdb"), "--grpc-port", str(grpc_port)]
        command += ["--http-port", str(http_port)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
        with (Path(tmp) / "serve.log").open("wb") as log:
            server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, env=env)
        try:
            wait_for(lambda: _healthy(url), timeout=30, interval=0.2, what="the server to start")
            per_export = 10 if args.rate else 100
            requests = [build(per_export, i) for i in range(max(1, args.traces // per_export))]
            traces = len(requests) * per_export
            if args.rate:
                send_paced(f"127.0.0.1:{grpc_port}", requests, per_export / args.rate)
            else:
                send_all(f"127.0.0.1:{grpc_port}", requests, 4)
            wait_for(
                lambda: _judged(url) >= traces, timeout=600, interval=0.2, what=f"{traces} judged traces"
            )
            stats = sql(
                url,
                "SELECT count(*) AS n, epoch(max(scored_at) - min(scored_at)) AS span_s, "
                "quantile_cont(epoch(scored_at - last_received_at), 0.5) AS p50, "
                "quantile_cont(epoch(scored_at - last_received_at), 0.95) AS p95 "
                "FROM traces WHERE judge_status = 'done'",
            )[0]
            errors = sql(
                url, "SELECT count(*) AS n FROM scores WHERE evaluator = 'judge' AND status = 'error'"
            )
            # One judge evaluation (its call, retries and waits), as the service timed it.
            evaluation_s = metric(url, "ragpulse_judge_seconds_sum") / metric(
                url, "ragpulse_judge_seconds_count"
            )
        finally:
            server.terminate()
            server.wait(60)
        calls = len([r for r in judge.chat_requests if "health check" not in json.dumps(r.json)])
        offered = f"offered {args.rate:.0f} traces/s; " if args.rate else "burst; "
        print(
            f"{offered}{stats['n']} traces judged ({calls} judge calls, "
            f"at most {judge.max_in_flight} in flight, "
            f"{errors[0]['n']} error scores): {stats['n'] / stats['span_s']:.1f} judge-scored traces/s; "
            f"completion to judge scores stored p50 {stats['p50']:.2f} s, p95 {stats['p95']:.2f} s "
            f"(latency {args.latency} s, max_concurrency {args.concurrency}, "
            f"decision_wait {args.decision_wait} s; ceiling {args.concurrency / args.latency:.1f}/s); "
            f"one judge evaluation took {evaluation_s * 1000:.0f} ms on average as the service timed it, "
            f"so {args.concurrency / evaluation_s:.1f}/s at most with {args.concurrency} at once"
        )


def send_paced(target: str, requests: list[Any], interval: float) -> None:
    """Export one request every `interval` seconds (each waits for the previous answer)."""
    started = time.monotonic()
    for i, request in enumerate(requests):
        time.sleep(max(0.0, started + i * interval - time.monotonic()))
        send_all(target, [request], 1)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _judged(url: str) -> int:
    return int(sql(url, "SELECT count(*) AS n FROM traces WHERE judge_status = 'done'")[0]["n"])


if __name__ == "__main__":
    main()
