"""Retention end to end: a real service (scoring on), traces sent through the OTLP receivers with the
real OpenTelemetry SDK exporter, and the real retention keeper (`store.retention`) deleting whole
traces past their age and, oldest first, over a size cap while ingestion goes on."""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from collector.config import ConfigError, load_config
from collector.service import BackgroundService, Service
from collector.store.base import StorageSize
from collector.store.duckdb_store import DuckDBStore
from collector.store.quiet_gate import QuietGate
from collector.store.retention import (
    LOW_WATER,
    MIN_LIVE_SHARE,
    bytes_to_free,
    held_traces,
    traces_over_cap,
    traces_to_delete,
)
from collector.store.sql import QueryError
from semconv import emit, names
from tests.support.helpers import (
    fast_assembler,
    file_execute,
    free_port,
    make_config,
    metric,
    sdk_exporter,
    sql,
    wait_for,
)

QUESTION = "How long do I have to return an item?"
ANSWER = "Items can be returned within 30 days of delivery for a full refund."
POLICY = "Items can be returned within 30 days of delivery for a full refund."

# Every table with rows of one trace.
PER_TRACE = ("spans", "span_events", "traces", "steps", "documents", "scores", "evaluation_outbox")


# --------------------------------------------------------------------------- sending traces


def build_trace(tracer: trace.Tracer, end: datetime, filler: str = "") -> str:
    """One RAG request in the ragpulse convention (root, retrieval with two documents, chat) whose
    root span ends at `end` (UTC); `filler` pads the second document. Returns the trace id (hex)."""
    end_ns = int(end.timestamp() * 1e9)
    start_ns = end_ns - 300_000_000
    root = tracer.start_span(
        "rag.request",
        kind=SpanKind.SERVER,
        attributes={names.RAG_STEP: "chain", names.RAG_QUESTION: QUESTION},
        start_time=start_ns,
    )
    context = trace.set_span_in_context(root)
    retrieval = tracer.start_span(
        "retrieval kb",
        context=context,
        kind=SpanKind.CLIENT,
        attributes={names.OPERATION_NAME: names.OP_RETRIEVAL, names.RETRIEVAL_QUERY_TEXT: QUESTION},
        start_time=start_ns + 10_000_000,
    )
    emit.RetrievalSpan(retrieval).documents(
        [
            {"id": "returns-policy", "score": 0.9, "content": POLICY},
            {"id": "shipping-times", "score": 0.4, "content": "Shipping takes 3 to 5 days. " + filler},
        ]
    )
    retrieval.end(end_time=start_ns + 100_000_000)
    chat = tracer.start_span(
        "chat gpt-test",
        context=context,
        kind=SpanKind.CLIENT,
        attributes={names.OPERATION_NAME: names.OP_CHAT, names.REQUEST_MODEL: "gpt-test"},
        start_time=start_ns + 110_000_000,
    )
    emit.ChatSpan(chat).output(ANSWER, input_tokens=50, output_tokens=12)
    chat.end(end_time=end_ns - 10_000_000)
    request = emit.RequestSpan(root)
    request.answer(ANSWER)
    request.expected(["returns-policy"], ANSWER)
    root.end(end_time=end_ns)
    return format(root.get_span_context().trace_id, "032x")


class Sender:
    """Builds traces with the SDK (spans collected in memory) and sends them in one export with the
    SDK's OTLP/HTTP exporter, as an app's batch processor would."""

    def __init__(self, service: Service) -> None:
        self._spans = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self._spans))
        self.tracer = self.provider.get_tracer("test-app")
        self.exporter = sdk_exporter(service, "traces", "http")

    def send(self, ends: Sequence[datetime], filler: str = "") -> tuple[list[str], float]:
        """Send one trace per end time in one export; (trace ids, seconds until acknowledged)."""
        ids = [build_trace(self.tracer, end, filler) for end in ends]
        spans: Sequence[ReadableSpan] = self._spans.get_finished_spans()
        self._spans.clear()
        started = time.perf_counter()
        result = self.exporter.export(spans)
        elapsed = time.perf_counter() - started
        assert result is SpanExportResult.SUCCESS, "an export was refused"
        return ids, elapsed

    def close(self) -> None:
        self.exporter.shutdown()
        self.provider.shutdown()


def now() -> datetime:
    return datetime.now(UTC)


# --------------------------------------------------------------------------- reading the store


def rows_per_table(service: Service, trace_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """{table: {trace_id: rows}} for these traces, every per-trace table."""
    listed = ", ".join(f"'{t}'" for t in trace_ids)
    counts: dict[str, dict[str, int]] = {}
    for table in PER_TRACE:
        rows = sql(
            service,
            f"SELECT trace_id, count(*) AS n FROM {table} WHERE trace_id IN ({listed}) GROUP BY trace_id",
        )
        counts[table] = {row["trace_id"]: row["n"] for row in rows}
    return counts


def aggregates(service: Service) -> list[dict[str, Any]]:
    return sql(service, "SELECT * EXCLUDE (updated_at) FROM score_aggregates ORDER BY ALL")


# --------------------------------------------------------------------------- age


def test_traces_past_the_age_are_deleted_from_every_table_and_aggregates_are_kept(tmp_path: Path) -> None:
    # A downstream nobody listens on: evaluation events stay in the outbox, so it has rows to delete.
    sections: dict[str, Any] = {
        "assembler": fast_assembler(),
        "exporters": {"otlp": {"endpoint": f"127.0.0.1:{free_port()}", "timeout": 1}},
    }
    old_ends = [now() - timedelta(days=40, hours=h) for h in range(4)]
    recent_ends = [now() - timedelta(days=29), now() - timedelta(hours=1), now()]

    # Written while retention is off: every trace assembled and scored, its events in the outbox.
    with BackgroundService(make_config(tmp_path, **sections)) as svc:
        sender = Sender(svc)
        old, _ = sender.send(old_ends)
        recent, _ = sender.send(recent_ends)
        sender.close()
        everything = old + recent
        wait_for(
            lambda: rows_per_table(svc, everything),
            lambda counts: all(len(counts[t]) == len(everything) for t in PER_TRACE),
            timeout=30,
            what="every trace in every per-trace table",
        )
        before = rows_per_table(svc, everything)
        kept_aggregates = aggregates(svc)
    assert kept_aggregates, "no score aggregates to keep"

    retention = {"retention": {"max_age_days": 30, "check_every": 0.2}}
    with BackgroundService(make_config(tmp_path, store=retention, **sections)) as svc:
        after = wait_for(
            lambda: rows_per_table(svc, everything),
            lambda counts: not counts["spans"].keys() & set(old),
            timeout=15,
            what="the old traces' spans to be deleted",
        )
        for table in PER_TRACE:
            assert not after[table].keys() & set(old), f"{table} still holds rows of old traces"
            assert after[table] == {t: before[table][t] for t in recent}, f"{table}: recent rows changed"
        assert aggregates(svc) == kept_aggregates
        assert metric(svc, "ragpulse_retention_traces_deleted_total", reason="age") == len(old)
        assert metric(svc, "ragpulse_retention_spans_deleted_total", reason="age") == 3 * len(old)
        assert metric(svc, "ragpulse_store_bytes") > 0

        # A trace already past the age when it arrives is deleted too, and so are the rows its
        # assembly writes after its spans are gone.
        assembled = metric(svc, "ragpulse_traces_assembled_total", reason="complete")
        sender = Sender(svc)
        (late,), _ = sender.send([now() - timedelta(days=31)])
        sender.close()
        wait_for(
            lambda: metric(svc, "ragpulse_traces_assembled_total", reason="complete"),
            lambda n: n > assembled,
            what="the late old trace to be assembled",
        )
        wait_for(
            lambda: rows_per_table(svc, [late]),
            lambda counts: not any(counts.values()),
            timeout=10,
            what="every row of the late old trace to be deleted",
        )
        assert rows_per_table(svc, recent) == {t: {r: before[t][r] for r in recent} for t in PER_TRACE}


# --------------------------------------------------------------------------- size cap

CAP = 8_000_000  # bytes; the empty schema takes about 1.6 MB
LOAD_SECONDS = 20.0
TRACES_PER_EXPORT = 20
FILLER_BYTES = 2000  # random, sent as hex: about 10 KB a trace on disk with its derived rows
# The bounds after the first round, in a file that is tiny for DuckDB: it allocates 256 KB blocks,
# frees the space of deleted rows only when a row group goes or is merged, and writes what a
# checkpoint changes before freeing the old blocks, so at moments the file plus its log is a few
# times the cap while over the load it stays near it. Without retention the same load grows the file
# linearly to about 80 MB (median about 55 MB, 90th percentile about 80 MB).
MEDIAN_BOUND = 3 * CAP
P90_BOUND = 4.5 * CAP
PEAK_BOUND = 6 * CAP


def on_disk(db: Path) -> int:
    """The database file plus its write-ahead log (gone after a checkpoint, maybe while we look)."""
    try:
        wal = db.with_name(db.name + ".wal").stat().st_size
    except FileNotFoundError:
        wal = 0
    return db.stat().st_size + wal


def settle_deletions(svc: Service, timeout: float = 15) -> None:
    """Wait until no size deletion happened for half a second: rounds go on after the load, and a
    trace between its deletion and its count would be in neither."""
    previous = -1.0
    deadline = time.monotonic() + timeout
    while (current := metric(svc, "ragpulse_retention_traces_deleted_total", reason="size")) != previous:
        assert time.monotonic() < deadline, "retention did not settle after the load"
        previous = current
        time.sleep(0.5)


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[Service]:
    config = make_config(
        tmp_path,
        assembler=fast_assembler(),
        store={
            "checkpoint_threshold_mb": 1,
            "retention": {"max_bytes": CAP, "check_every": 0.1, "delete_batch": 500},
        },
    )
    with BackgroundService(config) as svc:
        yield svc


# Timed under load: never beside the lake's tests (PostgreSQL and several replicas take both cores;
# under `pytest -n 2` its longest export once passed 2 s beside them). `--dist loadgroup` runs a
# group's tests on one process, one after the other.
@pytest.mark.xdist_group("heavy")
def test_size_cap_holds_under_steady_load_without_pausing_ingestion(capped: Service) -> None:
    svc = capped
    db = Path(svc.config.store.path)
    samples: list[tuple[float, int, float | None]] = []  # (time, bytes on disk, size deletions so far)
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            deleted = svc.metrics.registry.get_sample_value(
                "ragpulse_retention_traces_deleted_total", {"reason": "size"}
            )
            samples.append((time.monotonic(), on_disk(db), deleted))
            stop.wait(0.05)

    sent: list[str] = []
    latencies: list[float] = []
    errors: list[BaseException] = []

    def send() -> None:
        sender = Sender(svc)
        try:
            deadline = time.monotonic() + LOAD_SECONDS
            while time.monotonic() < deadline:
                # Random text, so that the documents do not compress away.
                filler = os.urandom(FILLER_BYTES).hex()
                ids, elapsed = sender.send([now()] * TRACES_PER_EXPORT, filler)
                sent.extend(ids)
                latencies.append(elapsed)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            sender.close()

    sampler = threading.Thread(target=sample, daemon=True)
    sender_thread = threading.Thread(target=send, daemon=True)
    sampler.start()
    sender_thread.start()
    sender_thread.join(LOAD_SECONDS + 30)
    time.sleep(1.0)  # a few more rounds after the load
    stop.set()
    sampler.join(5)
    assert not errors, errors
    assert not sender_thread.is_alive()
    assert samples[-1][0] - samples[0][0] >= LOAD_SECONDS, "the size was not sampled all along"

    first_round = next((t for t, _, deleted in samples if deleted), None)
    assert first_round is not None, "retention never deleted anything"
    after_first = [size for t, size, _ in samples if t >= first_round]
    settle_deletions(svc)
    kept = sql(svc, "SELECT count(DISTINCT trace_id) AS n FROM spans")[0]["n"]
    deleted = metric(svc, "ragpulse_retention_traces_deleted_total", reason="size")
    report = (
        f"{len(sent)} traces sent in {len(latencies)} exports, {kept} kept, {int(deleted)} deleted; "
        f"on disk after the first round: peak {max(after_first) / 1e6:.1f} MB, 90th percentile "
        f"{statistics.quantiles(after_first, n=10)[-1] / 1e6:.1f} MB, median "
        f"{statistics.median(after_first) / 1e6:.1f} MB (cap {CAP / 1e6:.1f} MB); "
        f"longest export {max(latencies):.2f} s"
    )
    print(report)
    # The load mattered: most of what was sent had to go (27 runs kept 207-521 of 9,000-11,000
    # traces; up to 2,888 before a hold that rose round after round was fixed; on a busy 2-core
    # runner 1,230 of 4,560, which is within the cap's room at about 5 KB a trace).
    assert deleted > len(sent) / 2, report
    assert deleted + kept >= len(sent), report
    assert statistics.median(after_first) <= MEDIAN_BOUND, report
    assert statistics.quantiles(after_first, n=10)[-1] <= P90_BOUND, report
    assert max(after_first) <= PEAK_BOUND, report
    # Ingestion never waited on retention for more than a moment; every export was acknowledged.
    # Rounds run every 0.1 s, so a pause for retention would slow export after export; one export
    # slowed by the machine is not such a pause (the other test process once held both cores of a
    # CI runner through one 2.03 s export, beside exports of 0.03-0.07 s).
    slow = [elapsed for elapsed in latencies if elapsed >= 1.0]
    assert len(slow) <= max(2, len(latencies) // 50), f"{len(slow)} exports took 1 s or more; {report}"
    assert max(latencies) < 5.0, report
    assert metric(svc, "ragpulse_exports_throttled_total") == 0, report
    assert metric(svc, "ragpulse_store_bytes") > 0

    # Oldest first: the newest traces are all there, the oldest are gone.
    present = {r["trace_id"] for r in sql(svc, "SELECT DISTINCT trace_id FROM spans")}
    newest, oldest = sent[-TRACES_PER_EXPORT:], sent[: 5 * TRACES_PER_EXPORT]
    assert set(newest) <= present, report
    assert not set(oldest) & present, report


# --------------------------------------------------------------------------- decisions and config


def size(file_mb: float, wal_mb: float = 0, free_mb: float = 0) -> StorageSize:
    return StorageSize(int(file_mb * 1e6), int(wal_mb * 1e6), int(free_mb * 1e6))


def test_bytes_to_free_aims_below_the_cap_and_never_empties_a_file_of_free_space() -> None:
    cap = 100_000_000
    assert bytes_to_free(size(100), cap) == 0  # at the cap: nothing
    # Over it by the log: back to 90 % of the cap.
    assert bytes_to_free(size(95, wal_mb=10), cap) == 105_000_000 - int(LOW_WATER * cap)
    # Most of the excess is free space, reused before the file grows: data is kept down to half
    # the cap, not deleted to make up for space DuckDB has not given back.
    assert bytes_to_free(size(150, free_mb=100), cap) == 0
    assert bytes_to_free(size(150, free_mb=80), cap) == 70_000_000 - int(MIN_LIVE_SHARE * cap)


def test_traces_to_delete_estimates_from_the_average_trace() -> None:
    assert traces_to_delete(0, 1000, 10) == 0
    assert traces_to_delete(250, 1000, 10) == 3  # 100 bytes a trace: rounded up
    assert traces_to_delete(5000, 1000, 10) == 10  # never more than there are
    assert traces_to_delete(10, 1000, 0) == 0


def test_after_a_round_that_freed_nothing_only_newer_traces_are_deleted() -> None:
    assert traces_over_cap(300, 1000, 10, hold=None) == 3
    # 8 traces were kept by a round whose deletions gave no space back: 2 came since, 2 may go.
    assert traces_over_cap(500, 1000, 10, hold=8) == 2
    assert traces_over_cap(500, 1000, 7, hold=8) == 0


def test_a_hold_never_rises_while_deletions_give_nothing_back() -> None:
    assert held_traces(None, 562) == 562  # the first round that freed nothing holds the count
    # Traces arrived while the next rounds deleted: the hold stays, so they go at the next round
    # instead of being kept (a hold raised round after round let an 8 MB store reach 34 MB).
    assert held_traces(562, 882) == 562
    assert held_traces(562, 400) == 400


# --------------------------------------------------------------------------- quiet checkpoints


def test_the_gate_runs_its_body_once_open_transactions_end_and_holds_new_ones_back() -> None:
    gate = QuietGate()
    events: list[str] = []
    opened, release = threading.Event(), threading.Event()

    def transaction(name: str, hold: threading.Event | None = None) -> None:
        with gate.transaction():
            events.append(f"{name} open")
            opened.set()
            if hold is not None:
                hold.wait(5)
            events.append(f"{name} done")

    first = threading.Thread(target=transaction, args=("first", release))
    first.start()
    assert opened.wait(5)
    threading.Timer(0.2, release.set).start()
    with gate.alone(timeout=5) as quiet:
        events.append("alone")
        late = threading.Thread(target=transaction, args=("late",))
        late.start()
        late.join(0.2)
        assert late.is_alive()  # held back while the body runs
        events.append("alone done")
    late.join(5)
    first.join(5)
    assert quiet
    assert events == ["first open", "first done", "alone", "alone done", "late open", "late done"]


def test_the_gate_gives_up_waiting_and_lets_transactions_through() -> None:
    gate = QuietGate()
    release = threading.Event()
    opened = threading.Event()

    def transaction() -> None:
        with gate.transaction():
            opened.set()
            release.wait(5)

    stuck = threading.Thread(target=transaction)
    stuck.start()
    assert opened.wait(5)
    started = time.monotonic()
    with gate.alone(timeout=0.2) as quiet:
        waited = time.monotonic() - started
        with gate.transaction():  # not held back: the body runs beside the open one
            pass
    release.set()
    stuck.join(5)
    assert not quiet
    assert 0.2 <= waited < 2


def test_a_checkpoint_after_a_deletion_waits_for_a_query_older_than_it_and_frees_the_rows(
    tmp_path: Path,
) -> None:
    db = tmp_path / "quiet.duckdb"
    DuckDBStore(db).close()
    file_execute(
        db,
        "INSERT INTO received_spans (trace_id, span_id, name, attributes) "
        "SELECT 't' || (i // 4), 's' || i, 'span', json_object('text', repeat(md5(i::VARCHAR), 20)) "
        "FROM range(200000) r(i)",
        "CHECKPOINT",
    )
    with DuckDBStore(db) as store:
        before = store.storage_size()
        failures: list[str] = []
        ended: list[float] = []

        def long_query() -> None:  # open until its time limit interrupts it
            try:
                store.query("SELECT count(*) FROM range(1000000000000) a", max_rows=1, timeout=1.0)
            except QueryError as exc:
                failures.append(str(exc))
            ended.append(time.monotonic())

        query = threading.Thread(target=long_query)
        query.start()
        time.sleep(0.1)
        # The query began before the deletion: DuckDB keeps the deleted rows for it while it runs.
        store.delete_traces([f"t{i}" for i in range(25000)])  # the first half
        checkpoint_started = time.monotonic()
        store.checkpoint()
        query.join(5)
        after = store.storage_size()
    assert failures and "time limit" in failures[0], failures
    assert ended[0] > checkpoint_started, "the query ended before the checkpoint: nothing was tested"
    # A checkpoint beside it would fold the deletion in but free none of its blocks: this one waited.
    assert after.free_bytes - before.free_bytes > before.file_bytes / 4, (before, after)


@pytest.mark.parametrize(
    ("retention", "message"),
    [
        ({"max_age_days": 0}, "store.retention.max_age_days: Input should be greater than 0"),
        ({"max_bytes": -5}, "store.retention.max_bytes: Input should be greater than 0"),
        ({"max_bytes": "lots"}, "store.retention.max_bytes: Input should be a valid integer"),
        ({"check_every": 0}, "store.retention.check_every: Input should be greater than 0"),
        ({"delete_batch": 0}, "store.retention.delete_batch: Input should be greater than 0"),
        ({"max_age": 30}, "store.retention.max_age: unknown key"),
    ],
)
def test_bad_retention_config_is_refused_with_its_key_path(
    tmp_path: Path, retention: dict[str, Any], message: str
) -> None:
    path = tmp_path / "ragpulse.yaml"
    path.write_text(json.dumps({"store": {"retention": retention}}))
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    assert message in str(raised.value)


def test_retention_is_off_unless_a_limit_is_set(tmp_path: Path) -> None:
    path = tmp_path / "ragpulse.yaml"
    path.write_text("store:\n  retention: {check_every: 5}\n")
    assert not load_config(path, environ={}).store.retention.enabled
    path.write_text("store:\n  retention: {max_age_days: 30, max_bytes: 20000000000}\n")
    retention = load_config(path, environ={}).store.retention
    assert retention.enabled and retention.max_age_days == 30 and retention.max_bytes == 20_000_000_000
