"""What came back of a probe run (pure): which traces answered which case, whether a request is
settled, the run's rows, counts and scores' summary, and which probes are due."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from collector.probes.requests import ProbeResult

# An app's trace found by question may start this much "before" its request.
_CLOCK_SKEW = timedelta(seconds=1)


def scored(row: Mapping[str, Any] | None) -> bool:
    """Whether an assembled trace's scoring is over: it has scores (and no judge work pending), or
    it was not sampled for any (`skip`: nothing to score, such as a trace with no RAG step)."""
    if row is None:
        return False
    if row.get("sample_decision") == "skip":
        return True
    return bool(row.get("n_scores")) and row.get("judge_status") != "pending"


def _continued(row: Mapping[str, Any] | None) -> bool:
    """Whether ragpulse's trace holds spans of the app too (the app continued the trace)."""
    return row is not None and (row.get("span_count") or 0) > 1


def _utc(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, UTC).replace(tzinfo=None)


def _time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def assign_question_traces(
    results: Sequence[ProbeResult],
    own: Mapping[str, Mapping[str, Any]],
    candidates: Iterable[Mapping[str, Any]],
) -> dict[str, str]:
    """For the requests whose trace the app did not continue (their trace holds ragpulse's span
    alone, or has not arrived), the trace the app started instead, found by question: `candidates`
    are traces matched to a case by question (`trace_id, case_id, start_time`). Each request takes
    the earliest unclaimed candidate of its case that started after it (less a second of clock
    skew), in the order the requests were sent. Returns ragpulse's trace id -> the app's."""
    by_case: dict[str, list[tuple[datetime, str]]] = {}
    for row in candidates:
        started = _time(row.get("start_time"))
        if started is not None and row.get("case_id") is not None:
            by_case.setdefault(str(row["case_id"]), []).append((started, str(row["trace_id"])))
    for found in by_case.values():
        found.sort()
    taken: set[str] = set()
    assigned: dict[str, str] = {}
    for result in sorted(results, key=lambda r: r.start_ns):
        if not result.sent or _continued(own.get(result.trace_id)):
            continue
        sent_at = _utc(result.start_ns) - _CLOCK_SKEW
        for started, trace_id in by_case.get(result.case_id, []):
            if trace_id not in taken and started >= sent_at:
                taken.add(trace_id)
                assigned[result.trace_id] = trace_id
                break
    return assigned


def settled(result: ProbeResult, own: Mapping[str, Any] | None, app: Mapping[str, Any] | None) -> bool:
    """Whether there is nothing more to wait for about one request: its app trace (the continued
    one, or the one found by question) is assembled and scored; for a request the app did not
    answer, ragpulse's own trace assembled is enough (such a request may leave no app trace)."""
    if not result.sent:
        return True
    if _continued(own):
        return scored(own)
    if app is not None:
        return scored(app)
    return own is not None and not result.answered


def result_rows(
    results: Sequence[ProbeResult],
    own: Mapping[str, Mapping[str, Any]],
    by_question: Mapping[str, str],
) -> list[dict[str, Any]]:
    """The `results` of a run: per case, ragpulse's trace, the app's (the one found by question when
    the context was dropped, else the same), the HTTP status, latency, error, and whether the app's
    trace arrived."""
    rows = []
    for result in results:
        continued = _continued(own.get(result.trace_id))
        app_trace = by_question.get(result.trace_id) if not continued else None
        rows.append(
            {
                "case_id": result.case_id,
                "question": result.question,
                "trace_id": result.trace_id,
                "app_trace_id": app_trace or result.trace_id,
                "http_status": result.http_status,
                "latency_ms": None if result.latency_ms is None else round(result.latency_ms, 3),
                "error": result.error,
                "outcome": result.outcome,
                "received": continued or app_trace is not None,
                "matched_by": "case_id" if continued else "question" if app_trace else None,
            }
        )
    return rows


def tally(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """A run's counts from its `results`: cases, answered, errors, traces received and missing."""
    sent = [r for r in rows if r["outcome"] != "not_sent"]
    answered = [r for r in sent if r["outcome"] == "answered"]
    return {
        "cases": len(rows),
        "answered": len(answered),
        "errors": len(sent) - len(answered),
        "traces_received": sum(bool(r["received"]) for r in sent),
        "missing_traces": sum(not r["received"] for r in answered),
    }


def summarize(scores: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per score name over a run's traces (`name, value, status` rows): how many, the counts per
    status, the mean of the values (pass and fail: an error or skipped score has none), and the pass
    rate over the scores that applied (all but skipped; an error never passes)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for score in scores:
        groups.setdefault(str(score["name"]), []).append(score)
    summary = {}
    for name in sorted(groups):
        rows = groups[name]
        counts = {s: sum(r["status"] == s for r in rows) for s in ("pass", "fail", "error", "skipped")}
        values = [
            float(r["value"]) for r in rows if r["status"] in ("pass", "fail") and r["value"] is not None
        ]
        applied = len(rows) - counts["skipped"]
        summary[name] = {
            "n": len(rows),
            "n_pass": counts["pass"],
            "n_fail": counts["fail"],
            "n_error": counts["error"],
            "n_skipped": counts["skipped"],
            "mean": sum(values) / len(values) if values else None,
            "pass_rate": counts["pass"] / applied if applied else None,
        }
    return summary


def due_probes(next_due: Mapping[str, datetime], now: datetime, running: Collection[str]) -> list[str]:
    """The probes whose time has come and that are not running already, in config order."""
    return [name for name, due in next_due.items() if due <= now and name not in running]
