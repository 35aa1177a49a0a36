#!/usr/bin/env python3
"""Probe benchmark: how long a probe run of many golden questions takes against a slow app, beside
the bound its concurrency sets.

Starts an in-process `ragpulse serve` (a fresh DuckDB file, the default mapping worker) and the
probe test app (tests/support/probe_app.py: an HTTP app instrumented with the OpenTelemetry SDK, which
continues the probe's trace), made to answer each question after `--latency` seconds. Writes
`--cases` golden cases to a file, declares one probe over them with `--concurrency`, runs it once and
reads its `probe_runs` row:

- the sending phase: from the first request to the last answer (the results' start and latency);
  the bound is ceil(cases / concurrency) x latency;
- the whole run: from its start until every trace was assembled and scored (`finished_at`), which
  adds `assembler.decision_wait` (given, default 1 s) and the assembly rounds;
- traces received, and the traces with a `retrieval.recall@5` score (their case's references).

    .venv/bin/python bench/probes.py                           # 200 cases, 0.3 s, 4 at once
    .venv/bin/python bench/probes.py --concurrency 16
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collector.config import Config  # noqa: E402
from collector.service import BackgroundService  # noqa: E402
from tests.support.helpers import free_port, sql, wait_for  # noqa: E402
from tests.support.probe_app import KNOWLEDGE_BASE, ProbeApp  # noqa: E402

TOPICS = [(d.id, d.keywords[0]) for d in KNOWLEDGE_BASE]


class SlowApp(ProbeApp):
    """The probe test app, answering each question after `latency` seconds (a model's time); it
    notes when the first question came and when the last answer went."""

    def __init__(self, otlp_endpoint: str, latency: float) -> None:
        super().__init__(otlp_endpoint)
        self.latency = latency
        self.first: float | None = None
        self.last: float | None = None

    def answer(self, question: str, headers: Any) -> str:
        now = time.monotonic()
        self.first = now if self.first is None else min(self.first, now)
        time.sleep(self.latency)
        answer = super().answer(question, headers)
        self.last = time.monotonic()
        return answer


def cases_file(path: Path, n: int) -> Path:
    cases = []
    for i in range(n):
        doc, keyword = TOPICS[i % len(TOPICS)]
        question = f"Question {i} about {keyword}?"
        cases.append({"id": f"case-{i:04d}", "question": question, "expected_documents": [doc]})
    path.write_text(yaml.safe_dump({"cases": cases}))
    return path


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        grpc_port = free_port()
        with SlowApp(f"127.0.0.1:{grpc_port}", args.latency) as app:
            probe = {
                "name": "bench",
                "cases": str(cases_file(work / "cases.yaml", args.cases)),
                "every": 86400,  # one run, at start-up
                "request": {"url": app.url, "method": "POST", "json": {"question": "{question}"}},
                "concurrency": args.concurrency,
                "wait": 600,
            }
            config = Config.model_validate(
                {
                    "receivers": {"host": "127.0.0.1", "grpc_port": grpc_port, "http_port": 0},
                    "store": {"path": str(work / "ragpulse.duckdb")},
                    "assembler": {"decision_wait": args.decision_wait, "poll_interval": 0.1},
                    "probes": [probe],
                }
            )
            with BackgroundService(config) as svc:
                (row,) = wait_for(
                    lambda: sql(svc, "SELECT * FROM probe_runs WHERE finished_at IS NOT NULL"),
                    bool,
                    timeout=900,
                    what="the probe run",
                )
                scored = sql(
                    svc,
                    "SELECT count(DISTINCT s.trace_id) AS n FROM scores s JOIN traces t USING (trace_id) "
                    f"WHERE t.probe_run = '{row['run_id']}' AND s.name = 'retrieval.recall@5' "
                    "AND s.status = 'pass'",
                )[0]["n"]
            assert app.first is not None and app.last is not None
            sending = app.last - app.first
    results = row["results"] if isinstance(row["results"], list) else orjson.loads(row["results"])
    latencies = sorted(r["latency_ms"] for r in results if r["latency_ms"] is not None)
    started, finished = (datetime.fromisoformat(str(row[k])) for k in ("started_at", "finished_at"))
    return {
        "cases": args.cases,
        "concurrency": args.concurrency,
        "app_latency_s": args.latency,
        "bound_s": math.ceil(args.cases / args.concurrency) * args.latency,
        "sending_s": round(sending, 2),
        "run_s": round((finished - started).total_seconds(), 2),
        "status": row["status"],
        "answered": row["answered"],
        "traces_received": row["traces_received"],
        "recall_at_5_pass": scored,
        "request_p50_ms": round(latencies[len(latencies) // 2], 1) if latencies else None,
        "request_max_ms": round(latencies[-1], 1) if latencies else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument("--decision-wait", type=float, default=1.0)
    print(orjson.dumps(run(parser.parse_args()), option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
