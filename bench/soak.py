#!/usr/bin/env python3
"""Soak: one hour of a real `ragpulse serve` under steady load and faults, then a check that
nothing was lost.

    .venv/bin/python bench/soak.py                       # the full hour (as root: it mounts a tmpfs)
    .venv/bin/python bench/soak.py --minutes 6           # the same schedule squeezed into 6 minutes
    .venv/bin/python bench/soak.py --minutes 6 --faults disk --out /tmp/soak-disk   # one fault only
    .venv/bin/python bench/soak.py --faults "" --memory-probe --out /tmp/soak-mem   # no fault; the
                          # service's memory by allocator every minute (bench/serve_memory.py)

The service runs from .venv/bin/ragpulse as a subprocess, with a config file written to a temporary
directory, its store on a tmpfs the script mounts (and unmounts at the end, also on error or Ctrl-C).

**Load.** 2,000 spans/s (`--rate`) over OTLP/gRPC: 5 Exports/s of 100 traces of the shared load
generator's RAG traces (bench/load_generator.py: a `rag-query` root, a `retrieve` span with 4
documents, `embed` and `llm` spans; about 770 bytes a span), serialized once and patched per batch
(ids from the batch number, timestamps of the moment it is sent; bench/soak_load.py). Four sender
threads retry what the OpenTelemetry SDK's exporter retries (UNAVAILABLE etc.) for as long as the run
lasts; a span counts as **acked** only when its Export returned OK with no rejected spans. The
root's `rag.expected.documents` names a retrieved document or not, flipping every few wall-clock
minutes (`retrieval.hit@5` goes 1 / 0), so the alert `hit-flip` fires and resolves.

**Faults**, each in its own thread, on a schedule written in minutes of the hour and scaled by
`--minutes / 60` (minute m of the hour happens `m * --minutes` seconds into the run):

| what | when (minutes of the hour) |
|---|---|
| the judge is down (connection refused, then 503, alternating) | 3-5, 13-15, 23-25, 33-35, 43-45, 53-55 |
| the webhook is down (503, then connection refused, alternating) | 5-10, 15-20, ..., 55-60 |
| the store's filesystem is full (a ballast file, topped up every 0.5 s) | 26-30 |
| SIGKILL of the service, restarted at once on the same store | 40 |

`--faults judge,webhook,disk,kill` (the default) picks which of them run.

**Service config.** Evaluators `retrieval.hit@5`, `.recall@5`, `.mrr@5`, `.ndcg@5` (deterministic, every
trace) and `faithfulness` (judged, `sampling.judge_rate` 0.01: about 5 judge calls/s); the judge is a
loopback OpenAI-protocol server (bench/soak_faults.py `FlakyJudge`, verdicts from
tests/support/openai_stub.py's `passing_verdict`, one faithfulness verdict in five a fail), with its verdict
cache off and no judge budget limit. Two alerts notify one `format: json` webhook:
`hit-flip` (`retrieval.hit@5` mean below 0.5) and `judge-errors` (`faithfulness` error rate above
0.05), both with `window: 60` (the shortest: the previous whole minute and the current one),
evaluated every 5 s; failed notifications are retried from 1 s doubling to 30 s (scaled, at least
5 s). The expected document flips every 3 wall-clock minutes (scaled, at least 2: an alert sees a
flip after one whole minute of it).

**Measured**, printed as JSON and as a markdown table, and written to the results directory
(`--out`, default /tmp/ragpulse-soak-<time>: summary.json, report.md, samples.jsonl, the service's
logs, the notifications received, every batch):

- spans: acked vs stored: every acked (trace id, span id) looked up in the `spans` table of the
  DuckDB file, opened read-only after the service stopped; lost = acked and not stored; also the
  acked traces with no row in `traces` (never assembled), and the traces assembled only at a
  restart (`assembly_reason = 'recovery'`) by when their last span arrived;
- judge scores by status per bin (one minute of the hour, at least 10 s) of `scores.created_at`:
  bins that overlap an outage have `error` scores, bins after it (past `--judge-grace` s) none;
- notifications: what the webhook accepted (in arrival order, with event ids) against
  `alert_notifications`: none delivered and not received, none pending at the end, the same order
  as the table (`created_at, event_id`), each alert's firing / resolved alternating (a notification
  received twice is counted, not failed: delivery is at-least-once);
- RSS of the service process (VmRSS every `--sample-every` s: 10 for the hour, scaled down to at
  least 2 for a shorter run): least-squares slope
  in MiB/hour, excluding the first 5 minutes of the hour after each start (the series restarts at
  the SIGKILL restart); the mapping workers' RSS beside it;
- scoring lag per ten minutes of the hour (p50 / p95): deterministic scores `scores.created_at`
  (when the mapping worker scored the trace, just before the write that stores trace and scores
  together) minus `traces.last_received_at` (when the service received the trace's last span; this
  includes `assembler.decision_wait`, 5 s); judge scores `traces.scored_at` (set in the transaction
  that stores them) minus `traces.last_received_at`. `traces.end_time` is not used: it is the
  client's clock and the load's root span ends 0.9 s after it is sent;
- `/healthz`, `/healthz/ready` (status codes; the latter may not exist yet) and `/metrics`
  (`ragpulse_store_writable` when present, export outcomes, commit errors, queues) every sample,
  summed up by phase (normal, disk full, after the free until ready, restarting), with how long
  /healthz/ready and the metric took to turn after the fill and after the free;
- CPU cores of the service, its mapping workers and this script (the load generator and servers).

**Code.** This file runs the hour; its parts are siblings in bench/: soak_schedule.py (the hour's
timetable, the threads that inject the faults on it), soak_load.py (the OTLP load and what was acked),
soak_faults.py (the flaky judge and webhook, the tmpfs that fills), soak_service.py (`ragpulse serve`:
its config, start, SIGKILL and restart, stop, settling), soak_samples.py (the sampler and what its
samples say), soak_store.py (the store read back after the run), soak_report.py (the checks table),
soak_helpers.py (/proc readings, Prometheus text, numbers).

Ctrl-C once: stop the load and report on what was done (shorter waits); twice: clean up and exit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from soak_faults import FlakyJudge, Tmpfs, WebhookReceiver, intervals
from soak_helpers import free_port, remove_tree, rnd
from soak_load import TRACES_PER_BATCH, BatchTemplate, LoadSender
from soak_report import markdown
from soak_samples import Sampler, cpu_summary, export_outcomes, health_summary, rss_slopes
from soak_schedule import Injector, Schedule
from soak_service import RAGPULSE, Service, settle, tail, write_config
from soak_store import analyse


class Interrupted(Exception):
    """SIGINT or SIGTERM: the load stops and the run reports on what was done (again: abort)."""

    pass


def main() -> None:
    """Run the soak: parse the arguments, start the service, the load and the faults, then report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--minutes", type=float, default=60, help="run length; the hour's schedule is scaled to it"
    )
    parser.add_argument("--rate", type=float, default=2000, help="spans/s offered")
    parser.add_argument("--senders", type=int, default=4, help="concurrent Export senders")
    parser.add_argument("--judge-rate", type=float, default=0.01, help="sampling.judge_rate")
    parser.add_argument(
        "--judge-grace", type=float, default=15, help="seconds after an outage before errors count"
    )
    parser.add_argument(
        "--sample-every",
        type=float,
        default=None,
        help="seconds between samples (default: 10 for the hour, scaled down to at least 2)",
    )
    parser.add_argument(
        "--tmpfs-mb",
        type=int,
        default=None,
        help="size of the store's tmpfs (default: 1,024 MiB + 128 MiB per minute at 2,000 spans/s)",
    )
    parser.add_argument(
        "--drain-timeout", type=float, default=300, help="seconds to send the backlog after the load"
    )
    parser.add_argument(
        "--settle-timeout", type=float, default=300, help="seconds to wait for the service to catch up"
    )
    parser.add_argument("--out", type=Path, default=None, help="results directory (kept)")
    parser.add_argument(
        "--memory-limit", default=None, help="store.memory_limit of the service (default: the default)"
    )
    parser.add_argument(
        "--memory-probe",
        action="store_true",
        help="start the service through bench/serve_memory.py: where its memory is, every minute",
    )
    parser.add_argument(
        "--keep-db", action="store_true", help="copy the DuckDB file to the results directory"
    )
    parser.add_argument(
        "--faults",
        default="judge,webhook,disk,kill",
        help="the faults to inject, comma-separated (default: judge,webhook,disk,kill)",
    )
    args = parser.parse_args()
    faults = {f.strip() for f in args.faults.split(",") if f.strip()}
    if faults - {"judge", "webhook", "disk", "kill"}:
        parser.error(f"unknown faults: {sorted(faults - {'judge', 'webhook', 'disk', 'kill'})}")
    if os.geteuid() != 0:
        raise SystemExit("the soak mounts a tmpfs: run it as root")
    if not RAGPULSE.exists():
        raise SystemExit(f"{RAGPULSE} not found: make install")

    schedule = Schedule(args.minutes)
    every = args.sample_every or max(2.0, min(10.0, 10 * schedule.scale))
    # About twice what the store grows to: its shutdown checkpoint merges row groups and needs room
    # beside them (with 64 MiB a minute, the hour's last checkpoint found the disk full: bench/README.md).
    size_mb = args.tmpfs_mb or int(1024 + 128 * args.minutes * args.rate / 2000)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    results = args.out or Path(tempfile.gettempdir()) / f"ragpulse-soak-{stamp}"
    results.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ragpulse-soak-work-"))
    tmpfs = Tmpfs(work / "store", size_mb)
    db = tmpfs.path / "soak.duckdb"
    judge, webhook = FlakyJudge(free_port()), WebhookReceiver(free_port())
    grpc_port, http_port = free_port(), free_port()
    service = Service(work / "ragpulse.yaml", f"http://127.0.0.1:{http_port}", results)
    if args.memory_probe:
        service.command = [sys.executable, str(Path(__file__).with_name("serve_memory.py"))]
    template = BatchTemplate(TRACES_PER_BATCH, os.urandom(8))
    flip = schedule.flip_minutes
    sender = LoadSender(
        f"127.0.0.1:{grpc_port}",
        template,
        args.rate,
        args.senders,
        bad_at=lambda t: (int(t // 60) // flip) % 2 == 1,
    )
    injectors: list[Injector] = []
    sampler: Sampler | None = None
    summary: dict[str, Any] = {
        "run": {
            "started": stamp,
            "results": str(results),
            "tmpfs_mb": size_mb,
            "rate": args.rate,
            "sample_every_s": every,
            "judge_rate": args.judge_rate,
            "faults": sorted(faults),
            "schedule": schedule.describe(),
        }
    }
    interrupts = 0

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal interrupts
        interrupts += 1
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    t0 = time.time()
    script_cpu_at_t0 = sum(os.times()[:2])
    try:
        try:
            tmpfs.mount()
            judge.set_mode("up")
            webhook.set_mode("up")
            config = write_config(
                service.config,
                db,
                grpc_port,
                http_port,
                judge,
                webhook,
                schedule,
                args.judge_rate,
                args.memory_limit,
            )
            (results / "ragpulse.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
            if not service.start("initial"):
                raise SystemExit(
                    "ragpulse serve did not start:\n" + tail(results / service.starts[-1].log, 30)
                )
            print(
                f"soak: {args.minutes:g} min at {args.rate:g} spans/s; service pid {service.pid}; "
                f"results in {results}",
                flush=True,
            )
            t0 = time.time()
            script_cpu_at_t0 = sum(os.times()[:2])
            summary["run"]["t0"] = t0
            sender.start()
            sampler = Sampler(every, t0, service, sender, tmpfs, judge, webhook, results / "samples.jsonl")
            sampler.start()
            injectors = [
                Injector(
                    "judge", t0, schedule.down_and_up("judge", schedule.judge_outages(), judge.set_mode)
                ),
                Injector(
                    "webhook", t0, schedule.down_and_up("webhook", schedule.webhook_downs(), webhook.set_mode)
                ),
                Injector(
                    "disk",
                    t0,
                    [(schedule.fill_at, "fill", tmpfs.fill), (schedule.free_at, "free", tmpfs.unfill)],
                ),
                Injector("kill", t0, [(schedule.kill_at, "SIGKILL + restart", service.kill_and_restart)]),
            ]
            injectors = [i for i in injectors if i.name.removeprefix("soak-") in faults]
            for injector in injectors:
                injector.start()
            next_report = t0 + 60
            while time.time() < t0 + schedule.duration:
                time.sleep(0.5)
                if time.time() >= next_report:
                    next_report += 60
                    snap = sender.snapshot()
                    print(
                        f"  {time.time() - t0:6.0f}s: acked {snap['spans_acked']:,} spans, backlog "
                        f"{snap['backlog_batches']} batches, webhook got {len(webhook.received)}, "
                        f"judge {dict(judge.counts)}",
                        flush=True,
                    )
        except Interrupted as exc:
            summary["run"]["interrupted"] = f"{exc} at {time.time() - t0:.0f} s"
            print(f"soak: interrupted ({exc}): stopping the load and reporting (again to abort)", flush=True)
        load_end = time.time()
        script_cpu = sum(os.times()[:2]) - script_cpu_at_t0
        summary["run"]["load_seconds"] = round(load_end - t0, 1)
        sender.stop_pacing()
        for injector in injectors:
            injector.cancel()
        for injector in injectors:
            injector.join(60)
        judge.set_mode("up")
        webhook.set_mode("up")
        tmpfs.unfill()
        if service.pid is None:
            service.start_until_ready("restart for the final drain", attempts=5)
        short = "interrupted" in summary["run"]
        drained = sender.drain(30 if short else args.drain_timeout)
        summary["drain"] = {"backlog_sent": drained, "seconds": round(time.time() - load_end, 1)}
        summary["settle"] = settle(service, 30 if short else args.settle_timeout)
        if sampler:
            sampler.stopped.set()
            sampler.join(30)
        summary["service"] = {"final_stop": service.terminate()}
        summary["run"]["end_seconds"] = round(time.time() - t0, 1)
        disk_events = tmpfs.events
        fill = next((e["t"] for e in disk_events if e["event"] == "fill"), None)
        free = next((e["t"] for e in disk_events if e["event"] == "free"), None)
        judge_down = intervals(judge.modes, t0, load_end)
        samples = sampler.samples if sampler else []
        summary["analysis"] = analyse(
            db,
            t0,
            schedule,
            sender,
            template,
            judge_down,
            webhook,
            args.judge_grace,
            (service.killed_at - t0) if service.killed_at else None,
            free,
        )
        summary["analysis"]["rss"] = rss_slopes(samples, service, t0, schedule.warmup)
        summary["health"] = health_summary(samples, [fill, free] if fill and free else None, service)
        summary["cpu"] = cpu_summary(samples, service, t0, load_end, script_cpu)
        summary["export_outcomes_from_metrics"] = export_outcomes(samples)
        summary["faults"] = {
            "judge_down_s": judge_down,
            "webhook_down_s": intervals(webhook.modes, t0, load_end),
            "disk": [{**e, "t": round(e["t"] - t0, 2)} for e in disk_events],
            "injectors": {i.name: i.log for i in injectors},
            "judge_requests": dict(judge.counts),
        }
        kill_log = next((i.log for i in injectors if i.name == "soak-kill"), [])
        summary["service"].update(
            kill=(kill_log[0].get("result") if kill_log else None),
            starts=[
                {
                    **s.__dict__,
                    "spawned": round(s.spawned - t0, 2),
                    "ready": rnd(s.ready - t0) if s.ready else None,
                    "exited": rnd(s.exited - t0) if s.exited else None,
                }
                for s in service.starts
            ],
            unexpected_exits=service.unexpected_exits,
            lingering_workers=service.lingering_workers,
        )
        with (results / "batches.csv").open("w") as out:
            out.write("batch,due_s,first_sent_s,acked_s,attempts,bad,dropped,failures\n")
            for r in sender.records:
                out.write(
                    f"{r.batch},{r.due - t0:.3f},"
                    f"{'' if r.first_sent is None else f'{r.first_sent - t0:.3f}'},"
                    f"{'' if r.acked is None else f'{r.acked - t0:.3f}'},{r.attempts},{int(r.bad)},"
                    f"{r.dropped or ''},{' '.join(f'{k}={v}' for k, v in r.failures.items())}\n"
                )
        (results / "notifications.json").write_text(
            json.dumps({"received": webhook.received, "refused": webhook.refusals}, indent=1)
        )
        if args.keep_db:
            subprocess.run(["cp", str(db), str(results / "soak.duckdb")], check=False)
        compact = json.loads(json.dumps(summary, default=str))
        (results / "summary.json").write_text(json.dumps(compact, indent=1))
        for key in ("bins",):
            compact["analysis"]["judge"].pop(key, None)
        compact["analysis"]["notifications"].pop("received", None)
        report = markdown(summary)
        (results / "report.md").write_text(report + "\n")
        print(json.dumps(compact, indent=1))
        print()
        print(report)
        print(f"\nresults: {results}")
    except Interrupted:
        print("soak: aborted; cleaning up", flush=True)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for injector in injectors:
            injector.cancel()
        sender.stop_pacing()
        sender.stopping.set()
        if sampler:
            sampler.stopped.set()
        service.expected_down = True
        service.kill_quietly()
        judge.stop()
        webhook.stop()
        problem = tmpfs.unmount()
        if problem:
            print(f"soak: {problem}", file=sys.stderr)
        remove_tree(work)


if __name__ == "__main__":
    main()
