#!/usr/bin/env python3
"""Calibration wall time against a judge that takes its time, one run at a time vs at once.

`ragpulse calibrate` and `ragpulse eval` wait on the judge for every verdict, so they run cases on
`judge.max_concurrency` threads (evaluators.parallel). This runs the shipped calibration set
(examples/calibration/cases.yaml, every judge evaluator and mode, as `ragpulse calibrate` does)
through the real judge client against a local OpenAI-protocol server (tests/support/openai_stub.py) that
answers a valid verdict after `--latency` seconds, as a model would, first with one worker, then
with `--workers`. It prints the judge calls, the wall time and the calls per second of each.

    .venv/bin/python bench/judge_concurrency.py                  # latency 0.5 s, 16 workers
    .venv/bin/python bench/judge_concurrency.py --latency 1.0 --workers 32
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluators.calibration import load_calibration, run_calibration  # noqa: E402
from evaluators.judge import JudgeClient, JudgeSettings  # noqa: E402
from evaluators.registry import build_evaluator  # noqa: E402
from tests.support.openai_stub import OpenAIStub, RecordedRequest, passing_verdict  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=float, default=0.5, help="seconds the judge takes per verdict")
    parser.add_argument("--workers", type=int, default=16, help="judge.max_concurrency of the second run")
    args = parser.parse_args()
    calibration = load_calibration(ROOT / "examples/calibration/cases.yaml")

    def respond(request: RecordedRequest) -> str:
        time.sleep(args.latency)
        messages = request.json["messages"]
        return json.dumps(passing_verdict(messages[0]["content"], messages[-1]["content"]))

    print(f"{len(calibration.cases)} cases, judge latency {args.latency:g} s")
    print(f"{'workers':>7} {'judge calls':>11} {'wall s':>8} {'calls/s':>8}")
    with OpenAIStub(responder=respond) as stub:
        for workers in (1, args.workers):
            settings = JudgeSettings(
                model="bench", base_url=stub.base_url, api_key="x", cache_size=0, max_concurrency=workers
            )  # type: ignore[arg-type]
            client = JudgeClient(settings)
            stub.requests.clear()
            started = time.perf_counter()
            run_calibration(calibration, functools.partial(build_evaluator, judge=client), workers=workers)
            wall = time.perf_counter() - started
            calls = len(stub.requests)
            print(f"{workers:>7} {calls:>11} {wall:>8.1f} {calls / wall:>8.1f}")
            client.close()


if __name__ == "__main__":
    main()
