#!/usr/bin/env python3
"""`ragpulse align` on `--labels` labelled traces with the test judge, timed end to end.

A service whose judge is the OpenAI-protocol stub answering as `learning_judge` (tests/support/
labelling.py: every claim supported unless few-shot examples teach it an invented detail) gets
`--labels` RAG requests through the OpenTelemetry SDK: 40 % right answers, 45 % with an invented
restocking fee, 15 % with invented free shipping (which no fee example teaches). Reviewers' verdicts
go to `/api/annotations` (pass for the right answers, fail for the others). Then, with the service
still running, `ragpulse align faithfulness --server URL --holdout 0.3 --json` is timed as a user
runs it (a fresh process): the split, the picking of examples, and the held-out traces judged twice.

    .venv/bin/python bench/align.py                 # 500 labels
    .venv/bin/python bench/align.py --labels 200 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collector.config import load_config  # noqa: E402
from collector.service import BackgroundService  # noqa: E402
from tests.support.helpers import run_ragpulse  # noqa: E402
from tests.support.labelling import (  # noqa: E402
    annotate,
    bad_answer,
    document,
    good_answer,
    learning_judge,
    question,
    send,
    write_config,
)
from tests.support.openai_stub import OpenAIStub  # noqa: E402


def labelled_cases(n: int) -> list[tuple[str, str, str, str]]:
    """(question, document, answer, the people's verdict) for `n` traces."""
    found = []
    for i in range(n):
        share = (i % 20) / 20
        if share < 0.40:
            answer, verdict = good_answer(i), "pass"
        elif share < 0.85:
            answer, verdict = bad_answer(i), "fail"
        else:
            answer, verdict = f"{good_answer(i)} Shipping is free for members.", "fail"
        found.append((question(i), document(i), answer, verdict))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--labels", type=int, default=500)
    parser.add_argument("--holdout", type=float, default=0.3)
    parser.add_argument("--repeat", type=int, default=3, help="align runs, on the same labels")
    args = parser.parse_args()
    cases = labelled_cases(args.labels)
    with tempfile.TemporaryDirectory() as tmp, OpenAIStub(responder=learning_judge) as stub:
        config = write_config(
            Path(tmp) / "conf" / "ragpulse.yaml", Path(tmp) / "data" / "rp.duckdb", stub.base_url
        )
        with BackgroundService(load_config(config)) as svc:
            started = time.perf_counter()
            ids = []
            for start in range(0, len(cases), 100):  # the SDK in batches, as an app would over time
                ids += send(svc, [(q, d, a) for q, d, a, _ in cases[start : start + 100]])
            for trace_id, (*_, verdict) in zip(ids, cases, strict=True):
                annotate(
                    svc, trace_id, verdict, comment="the detail is invented" if verdict == "fail" else None
                )
            print(f"{len(ids)} traces sent, judged and labelled in {time.perf_counter() - started:.1f} s")
            seconds, reports = [], []
            for _ in range(args.repeat):
                asked = len(stub.requests)
                began = time.perf_counter()
                done = run_ragpulse(
                    "align", "faithfulness", "--config", str(config), "--server", svc.http_url,
                    "--holdout", str(args.holdout), "--json", cwd=config.parent.parent, timeout=1800,
                )  # fmt: skip
                seconds.append(time.perf_counter() - began)
                if done.returncode != 0:
                    raise SystemExit(f"align failed: {done.stderr}")
                report = json.loads(done.stdout)
                report["stub_requests"] = len(stub.requests) - asked
                reports.append(report)
    report = reports[-1]
    before, after = report["before"], report["after"]
    print(
        f"align on {report['labels']} labels ({report['train']} train, {report['held_out']} held out, "
        f"{len(report['examples'])} examples): median {statistics.median(seconds):.2f} s "
        f"(min {min(seconds):.2f}, max {max(seconds):.2f}, {len(seconds)} runs); "
        f"judge calls {before['judge_calls']} + {after['judge_calls']} "
        f"(+1 check; the stub saw {report['stub_requests']})"
    )
    for when, figures in (("before", before), ("after", after)):
        print(
            f"  {when}: {figures['prompt_version']}: n {figures['n']}, agreement {figures['agreement']:.3f}, "
            f"kappa {figures['kappa']:.3f} [{figures['kappa_low']:.3f}, {figures['kappa_high']:.3f}]"
        )


if __name__ == "__main__":
    main()
