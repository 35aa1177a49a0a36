"""Alert rules over stored scores: what a rule observes, and how an alert's state moves.

Pure logic: `observe` runs a rule's condition through a `Query` (the gates and regression tests of
`check`, so a rule and `ragpulse check` agree on the same data); `step` turns the previous state and
a new observation into the next state and, on a change, an event to notify.

States and events:
- `ok` -> condition met -> `firing`, event `firing`;
- `firing` -> condition still met -> `firing`; a reminder event (`repeat`) every `renotify_every`;
- `firing` -> condition clear (with enough data) -> `ok`, event `resolved`;
- too little data changes nothing: an alert neither fires nor resolves on a handful of scores.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from collector.feedback.agreement import AgreementGate, agreement_report, check_agreement
from collector.monitoring.config import AlertRule, MonitoringConfig
from collector.monitoring.gates import Gate, GateKind, check_gates
from collector.monitoring.regression import Baseline, Comparison, RegressionSettings, compare
from collector.schema.scope import Scope
from collector.schema.windows import Window
from collector.store.reads import Query
from collector.store.reads.monitoring import latest_probe_run_sql
from collector.store.reads.slices import slice_values

ObservationStatus = Literal["firing", "ok", "insufficient"]
_CONDITIONS: tuple[GateKind, ...] = ("min", "min_pass_rate", "max_error_rate")
# A gate that fails is an alert that fires.
_GATE_TO_ALERT: dict[str, ObservationStatus] = {
    "pass": "ok",
    "fail": "firing",
    "insufficient": "insufficient",
}


@dataclass(frozen=True)
class AlertSpec:
    """What an alert's state and messages need from its rule (an `AlertRule`, or a judge canary)."""

    name: str
    severity: str
    score: str | None
    condition: str  # what must hold for the alert to stay quiet, in words
    window: float
    notify: tuple[str, ...] = ()

    @classmethod
    def of(cls, rule: AlertRule) -> AlertSpec:
        return cls(
            rule.name, rule.severity, rule.score, condition_text(rule), rule.window, tuple(rule.notify)
        )


@dataclass(frozen=True)
class Observation:
    """What one evaluation of a rule saw, for one service (None: every service together)."""

    service: str | None
    status: ObservationStatus
    value: float | None
    n: int
    detail: str
    slice: str | None = None  # the slice of a rule with `by` (`category=refunds`)


@dataclass(frozen=True)
class AlertState:
    """A row of `alerts`."""

    alert: str
    service_name: str | None
    state: Literal["ok", "firing"]
    severity: str
    score: str | None
    condition: str
    value: float | None
    n: int
    started_at: datetime | None
    resolved_at: datetime | None
    last_notified_at: datetime | None
    evaluated_at: datetime
    slice: str | None = None


@dataclass(frozen=True)
class AlertEvent:
    """A row of `alert_events`: an alert fired, is still firing (`repeat`), or resolved."""

    event_id: str
    time: datetime
    alert: str
    service_name: str | None
    state: Literal["firing", "resolved"]
    repeat: bool
    severity: str
    score: str | None
    condition: str
    value: float | None
    n: int
    window_seconds: float
    started_at: datetime | None
    message: str
    slice: str | None = None


def gate_of(rule: AlertRule) -> Gate | None:
    """The gate a threshold rule checks (None for a regression rule)."""
    for kind in _CONDITIONS:
        threshold = getattr(rule, kind)
        if threshold is not None:
            return Gate(kind, rule.score, threshold)
    return None


def condition_text(rule: AlertRule) -> str:
    """The rule's condition in words: what must hold for the alert to stay quiet."""
    gate = gate_of(rule)
    if gate is not None:
        return gate.describe()
    if rule.max_unanswered is not None:
        return f"at most {rule.max_unanswered} unanswered request(s) in a run of probe {rule.probe}"
    if rule.max_missing_traces is not None:
        return f"at most {rule.max_missing_traces} request(s) without a trace in a run of probe {rule.probe}"
    if rule.min_agreement is not None:
        return f"{rule.score} kappa with reviewers >= {rule.min_agreement:g}"
    assert rule.regression is not None
    return f"{rule.score} no lower than {_seconds(rule.regression.baseline)} earlier"


def scope_of(rule: AlertRule) -> Scope:
    """The scores a rule watches: its service, probe and slice."""
    return Scope.of(rule.service, rule.probe, dict(rule.slice))


def observe(rule: AlertRule, query: Query, now: datetime, monitoring: MonitoringConfig) -> list[Observation]:
    """Evaluate the rule's condition over the window ending now: one observation for the rule's
    scope, or one per slice (`by`), or per service (a regression)."""
    if rule.max_unanswered is not None or rule.max_missing_traces is not None:
        return [_probe_run_observation(rule, query)]
    if rule.min_agreement is not None:
        return [_agreement_observation(rule, query, now, rule.min_samples or monitoring.min_samples)]
    # The whole minutes covering the last `window` seconds, as `check --since` and the dashboard.
    window = Window.covering(now, rule.window)
    scope = scope_of(rule)
    if rule.by is None:
        return _observe_scope(rule, query, window, scope, monitoring)
    return [
        replace(seen, slice=sliced.slice_label)
        for value in slice_values(query, window, scope, rule.by)
        for sliced in [scope.with_slice(rule.by, value)]
        for seen in _observe_scope(rule, query, window, sliced, monitoring)
    ]


def _observe_scope(
    rule: AlertRule, query: Query, window: Window, scope: Scope, monitoring: MonitoringConfig
) -> list[Observation]:
    samples = rule.min_samples or monitoring.min_samples
    gate = gate_of(rule)
    if gate is not None:
        (result,) = check_gates(query, [gate], window, scope, samples).results
        status = _GATE_TO_ALERT[result.status]
        value = "-" if result.value is None else f"{result.value:.3f}"
        detail = f"{gate.score or 'all scores'} {gate.figure} {value} (n={result.n})"
        return [Observation(rule.service, status, result.value, result.n, detail)]
    assert rule.regression is not None and rule.score is not None
    settings = RegressionSettings(
        alpha=rule.regression.alpha or monitoring.alpha,
        min_effect=monitoring.min_effect
        if rule.regression.min_effect is None
        else rule.regression.min_effect,
        min_samples=samples,
    )
    baseline = Baseline(shift=rule.regression.baseline)
    comparisons = compare(query, window, baseline, scope, settings, names=[rule.score])
    by_service: dict[str | None, list[Comparison]] = {}
    for comparison in comparisons:
        by_service.setdefault(comparison.service, []).append(comparison)
    return [_regression_observation(service, found) for service, found in by_service.items()]


def _regression_observation(service: str | None, comparisons: list[Comparison]) -> Observation:
    regressed = [c for c in comparisons if c.status == "regressed"]
    shown = regressed[0] if regressed else comparisons[0]
    detail = (
        f"{shown.score} {shown.metric.replace('_', ' ')} {_number(shown.recent)} "
        f"against {_number(shown.baseline)} (n={shown.n_recent} / {shown.n_baseline}"
        + ("" if shown.p_value is None else f", p={shown.p_value:.2g}")
        + ")"
    )
    if regressed:
        status: ObservationStatus = "firing"
    elif any(c.status == "ok" for c in comparisons):
        status = "ok"
    else:
        status = "insufficient"
    return Observation(service, status, shown.recent, shown.n_recent, detail)


def _agreement_observation(rule: AlertRule, query: Query, now: datetime, samples: int) -> Observation:
    """The evaluator's kappa with reviewers over the verdicts given in the window (the gate of
    `check --min-agreement`): firing below the threshold, insufficient on too few verdicts."""
    assert rule.score is not None and rule.min_agreement is not None
    report = agreement_report(query, Window.ending(now, rule.window), rule.service)
    (result,) = check_agreement(report, [AgreementGate(rule.score, rule.min_agreement)], samples)
    kappa = result.get("kappa")
    judge = f"{result.get('model') or 'deterministic'} {result.get('prompt_version') or ''}".strip()
    detail = (
        f"{rule.score} kappa {_number(kappa)} with reviewers (n={result.get('n', 0)}, {judge})"
        if result["reason"] is None
        else f"{rule.score}: {result['reason']}"
    )
    return Observation(rule.service, _GATE_TO_ALERT[result["status"]], kappa, int(result.get("n", 0)), detail)


def _probe_run_observation(rule: AlertRule, query: Query) -> Observation:
    """The probe's latest finished run against the rule's bound (no run yet: insufficient)."""
    assert rule.probe is not None
    rows = query(latest_probe_run_sql(rule.probe))
    if not rows:
        return Observation(None, "insufficient", None, 0, f"no finished run of probe {rule.probe}")
    run = rows[0]
    if rule.max_unanswered is not None:
        count, bound, what = int(run["errors"] or 0), rule.max_unanswered, "unanswered request(s)"
    else:
        assert rule.max_missing_traces is not None
        count, bound, what = (
            int(run["missing_traces"] or 0),
            rule.max_missing_traces,
            "request(s) without a trace",
        )
    detail = f"probe {rule.probe} run {run['run_id']}: {count} {what} of {int(run['cases'] or 0)}"
    status: ObservationStatus = "firing" if count > bound else "ok"
    return Observation(None, status, float(count), int(run["cases"] or 0), detail)


def step(
    spec: AlertSpec,
    previous: AlertState | None,
    seen: Observation,
    now: datetime,
    renotify_every: float,
) -> tuple[AlertState | None, AlertEvent | None]:
    """The next state of one alert and the event to notify, if any. Too little data keeps the
    previous state (None when there is none yet: nothing to record)."""
    if seen.status == "insufficient":
        return (None if previous is None else replace(previous, evaluated_at=now)), None
    firing_before = previous is not None and previous.state == "firing"
    state = AlertState(
        alert=spec.name,
        service_name=seen.service,
        slice=seen.slice,
        state="firing" if seen.status == "firing" else "ok",
        severity=spec.severity,
        score=spec.score,
        condition=spec.condition,
        value=seen.value,
        n=seen.n,
        started_at=previous.started_at if previous is not None else None,
        resolved_at=previous.resolved_at if previous is not None else None,
        last_notified_at=previous.last_notified_at if previous is not None else None,
        evaluated_at=now,
    )
    if seen.status == "firing" and not firing_before:
        state = replace(state, started_at=now, resolved_at=None, last_notified_at=now)
        return state, _event(spec, state, "firing", False, seen, now)
    if seen.status == "firing":
        last = state.last_notified_at or state.started_at or now
        if renotify_every > 0 and now - last >= timedelta(seconds=renotify_every):
            state = replace(state, last_notified_at=now)
            return state, _event(spec, state, "firing", True, seen, now)
        return state, None
    if firing_before:
        state = replace(state, resolved_at=now, last_notified_at=now)
        return state, _event(spec, state, "resolved", False, seen, now)
    return state, None


def _event(
    spec: AlertSpec,
    state: AlertState,
    kind: Literal["firing", "resolved"],
    repeat: bool,
    seen: Observation,
    now: datetime,
) -> AlertEvent:
    scope = f"service {seen.service}" if seen.service else "every service"
    if seen.slice:
        scope += f", slice {seen.slice}"
    if kind == "firing":
        lead = "[FIRING again]" if repeat else "[FIRING]"
        message = f"{lead} {spec.name} ({spec.severity}): {seen.detail}; expected {state.condition}"
    else:
        since = "" if state.started_at is None else f", firing since {state.started_at:%Y-%m-%d %H:%M:%S} UTC"
        message = f"[RESOLVED] {spec.name}: {seen.detail}; {state.condition} holds again{since}"
    message += f"; last {_seconds(spec.window)}, {scope}"
    return AlertEvent(
        event_id=secrets.token_hex(16),
        time=now,
        alert=spec.name,
        service_name=seen.service,
        slice=seen.slice,
        state=kind,
        repeat=repeat,
        severity=spec.severity,
        score=spec.score,
        condition=state.condition,
        value=seen.value,
        n=seen.n,
        window_seconds=spec.window,
        started_at=state.started_at,
        message=message,
    )


def event_payload(event: AlertEvent) -> dict[str, Any]:
    """The generic JSON payload of an event (`format: json`)."""
    return {
        "alert": event.alert,
        "state": event.state,
        "repeat": event.repeat,
        "severity": event.severity,
        "score": event.score,
        "service": event.service_name,
        "slice": event.slice,
        "condition": event.condition,
        "value": event.value,
        "n": event.n,
        "window": event.window_seconds,
        "started_at": _iso(event.started_at),
        "time": _iso(event.time),
        "event_id": event.event_id,
        "message": event.message,
    }


def slack_payload(event: AlertEvent) -> dict[str, Any]:
    """A Slack-compatible payload (`format: slack`): incoming webhooks take `{"text": ...}`."""
    icon = ":white_check_mark:" if event.state == "resolved" else ":rotating_light:"
    return {"text": f"{icon} {event.message}"}


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat() + "Z"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _seconds(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
