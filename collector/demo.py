"""`ragpulse demo`: the guided first run.

Starts the collector on a fresh DuckDB file and free loopback ports, loads the example's golden
cases, drives the example shop assistant (`collector/shop_assistant`) in its three modes and both
conventions through the real OTel SDK OTLP/gRPC exporter, waits until every trace is assembled,
stops the collector and prints what the tables say per mode, plus SQL to try next.

The summary is built from rows (one per mode and convention, from SQL) and a list of metrics,
shown as metrics down and modes across so it fits a terminal as metrics are added. Enrichers
add metrics: each takes the query function and the rows, adds its values to the rows and returns
the metrics it filled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from collector.api_client import ApiClient, ApiError
from collector.config import Config
from collector.receivers.ports import port_taken
from collector.server_file import running_server_url
from collector.service import BackgroundService
from collector.store import StoreConfig, StoreError, StoreLocked, open_store
from collector.store.reads import Query
from collector.store.reads import demo as reads
from collector.store.sql import QueryError

DEMO_SERVICE = "shop-assistant"


class DemoError(RuntimeError):
    """The demo could not run; the message says why and what to do."""


# The scores the summary shows, per mode and convention.
DEMO_SCORES = ("retrieval.recall@5", "faithfulness", "context_recall", "answer_correctness")


@dataclass(frozen=True)
class Metric:
    """One line of the summary: a key of the summary rows, its label, how to show a value, and how
    the two conventions' values of a mode combine into one cell:
    `compare` shows one value when both conventions agree and `ragpulse / openinference` when not
    (a mapping difference); `mean` and `sum` pool them (latencies differ from run to run anyway);
    `ratio` adds up `(part, whole)` pairs, so a count over the mode's traces reads against its
    `traces` line."""

    key: str
    label: str
    fmt: Callable[[Any], str] = str
    combine: Literal["compare", "mean", "sum", "ratio"] = "compare"


def _number(digits: int) -> Callable[[Any], str]:
    return lambda value: f"{float(value):,.{digits}f}"


def _integer(value: Any) -> str:
    return f"{round(float(value)):,}"


SUMMARY_METRICS: list[Metric] = [
    Metric("traces", "traces", _integer, "sum"),
    Metric("avg_steps", "steps per trace", _number(1)),
    Metric("avg_documents", "documents per trace", _number(1)),
    Metric("avg_input_tokens", "input tokens per trace", _number(0)),
    Metric("avg_output_tokens", "output tokens per trace", _number(0)),
    Metric("avg_retrieval_ms", "retrieval ms (avg)", _number(1), "mean"),
    Metric("avg_generation_ms", "generation ms (avg)", _number(1), "mean"),
]

# An enricher takes the query function and the summary rows (one per mode and convention), adds
# its values to the rows under its own keys, and returns the metrics it filled.
Enricher = Callable[[Query, list[dict[str, Any]]], list[Metric]]


def expected_documents_found(query: Query, rows: list[dict[str, Any]]) -> list[Metric]:
    """Adds `expected_found` ("found/expected" over a mode's traces), from the golden cases."""
    counts = {(r["mode"], r["convention"]): r for r in query(reads.EXPECTED_FOUND_SQL)}
    for row in rows:
        hit = counts.get((row["mode"], row["convention"]))
        row["expected_found"] = (int(hit["found"]), int(hit["expected"])) if hit else None
    return [Metric("expected_found", "expected documents retrieved", _fraction, "ratio")]


def _fraction(pair: tuple[int, int]) -> str:
    return f"{pair[0]}/{pair[1]}"


def stored_scores(query: Query, rows: list[dict[str, Any]]) -> list[Metric]:
    """Adds the mean of a few scores per mode and convention, as the service stored them in `scores`
    (deterministic, or the judge's where a judge is configured)."""
    means = {(r["mode"], r["convention"], r["name"]): r for r in query(reads.scores_sql(DEMO_SCORES))}
    judged = {r["name"] for r in means.values() if r["evaluator"] == "judge"}
    for row in rows:
        for name in DEMO_SCORES:
            found = means.get((row["mode"], row["convention"], name))
            row[f"score:{name}"] = found["mean"] if found else None
    return [
        Metric(f"score:{name}", f"{name} (mean{', judge' if name in judged else ''})", _number(2))
        for name in DEMO_SCORES
    ]


# Applied in order after the base summary.
ENRICHERS: list[Enricher] = [expected_documents_found, stored_scores]


def summarise(query: Query) -> list[dict[str, Any]]:
    """One row per (mode, convention) from the traces, steps and documents tables."""
    return query(reads.SUMMARY_SQL)


def _cell(metric: Metric, values: list[Any]) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "-"
    if metric.combine == "sum":
        return metric.fmt(sum(present))
    if metric.combine == "mean":
        return metric.fmt(sum(present) / len(present))
    if metric.combine == "ratio":
        return metric.fmt((sum(p[0] for p in present), sum(p[1] for p in present)))
    shown = [metric.fmt(v) if v is not None else "-" for v in values]
    return shown[0] if len(set(shown)) == 1 else " / ".join(shown)


def summary_table(
    rows: Sequence[dict[str, Any]],
    metrics: Sequence[Metric],
    modes: Sequence[str],
    conventions: Sequence[str],
    title: str,
) -> Table:
    """Metrics down, modes across; each cell combines the mode's conventions (see `Metric`)."""
    by_key = {(r["mode"], r["convention"]): r for r in rows}
    table = Table(title=title, title_justify="left", caption_justify="left")
    table.add_column("")
    for mode in modes:
        table.add_column(mode, justify="right")
    disagree = False
    for metric in metrics:
        cells = []
        for mode in modes:
            values = [by_key.get((mode, c), {}).get(metric.key) for c in conventions]
            cells.append(_cell(metric, values))
        disagree = disagree or any(" / " in cell for cell in cells)
        table.add_row(metric.label, *cells)
    if len(conventions) > 1:
        table.caption = (
            f"a / b: the {' / '.join(conventions)} traces disagree"
            if disagree
            else f"The {' and '.join(conventions)} traces agree on every line."
        )
    return table


def sql_to_try(db: str, program: str = "ragpulse") -> list[str]:
    """Commands a new user can paste next, against the demo file (a comment line before each)."""
    lines = []
    for comment, query in reads.SQL_TO_TRY:
        lines += [f"# {comment}", f'{program} sql "{query}" --db {db}']
    return lines


def prepare_database(db: Path) -> None:
    """Remove the previous demo database so reruns start clean; refuse to remove anything else."""
    if running_server_url(db):
        raise DemoError(f"a running ragpulse holds {db}; stop it or pass another --db")
    if db.exists():
        try:
            store = open_store(StoreConfig(path=str(db)), read_only=True)
        except StoreLocked:
            raise DemoError(f"{db} is in use by another process; pass another --db") from None
        except StoreError:
            raise DemoError(f"{db} exists and is not a ragpulse database; pass another --db") from None
        with store:
            try:
                others = store.query(
                    reads.other_services_spans_sql(DEMO_SERVICE), max_rows=1, timeout=60
                ).rows[0][0]
            except QueryError:  # no spans table: not a ragpulse file
                others = None
        if others is None or others:
            raise DemoError(
                f"{db} holds data that `ragpulse demo` did not write; it will not delete it. "
                "Pass another --db"
            )
    for path in (db, Path(f"{db}.wal")):
        path.unlink(missing_ok=True)


def demo_config(config: Config, db: Path) -> Config:
    """`config` with the demo's overrides: the demo file, free loopback ports, quick assembly."""
    demo = config.model_copy(deep=True)
    demo.store.path = str(db)
    # Loopback and free ports, talked to by the demo alone: no keys (`--serve` then applies them).
    demo.auth.keys = []
    demo.receivers.host = "127.0.0.1"
    demo.receivers.grpc_port = 0
    demo.receivers.http_port = 0
    # Every trace ends at once; waiting the production 5 s would only slow the demo down.
    demo.assembler.decision_wait = 0.3
    demo.assembler.poll_interval = 0.1
    # A few dozen traces: mapping them in-process saves spawning the mapping worker.
    demo.assembler.workers = 0
    demo.scoring.enabled = True
    demo.sampling.rate = 1.0
    if demo.judge.model:  # with a judge configured, the demo shows its scores on every trace
        demo.sampling.judge_rate = 1.0
        demo.scoring.judge_poll_interval = 0.2
    return demo


def wait_for_traces(query: Query, expected: int, timeout: float) -> int:
    """Poll until `expected` traces are assembled and scored, the judge's scores included (no
    trace left `pending`); DemoError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    count, judging, problem = 0, 0, ""
    while True:
        try:
            row = query(reads.WAIT_SQL)[0]
            count, judging, problem = int(row["n"]), int(row["judging"]), ""
        except ApiError as exc:
            problem = f" ({exc})"
        if count >= expected and not judging:
            return count
        if count >= expected and time.monotonic() >= deadline:
            raise DemoError(
                f"{judging} of {count} traces were still waiting for the judge after {timeout:g} s; "
                "see judge.base_url and judge.model, or raise --timeout"
            )
        if time.monotonic() >= deadline:
            raise DemoError(
                f"only {count} of {expected} traces were assembled after {timeout:g} s{problem}; "
                'the spans are in the database, see `ragpulse sql "SELECT count(*) FROM spans"`'
            )
        time.sleep(0.1)


def run_demo(
    config: Config,
    db: Path,
    console: Console | None = None,
    timeout: float = 30.0,
    latency: float = 1.0,
    program: str = "ragpulse",
) -> list[dict[str, Any]]:
    """Run the whole demo and print it; returns the summary rows. `program`: how the commands to
    try next write ragpulse (`.venv/bin/ragpulse` when it is on no PATH)."""
    # Imported here: only the demo needs the example app (and it imports `semconv`, not us).
    from collector.shop_assistant import CASES_FILE, CONVENTIONS, MODES, load_cases, run

    console = console or Console()
    prepare_database(db)
    cases = load_cases()
    sent = 0
    with BackgroundService(demo_config(config, db)) as service:
        console.print(f"[bold]ragpulse demo[/bold]: collector running, database {db}")
        console.print(f"  OTLP/gRPC 127.0.0.1:{service.grpc_port}, HTTP and API {service.http_url}")
        with ApiClient(service.http_url, timeout=30) as api:
            api.load_cases(
                [
                    {
                        "id": c.id,
                        "question": c.question,
                        "expected_documents": list(c.expected_documents),
                        "expected_answer": c.expected_answer,
                    }
                    for c in cases
                ],
                source=str(CASES_FILE),
            )
            console.print(f"loaded {len(cases)} golden cases from {CASES_FILE.name}")
            for mode in MODES:
                for convention in CONVENTIONS:
                    report = run(
                        f"127.0.0.1:{service.grpc_port}",
                        mode=mode,
                        convention=convention,
                        cases=cases,
                        latency=latency,
                        service_name=DEMO_SERVICE,
                    )
                    if not report.ok:
                        raise DemoError(
                            f"the collector did not acknowledge the {mode}/{convention} spans "
                            f"({report.spans_failed} failed, {report.spans_exported} acknowledged)"
                        )
                    sent += len(report.answers)
                    console.print(f"  sent {len(report.answers)} traces: {mode}, {convention} convention")
            count = wait_for_traces(api.rows, sent, timeout)
            console.print(f"{count} traces assembled and scored into traces / steps / documents / scores")

    # The collector has stopped and checkpointed: the summary reads the file itself.
    with open_store(StoreConfig(path=str(db)), read_only=True) as store:

        def query(sql: str) -> list[dict[str, Any]]:
            return store.query(sql, max_rows=1_000_000, timeout=timeout).records()

        rows = summarise(query)
        metrics = list(SUMMARY_METRICS)
        for enrich in ENRICHERS:
            metrics.extend(enrich(query, rows))
        samples = query(reads.sample_answers_sql(cases[0].id))

    console.print()
    title = f"Per mode: {len(cases)} questions x {len(CONVENTIONS)} conventions"
    console.print(summary_table(rows, metrics, MODES, CONVENTIONS, title))
    by_mode = {s["mode"]: s for s in samples}
    if by_mode:
        question = next(iter(by_mode.values()))["question"]
        sample = Table(title=f"One question, three modes: {question}", title_justify="left")
        sample.add_column("mode", no_wrap=True)
        sample.add_column("answer")
        for mode in MODES:
            if mode in by_mode:
                sample.add_row(mode, by_mode[mode]["answer"] or "")
        console.print()
        console.print(sample)
    console.print("\n[bold]SQL to try next[/bold]")
    for line in sql_to_try(str(db), program):
        style = "dim" if line.startswith("#") else None
        console.print(line, style=style, highlight=False, markup=False, soft_wrap=True)
    return rows


def check_serve_ports(config: Config) -> None:
    """DemoError when `--serve` could not listen where `config.receivers` says, naming the options
    and variables that move it: found before the demo runs, not after."""
    receivers = config.receivers
    for protocol, port, option, variable in (
        ("OTLP/gRPC", receivers.grpc_port, "--grpc-port", "RAGPULSE_RECEIVERS__GRPC_PORT"),
        ("OTLP/HTTP and the dashboard", receivers.http_port, "--http-port", "RAGPULSE_RECEIVERS__HTTP_PORT"),
    ):
        taken = port_taken(receivers.host, port)
        if taken:
            raise DemoError(
                f"--serve cannot listen for {protocol} on {receivers.host}:{port} ({taken}); stop what "
                f"holds it, or pick another port with {option} (or {variable})"
            )


def serve_demo(config: Config, db: Path, console: Console | None = None) -> None:
    """Serve the demo database on the configured ports (4317 / 4318 by default) until Ctrl-C, so
    its traces can be looked at in the dashboard; the app may go on sending traces."""
    import asyncio
    import contextlib

    from collector.service import Service

    console = console or Console()
    served = config.model_copy(deep=True)
    served.store.path = str(db)
    service = Service(served)
    host = "127.0.0.1" if served.receivers.host in ("0.0.0.0", "::", "") else served.receivers.host
    console.print(
        f"\n[bold]Dashboard:[/bold] http://{host}:{served.receivers.http_port}/  "
        f"(OTLP/gRPC on port {served.receivers.grpc_port}; Ctrl-C stops)"
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(service.run())
