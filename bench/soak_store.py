"""The soak's store read back (bench/soak.py): after the service stopped, its DuckDB file opened
read-only and checked against what the load had acked and the webhook had received: spans lost,
traces never assembled or assembled only at a restart, judge scores per bin around the outages,
notifications lost or out of order, scoring lag per window (`analyse`)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from soak_faults import WebhookReceiver
from soak_helpers import percentile, rnd
from soak_load import TRACES_PER_BATCH, BatchTemplate, LoadSender
from soak_schedule import Schedule
from soak_service import DECISION_WAIT


def analyse(
    db: Path,
    t0: float,
    schedule: Schedule,
    sender: LoadSender,
    template: BatchTemplate,
    judge_down: list[list[Any]],
    webhook: WebhookReceiver,
    judge_grace: float,
    service_kill_at: float | None,
    disk_freed_at: float | None = None,
) -> dict[str, Any]:
    """Read the stopped service's store: acked spans found, traces assembled, judge bins,
    notifications, lag."""
    con = duckdb.connect(str(db), read_only=True)
    prefix = template.trace_hex_prefix()
    ours = f"starts_with(trace_id, '{prefix}')"
    records = list(sender.records)
    acked = [r for r in records if r.acked is not None]
    con.register("acked_batches", pa.table({"batch": pa.array([r.batch for r in acked], pa.int64())}))
    per = TRACES_PER_BATCH
    expected_ids = f"""
        SELECT b.batch, '{prefix}' || format('{{:016x}}', b.batch * {per} + i) AS trace_id,
               format('{{:016x}}', (b.batch * {per} + i) * 4 + k + 1) AS span_id
        FROM acked_batches b, range({per}) r(i), range(4) q(k)"""
    stored = f"SELECT DISTINCT trace_id, span_id FROM spans WHERE {ours}"
    missing_rows = con.execute(
        f"""SELECT e.batch, e.trace_id, e.span_id FROM ({expected_ids}) e
            LEFT JOIN ({stored}) s USING (trace_id, span_id) WHERE s.trace_id IS NULL
            ORDER BY e.batch, e.trace_id, e.span_id"""
    ).fetchall()
    spans_rows, spans_distinct = one(
        con, f"SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM spans WHERE {ours}"
    )
    acked_spans = len(acked) * template.spans
    by_batch = {r.batch: r for r in records}
    missing_batches = Counter(b for b, _, _ in missing_rows)
    spans = {
        "offered": len(records) * template.spans,
        "sent": sum(1 for r in records if r.first_sent is not None) * template.spans,
        "acked": acked_spans,
        "acked_and_stored": acked_spans - len(missing_rows),
        "lost": len(missing_rows),
        "lost_examples": [
            {
                "batch": b,
                "trace_id": t,
                "span_id": s,
                "acked_at_s": acked_at(by_batch[b], t0),
            }
            for b, t, s in missing_rows[:20]
        ],
        "lost_by_batch": {
            str(b): {
                "spans": n,
                "acked_at_s": acked_at(by_batch[b], t0),
            }
            for b, n in sorted(missing_batches.items())[:50]
        },
        "stored_rows": spans_rows,
        "stored_distinct": spans_distinct,
        "duplicate_rows": spans_rows - spans_distinct,
        "stored_not_acked": spans_distinct - (acked_spans - len(missing_rows)),
        "unacked_batches": sum(1 for r in records if r.acked is None and r.dropped is None),
        "dropped_batches": Counter(r.dropped for r in records if r.dropped),
        "retried_batches": sum(1 for r in records if r.attempts > 1),
        "failed_attempts_by_code": dict(sender.codes),
    }

    # Traces: every acked trace assembled once?
    traces_row = one(
        con,
        f"""SELECT count(*), count(DISTINCT trace_id),
                   count(*) FILTER (WHERE judge_status = 'pending'),
                   count(*) FILTER (WHERE mapping_error IS NOT NULL)
            FROM traces WHERE {ours}""",
    )
    # Acked traces with no row in `traces` (never assembled), by the batch that carried them.
    unassembled = con.execute(
        f"""SELECT batch, count(*) FROM (SELECT DISTINCT batch, trace_id FROM ({expected_ids})) e
            WHERE NOT EXISTS (SELECT 1 FROM traces t WHERE t.trace_id = e.trace_id)
            GROUP BY ALL ORDER BY 1"""
    ).fetchall()
    acked_traces_missing = sum(n for _, n in unassembled)
    unassembled_bins: Counter[float] = Counter()
    for b, n in unassembled:
        at = acked_at(by_batch[b], t0)
        unassembled_bins[math.floor((at or 0) / schedule.judge_bin) * schedule.judge_bin] += n
    traces = {
        "acked": len(acked) * per,
        "rows": traces_row[0],
        "distinct": traces_row[1],
        "acked_not_assembled": acked_traces_missing,
        "acked_not_assembled_by_ack_time_bin": {f"{k:.0f}s": v for k, v in sorted(unassembled_bins.items())},
        "judge_pending_at_end": traces_row[2],
        "mapping_errors": traces_row[3],
        "by_assembly_reason": dict(
            con.execute(
                f"SELECT assembly_reason, count(*) FROM traces WHERE {ours} GROUP BY ALL ORDER BY 2 DESC"
            ).fetchall()
        ),
        "by_judge_status": {
            str(k): v
            for k, v in con.execute(
                f"SELECT judge_status, count(*) FROM traces WHERE {ours} GROUP BY ALL ORDER BY 2 DESC"
            ).fetchall()
        },
    }

    # Traces assembled from the store (`recovery`): at a start, or once the store writes again after
    # failing. By when their last span was received. Those received before the disk was freed but
    # assembled only after the kill waited for the restart: their assembly had failed on the full
    # disk and nothing took it back when the store recovered. Those received after the free were in
    # flight at the kill (the assembler was catching up the backlog): recovered at the restart, as
    # acknowledged spans should be.
    kill = service_kill_at
    recovered = con.execute(
        f"""SELECT floor((epoch(last_received_at) - {t0}) / {schedule.judge_bin})::BIGINT AS bin, count(*),
                   min(epoch(last_received_at) - {t0}), max(epoch(last_received_at) - {t0}),
                   min(epoch(assembled_at) - {t0})
            FROM traces WHERE assembly_reason = 'recovery' AND {ours} GROUP BY ALL ORDER BY 1"""
    ).fetchall()
    traces["recovery_by_received_bin"] = [
        {
            "bin_start_s": rnd(b * schedule.judge_bin),
            "traces": n,
            "received_s": [rnd(lo), rnd(hi)],
            "assembled_s": rnd(at),
        }
        for b, n, lo, hi, at in recovered
    ]
    early = kill - 2 * DECISION_WAIT - 5 if kill else math.inf

    def assembled_after_kill(received_before: float) -> int:
        row = con.execute(
            f"""SELECT count(*) FROM traces WHERE assembly_reason = 'recovery' AND {ours}
                AND epoch(last_received_at) - {t0} < {received_before}
                AND epoch(assembled_at) - {t0} >= {kill}"""
        ).fetchone()
        return int(row[0]) if row else 0

    traces["recovered_received_before_kill_minus_15s"] = assembled_after_kill(early) if kill else 0
    # None: no disk fault before the kill, nothing to check.
    traces["failed_on_full_disk_left_for_restart"] = (
        assembled_after_kill(min(disk_freed_at, early)) if kill and disk_freed_at is not None else None
    )
    judge = judge_bins(con, ours, t0, schedule, judge_down, judge_grace)
    notifications = notification_check(con, webhook, t0)
    lag = lag_windows(con, ours, t0, schedule)
    alerts = con.execute(
        "SELECT alert, state, count(*) FROM alert_events GROUP BY ALL ORDER BY 1, 2"
    ).fetchall()
    con.close()
    return {
        "spans": spans,
        "traces": traces,
        "judge": judge,
        "notifications": notifications,
        "alert_events": [{"alert": a, "state": s, "n": n} for a, s, n in alerts],
        "lag": lag,
    }


def one(con: duckdb.DuckDBPyConnection, query: str) -> tuple[Any, ...]:
    """The one row a query answers."""
    row = con.execute(query).fetchone()
    assert row is not None
    return row


def acked_at(record: Any, t0: float) -> float | None:
    """Seconds from the start when a batch was acknowledged, None when it never was."""
    return round(record.acked - t0, 2) if record.acked is not None else None


def judge_bins(
    con: duckdb.DuckDBPyConnection,
    ours: str,
    t0: float,
    schedule: Schedule,
    down: list[list[Any]],
    grace: float,
) -> dict[str, Any]:
    """Judge scores by status per bin of `created_at`, each bin marked outage, recovery or clean."""
    width = schedule.judge_bin
    rows = con.execute(
        f"""SELECT floor((epoch(created_at) - {t0}) / {width})::BIGINT AS bin, status,
                   coalesce(nullif(label, ''), status) AS label, count(*)
            FROM scores WHERE evaluator = 'judge' AND {ours} GROUP BY ALL ORDER BY 1"""
    ).fetchall()
    bins: dict[int, Counter[str]] = defaultdict(Counter)
    error_labels: dict[int, Counter[str]] = defaultdict(Counter)
    for b, status, label, n in rows:
        bins[b][status] += n
        if status == "error":
            error_labels[b][label] += n
    table: list[dict[str, Any]] = []
    for b in sorted(bins):
        start, end = b * width, (b + 1) * width
        kind = "clean"
        if any(s < end and start < e for s, e, _ in down):
            kind = "outage"
        elif any(s < end and start < e + grace for s, e, _ in down):
            kind = "recovery"
        table.append(
            {
                "bin": b,
                "start_s": round(start, 1),
                "kind": kind,
                "pass": bins[b]["pass"],
                "fail": bins[b]["fail"],
                "error": bins[b]["error"],
                "skipped": bins[b]["skipped"],
                "error_labels": dict(error_labels[b]),
            }
        )
    per_outage = []
    for i, (s, e, mode) in enumerate(down):
        inside = [r for r in table if r["start_s"] < e and s < r["start_s"] + width]
        next_outage = down[i + 1][0] if i + 1 < len(down) else math.inf
        after = next(
            (r for r in table if e + grace <= r["start_s"] < next_outage and r["kind"] == "clean"), None
        )
        per_outage.append(
            {
                "outage_s": [s, e],
                "mode": mode,
                "errors_in_outage_bins": sum(r["error"] for r in inside),
                "pass_fail_in_outage_bins": sum(r["pass"] + r["fail"] for r in inside),
                "first_clean_bin_after": after
                and {k: after[k] for k in ("start_s", "pass", "fail", "error")},
            }
        )
    clean = [r for r in table if r["kind"] == "clean"]
    return {
        "bin_seconds": width,
        "grace_seconds": grace,
        "totals": dict(sum((bins[b] for b in bins), Counter())),
        "errors_in_clean_bins": sum(r["error"] for r in clean),
        "clean_bins_with_errors": [r for r in clean if r["error"]],
        "outages": per_outage,
        "bins": table,
    }


def notification_check(con: duckdb.DuckDBPyConnection, webhook: WebhookReceiver, t0: float) -> dict[str, Any]:
    """The webhook's received notifications against `alert_notifications`: lost, pending, order."""
    table = con.execute(
        """SELECT event_id, webhook, epoch(created_at), epoch(delivered_at), attempts, last_error,
                  payload->>'alert', payload->>'state', (payload->>'repeat')::BOOLEAN
           FROM alert_notifications ORDER BY webhook, created_at, event_id"""
    ).fetchall()
    received = list(webhook.received)
    counts = Counter(r["event_id"] for r in received)
    first_order: list[str] = []
    for r in received:
        if r["event_id"] not in first_order:
            first_order.append(r["event_id"])
    ids = {row[0] for row in table}
    delivered = [row for row in table if row[3] is not None]
    pending = [row for row in table if row[3] is None]
    not_received = [row[0] for row in delivered if row[0] not in counts]
    unknown = [e for e in counts if e not in ids]
    table_order = [row[0] for row in delivered]
    order_ok = [e for e in first_order if e in ids] == [e for e in table_order if e in counts]
    mismatch = None
    if not order_ok:
        seen = [e for e in first_order if e in ids]
        want = [e for e in table_order if e in counts]
        i = next(i for i, (a, b) in enumerate(zip([*seen, None], [*want, None], strict=False)) if a != b)
        mismatch = {
            "position": i,
            "received": seen[i] if i < len(seen) else None,
            "table": want[i] if i < len(want) else None,
        }
    # Each alert's notifications, in arrival order: firing and resolved alternate (reminders aside).
    alternation: dict[str, list[str]] = defaultdict(list)
    seen_ids: set[str] = set()
    for r in received:
        if r["event_id"] in seen_ids or r.get("repeat"):
            continue  # a duplicate delivery or a reminder
        seen_ids.add(r["event_id"])
        alternation[str(r.get("alert"))].append(str(r.get("state")))
    broken = {}
    for alert, states in alternation.items():
        bad = [i for i in range(1, len(states)) if states[i] == states[i - 1]]
        if states and states[0] != "firing":
            bad.insert(0, 0)
        if bad:
            broken[alert] = {"states": states, "bad_positions": bad}
    delays = [row[3] - row[2] for row in delivered]
    return {
        "table_rows": len(table),
        "delivered_in_table": len(delivered),
        "pending_in_table_at_end": len(pending),
        "received_accepted": len(received),
        "received_distinct": len(counts),
        "received_twice": {e: n for e, n in counts.items() if n > 1},
        "delivered_not_received": not_received,
        "received_not_in_table": unknown,
        "same_order_as_table": order_ok,
        "order_mismatch": mismatch,
        "alternation_broken": broken,
        "by_alert_state": dict(Counter(f"{r[6]}:{r[7]}" for r in table)),
        "refused_attempts": dict(Counter(r["how"] for r in webhook.refusals)),
        "attempts_per_notification_max": max((row[4] or 0 for row in table), default=0),
        "delivery_delay_s": {"p50": rnd(percentile(delays, 50)), "max": rnd(max(delays, default=None))},
        "received": [
            {
                "seq": r["seq"],
                "t": round(r["t"] - t0, 2),
                "event_id": r["event_id"],
                "alert": r["alert"],
                "state": r["state"],
                "repeat": r["repeat"],
            }
            for r in received
        ],
        "pending": [
            {"event_id": r[0], "alert": r[6], "state": r[7], "attempts": r[4], "last_error": r[5]}
            for r in pending
        ],
    }


def lag_windows(con: duckdb.DuckDBPyConnection, ours: str, t0: float, schedule: Schedule) -> dict[str, Any]:
    """Scoring lag (p50, p95, max) per window of `last_received_at`, deterministic and judge."""
    width = schedule.lag_window
    det = con.execute(
        f"""SELECT floor((epoch(t.last_received_at) - {t0}) / {width})::BIGINT AS w, count(*),
                   quantile_cont(epoch(s.created_at - t.last_received_at), 0.5),
                   quantile_cont(epoch(s.created_at - t.last_received_at), 0.95),
                   max(epoch(s.created_at - t.last_received_at))
            FROM traces t JOIN scores s ON s.trace_id = t.trace_id AND s.revision = t.assembly_count
            WHERE s.name = 'retrieval.hit@5' AND s.evaluator = 'deterministic'
              AND {ours.replace("trace_id", "t.trace_id")}
            GROUP BY ALL ORDER BY 1"""
    ).fetchall()
    jud = con.execute(
        f"""SELECT floor((epoch(last_received_at) - {t0}) / {width})::BIGINT AS w, count(*),
                   quantile_cont(epoch(scored_at - last_received_at), 0.5),
                   quantile_cont(epoch(scored_at - last_received_at), 0.95),
                   max(epoch(scored_at - last_received_at))
            FROM traces WHERE judge_status = 'done' AND {ours} GROUP BY ALL ORDER BY 1"""
    ).fetchall()

    def rows(result: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        return [
            {
                "window": w,
                "start_s": round(w * width, 1),
                "traces": n,
                "p50_s": rnd(a),
                "p95_s": rnd(b),
                "max_s": rnd(c),
            }
            for w, n, a, b, c in result
        ]

    return {
        "window_seconds": width,
        "deterministic": rows(det),
        "judge": rows(jud),
        "columns": "deterministic: scores.created_at - traces.last_received_at (score name retrieval.hit@5, "
        "the trace's current revision); judge: traces.scored_at - traces.last_received_at "
        "(judge_status = 'done'); windows by last_received_at",
    }
