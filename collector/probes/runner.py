"""Scheduled probes (`probes:`): the golden questions sent to the production app, on a schedule.

Production traffic has no ground truth; a probe gives some of it one. Every `every` seconds (the
first time at start-up), for each case of its cases file (or of the cases loaded into the store):
- (a cases file is loaded into the store first, so the traces are matched to its cases)
- a fresh trace id and span id are drawn, and the question is sent to the app (`request:`) with
  `traceparent: 00-<trace id>-<span id>-01` and `baggage: rag.case.id=<id>,rag.probe=<name>`, at
  most `concurrency` requests at once;
- ragpulse stores its own CLIENT span for the request (`probe <name>`, the trace's root: the
  question, the case id, the probe and its run, the HTTP method, URL and status), submitted
  through the ingest pipeline like any received span. The app's spans continue the trace through
  the traceparent, so the assembled trace holds both, and the case is matched by `rag.case.id`;
- an app that dropped the context starts a trace of its own: that trace is matched to the case by
  its question (`traces.case_match = 'question'`) and found by that, within the run's time.

After the last request the run waits (at most `wait` seconds, looking every second) until each
request's trace is assembled and scored, then records in `probe_runs` what was sent, answered,
received and missed, each case's result and the scores' summary. Only the leader runs probes
(`ProbeRuns.is_leader`: several replicas share one schedule). The judge calls of probe traces go
through the normal judge stage, under the one judge budget.

The pure parts are plain functions: the request, its headers and the client span in `requests.py`,
what came back (matching, results, summary) in `results.py`.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collector.background import BackgroundWorker
from collector.datasets import DatasetError, cases_table, read_cases
from collector.lifecycle import remaining
from collector.pipeline import IngestPipeline, Overloaded, Stopped
from collector.probes.config import ProbeConfig
from collector.probes.requests import (
    ProbeCase,
    ProbeError,
    ProbeResult,
    client_span_request,
    expand_headers,
    fill,
    new_ids,
    request_url,
    trace_headers,
)
from collector.probes.results import (
    assign_question_traces,
    due_probes,
    result_rows,
    settled,
    summarize,
    tally,
)
from collector.schema.tables import PROBE_RUNS
from collector.schema.windows import utc_now
from collector.store.base import ProbeRuns
from collector.store.health import log_failure
from collector.store.reads import probes as reads
from collector.store.sql import QueryError
from collector.telemetry import Metrics

log = logging.getLogger(__name__)

PROTOCOL = "probe"  # the ingest pipeline's protocol label of ragpulse's own client spans
POLL_SECONDS = 1.0  # between two looks at the store for a run's traces
TICK_SECONDS = 1.0  # between two looks at which probes are due
_NOT_LEADER_WAIT = 10.0  # seconds between two looks at whether this replica leads now
_SUBMIT_PATIENCE = 10.0  # seconds a client span waits for room in the ingest queue
_MAX_CASES = 100_000


# --------------------------------------------------------------------------- the runner


class ProbeRunner(BackgroundWorker):
    """Runs the probes that are due, each run on a thread of its own; `run_once(name)` is one run."""

    def __init__(
        self,
        store: ProbeRuns,
        probes: Sequence[ProbeConfig],
        pipeline: IngestPipeline,
        metrics: Metrics,
        sql_timeout: float = 30.0,
        clock: Callable[[], datetime] = utc_now,
        environ: Mapping[str, str] | None = None,
        poll: float = POLL_SECONDS,
        on_cases: Callable[[], object] | None = None,
    ) -> None:
        self._store = store
        self._probes = {p.name: p for p in probes}
        self._pipeline = pipeline
        self._metrics = metrics
        self._sql_timeout = sql_timeout
        self._clock = clock
        self._environ = os.environ if environ is None else environ
        self._poll = poll
        self._on_cases = on_cases
        now = clock()
        self._next = {name: now for name in self._probes}  # the first run at start-up
        self._active: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._leader_again_at = 0.0
        self._client = httpx.Client(follow_redirects=False)
        super().__init__("ragpulse-probes")

    # ------------------------------------------------------------------ schedule

    def _run(self) -> None:
        self._run_every(
            TICK_SECONDS,
            self.run_due,
            log,
            "a probe round failed; retrying at the next",
            absorb=lambda exc: self._store.health.absorb(exc, "probes"),
        )

    def run_due(self) -> list[str]:
        """Start a run of each probe that is due (when this replica leads); returns their names."""
        with self._lock:
            active = set(self._active)
        now = self._clock()
        due = due_probes(self._next, now, active)
        if not due or time.monotonic() < self._leader_again_at:
            return []
        if not self._store.is_leader():  # one replica runs them for all
            self._leader_again_at = time.monotonic() + _NOT_LEADER_WAIT
            self._follow_schedule()
            return []
        started = []
        for name in due:
            if not self._claim(name):
                continue
            self._next[name] = now + timedelta(seconds=self._probes[name].every)
            thread = threading.Thread(target=self._run_claimed, args=(name,), name=f"ragpulse-probe-{name}")
            thread.daemon = True
            with self._lock:
                self._threads = [t for t in self._threads if t.is_alive()]
                self._threads.append(thread)
            thread.start()
            started.append(name)
        return started

    def _follow_schedule(self) -> None:
        """While another replica leads, keep to the schedule its runs set: a replica that takes over
        runs a probe `every` seconds after the last run, wherever it ran."""
        for name, probe in self._probes.items():
            last = self._store.read_probe_runs(name, 1)
            if last.num_rows:
                started = last["started_at"][0].as_py()
                self._next[name] = max(self._next[name], started + timedelta(seconds=probe.every))

    def _claim(self, name: str) -> bool:
        with self._lock:
            if name in self._active:
                return False
            self._active.add(name)
            return True

    def _release(self, name: str) -> None:
        with self._lock:
            self._active.discard(name)

    def _run_claimed(self, name: str) -> None:
        try:
            self._run_probe(name)
        except Exception:
            log_failure(log, self._store, "probes", "probe %s: the run failed", name)
        finally:
            self._release(name)

    def stop(self, deadline: float | None = None) -> None:
        """Stop after the runs in progress (they stop sending, stop waiting and record themselves),
        waiting 15 s at most, and not past `deadline`."""
        deadline = time.monotonic() + remaining(deadline, 15.0)
        super().stop(deadline)
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._client.close()

    # ------------------------------------------------------------------ one run

    def run_once(self, name: str) -> dict[str, Any]:
        """One run of the probe `name`, now, in this thread; returns its `probe_runs` row."""
        if name not in self._probes:
            raise KeyError(f"no probe named {name!r}")
        if not self._claim(name):
            raise RuntimeError(f"probe {name!r} is running already")
        try:
            return self._run_probe(name)
        finally:
            self._release(name)

    def _run_probe(self, name: str) -> dict[str, Any]:
        probe = self._probes[name]
        started = self._clock()
        row: dict[str, Any] = {
            "run_id": secrets.token_hex(8),
            "probe": name,
            "started_at": started,
            "status": "running",
        }
        self._write(row)
        log.info("probe %s: run %s started", name, row["run_id"])
        try:
            self._send_and_wait(probe, row)
        except ProbeError as exc:
            log.error("probe %s: run %s could not run: %s", name, row["run_id"], exc)
            row.update(status="failed", error=str(exc), cases=0, answered=0, errors=0)
        except Exception as exc:  # recorded, never left `running`
            log_failure(log, self._store, "probes", "probe %s: run %s failed", name, row["run_id"])
            row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
        row["finished_at"] = self._clock()
        self._write(row)
        self._metrics.probe_runs.labels(name, row["status"]).inc()
        if row.get("error"):  # said at ERROR above: no counts of a run that did not run
            log.info("probe %s: run %s %s", name, row["run_id"], row["status"])
        else:
            log.info(
                "probe %s: run %s %s: %s of %s answered, %s traces received",
                name,
                row["run_id"],
                row["status"],
                row.get("answered") or 0,
                row.get("cases") or 0,
                row.get("traces_received") or 0,
            )
        return row

    def _send_and_wait(self, probe: ProbeConfig, row: dict[str, Any]) -> None:
        cases = self._cases(probe)
        headers = expand_headers(probe.request.headers, self._environ)
        started: datetime = row["started_at"]
        with ThreadPoolExecutor(probe.concurrency, thread_name_prefix=f"ragpulse-probe-{probe.name}") as pool:
            results = list(pool.map(lambda case: self._send(probe, row["run_id"], case, headers), cases))
        own, by_question, complete = self._await_traces(probe, started, results)
        rows = result_rows(results, own, by_question)
        app_traces = [r["app_trace_id"] for r in rows if r["received"]]
        row.update(tally(rows))
        row["results"] = orjson.dumps(rows).decode()
        row["summary"] = orjson.dumps(summarize(self._scores(app_traces))).decode()
        stopped = any(not r.sent for r in results) or (not complete and self._stopping.is_set())
        row["status"] = "failed" if stopped else "done"
        if stopped:
            row["error"] = "ragpulse stopped during the run"

    def _cases(self, probe: ProbeConfig) -> list[ProbeCase]:
        """The run's cases: its cases file, read now and loaded into the store (replacing cases with
        the same ids, as `ragpulse datasets load` does), or the cases loaded into the store."""
        if probe.cases is not None:
            try:
                loaded = read_cases(Path(probe.cases))
            except DatasetError as exc:
                raise ProbeError(f"cases: {exc}") from None
            cases = [ProbeCase(c.id, c.question) for c in loaded]
            where = f"the cases file {probe.cases}"
            if loaded:  # into the store, so the case matching of the traces knows their references
                self._store.write_cases(cases_table(loaded, probe.cases))
                if self._on_cases is not None:
                    self._on_cases()
        else:
            rows = self._query(reads.cases_sql(_MAX_CASES))
            cases = [ProbeCase(str(r["case_id"]), str(r["question"])) for r in rows if r["question"]]
            where = "the store (no cases loaded: ragpulse datasets load)"
        if not cases:
            raise ProbeError(f"no cases to send: none in {where}")
        return cases

    def _send(
        self, probe: ProbeConfig, run_id: str, case: ProbeCase, headers: Mapping[str, str]
    ) -> ProbeResult:
        """One request, and ragpulse's client span of it submitted to the ingest pipeline."""
        config = probe.request
        trace_id, span_id = new_ids()
        url = request_url(config.url, case.question, case.case_id)
        result = ProbeResult(
            case.case_id, case.question, trace_id, span_id, config.method, url, 0, 0, None, "not_sent"
        )
        if self._stopping.is_set():
            result.error = "not sent: ragpulse was stopping"
            return result
        body = fill(config.json_body, case.question, case.case_id)
        sent_headers = {**headers, **trace_headers(trace_id, span_id, probe.name, case.case_id)}
        result.start_ns, clock = time.time_ns(), time.perf_counter()
        try:
            response = self._client.request(
                config.method, url, json=body, headers=sent_headers, timeout=config.timeout
            )
        except httpx.TimeoutException:
            result.outcome, result.error = "timeout", f"no answer within {config.timeout:g} s"
        except (httpx.ConnectError, httpx.UnsupportedProtocol) as exc:
            result.outcome, result.error = "unreachable", f"cannot connect: {exc}"
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
            result.outcome, result.error = "error", f"{type(exc).__name__}: {exc}"
        else:
            result.http_status = response.status_code
            if response.is_success:
                result.outcome = "answered"
            else:
                result.outcome, result.error = "http_error", f"HTTP {response.status_code}"
        result.latency_ms = (time.perf_counter() - clock) * 1000.0
        result.end_ns = result.start_ns + int(result.latency_ms * 1e6)
        self._metrics.probe_requests.labels(probe.name, result.outcome).inc()
        self._submit(client_span_request(probe.name, probe.service_name, run_id, result))
        return result

    def _submit(self, request: ExportTraceServiceRequest) -> None:
        """Through the pipeline the receivers use (stored, redacted, forwarded, assembled alike); a
        full queue is waited out a while, as an exporter would retry."""
        deadline = time.monotonic() + _SUBMIT_PATIENCE
        while True:
            try:
                self._pipeline.submit(request, PROTOCOL)
                return
            except Overloaded:
                if time.monotonic() > deadline or self._stopping.wait(0.2):
                    log.warning("a probe's client span was dropped: the ingest queue stayed full")
                    return
            except Stopped:
                log.warning("a probe's client span was dropped: ragpulse is stopping")
                return

    # ------------------------------------------------------------------ waiting for the traces

    def _await_traces(
        self, probe: ProbeConfig, started: datetime, results: Sequence[ProbeResult]
    ) -> tuple[dict[str, dict[str, Any]], dict[str, str], bool]:
        """Look at the store every `poll` seconds, at most `probe.wait` seconds, until every request
        is settled. Returns ragpulse's traces (by id), the traces found by question, and whether
        every request settled."""
        deadline = time.monotonic() + probe.wait
        while True:
            own, found = self._look(started, results)
            by_question = assign_question_traces(results, own, found.values())
            if all(
                settled(r, own.get(r.trace_id), found.get(by_question.get(r.trace_id, ""))) for r in results
            ):
                return own, by_question, True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._stopping.wait(min(self._poll, remaining)):
                return own, by_question, False

    def _look(
        self, started: datetime, results: Sequence[ProbeResult]
    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        ids = [r.trace_id for r in results if r.sent]
        own = self._query(reads.sent_traces_sql(ids))
        cases = sorted({r.case_id for r in results if r.sent})
        found = self._query(reads.case_traces_sql(cases, started))
        return {r["trace_id"]: r for r in own}, {r["trace_id"]: r for r in found}

    def _scores(self, trace_ids: Sequence[str]) -> list[dict[str, Any]]:
        if not trace_ids:
            return []
        return self._query(reads.trace_scores_sql(trace_ids))

    def _query(self, sql: str) -> list[dict[str, Any]]:
        try:
            return self._store.query(sql, 1_000_000, self._sql_timeout).records()
        except QueryError as exc:
            raise RuntimeError(f"probe query failed: {exc}") from None

    def _write(self, row: Mapping[str, Any]) -> None:
        self._store.write_probe_run(PROBE_RUNS.arrow_table({k: [v] for k, v in row.items()}, 1))
