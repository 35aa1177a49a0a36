"""The alert evaluator inside `serve`: every `monitoring.evaluate_every` seconds, each rule of
`monitoring.alerts` is observed over the store, and state changes are written with their events and
one notification per event and webhook, in one transaction. The webhook notifier
(`collector.exporters.webhooks`) delivers the notifications from there, so a notification survives a
webhook outage and a restart."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

import orjson

from collector.background import BackgroundWorker
from collector.monitoring.alerts import (
    AlertEvent,
    AlertSpec,
    AlertState,
    Observation,
    event_payload,
    observe,
    slack_payload,
    step,
)
from collector.monitoring.config import MonitoringConfig
from collector.schema.tables import ALERT_EVENTS, ALERT_NOTIFICATIONS, ALERTS
from collector.schema.windows import utc_now
from collector.store.base import AlertLog
from collector.store.health import log_failure
from collector.telemetry import Metrics

log = logging.getLogger(__name__)
# Rows an alert's query may return: one per score name (and service, for regressions).
_MAX_ROWS = 100_000


class AlertBook:
    """Records what alerts saw: the next state of each, its events, and one notification per event
    and webhook, in one transaction; then wakes the notifier. Shared by the rule evaluator and the
    judge canaries, so both follow the same state machine."""

    def __init__(
        self,
        store: AlertLog,
        config: MonitoringConfig,
        metrics: Metrics,
        on_notifications: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._config = config
        self._metrics = metrics
        self._hooks = {hook.name: hook for hook in config.webhooks}
        self._on_notifications = on_notifications
        self._lock = threading.Lock()  # read-then-write of `alerts`: one writer at a time

    def record(self, seen: Sequence[tuple[AlertSpec, Observation]], now: datetime) -> list[AlertEvent]:
        """Step every (alert, observation) from its stored state; write; return the events."""
        with self._lock:
            return self._record(seen, now)

    def _record(self, seen: Sequence[tuple[AlertSpec, Observation]], now: datetime) -> list[AlertEvent]:
        previous = {
            (r["alert"], r["service_name"], r["slice"]): _state(r)
            for r in self._store.read_alerts().to_pylist()
        }
        states: list[AlertState] = []
        events: list[AlertEvent] = []
        notifications: list[dict[str, Any]] = []
        for spec, observation in seen:
            key = (spec.name, observation.service, observation.slice)
            state, event = step(spec, previous.get(key), observation, now, self._config.renotify_every)
            if state is not None:
                states.append(state)
                self._metrics.alerts_firing.labels(
                    spec.name, observation.service or "", observation.slice or ""
                ).set(state.state == "firing")
            if event is None:
                continue
            events.append(event)
            for name in spec.notify:
                payload = (
                    slack_payload(event) if self._hooks[name].format == "slack" else event_payload(event)
                )
                notifications.append(
                    {
                        "event_id": event.event_id,
                        "webhook": name,
                        "payload": orjson.dumps(payload).decode(),
                        "created_at": now,
                        "attempts": 0,
                        "next_attempt_at": now,
                    }
                )
        self._store.write_alerts(
            ALERTS.rows_table([asdict(s) for s in states]),
            ALERT_EVENTS.rows_table([asdict(e) for e in events]),
            ALERT_NOTIFICATIONS.rows_table(notifications),
        )
        # Told once stored: a write that fails (a full disk) leaves the state as it was, and the
        # next round finds the same event again; logged before, it would be logged twice.
        for event in events:
            self._metrics.alert_events.labels(event.state).inc()
            log.warning("alert: %s", event.message)
        if notifications and self._on_notifications is not None:
            self._on_notifications()
        return events


class AlertEvaluator(BackgroundWorker):
    """Evaluates `monitoring.alerts` on its own thread; `evaluate_once` is one round."""

    def __init__(
        self,
        store: AlertLog,
        config: MonitoringConfig,
        metrics: Metrics,
        book: AlertBook,
        query_timeout: float,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._store = store
        self._config = config
        self._metrics = metrics
        self._book = book
        self._timeout = query_timeout
        self._clock = clock
        self._specs = [(rule, AlertSpec.of(rule)) for rule in config.alerts]
        super().__init__("ragpulse-alerts")

    def _run(self) -> None:
        self._run_every(
            self._config.evaluate_every,
            # With several replicas on one lake, the leader alone evaluates (one event per change).
            lambda: self._store.is_leader() and self.evaluate_once(),
            log,
            "evaluating alerts failed; retrying at the next round",
            self._metrics.alert_evaluation_errors.inc,
            absorb=lambda exc: self._store.health.absorb(exc, "alerts"),
        )

    def _query(self, sql: str) -> list[dict[str, Any]]:
        return self._store.query(sql, _MAX_ROWS, self._timeout).records()

    def evaluate_once(self) -> list[AlertEvent]:
        """Observe every rule and record what changed; return the events."""
        now = self._clock()
        seen: list[tuple[AlertSpec, Observation]] = []
        for rule, spec in self._specs:
            try:
                seen.extend((spec, o) for o in observe(rule, self._query, now, self._config))
            except Exception:
                self._metrics.alert_evaluation_errors.inc()
                log_failure(log, self._store, "alerts", "alert %s could not be evaluated", rule.name)
        events = self._book.record(seen, now)
        self._metrics.alert_evaluations.inc()
        return events


def _state(row: dict[str, Any]) -> AlertState:
    return AlertState(**{name: row[name] for name in ALERTS.column_names})
