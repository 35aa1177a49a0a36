"""Webhook notifier: delivers alert notifications (`alert_notifications`) to `monitoring.webhooks`.

A notification is written in the transaction that records its alert event, and is marked delivered
only once the webhook answered 2xx. A failed delivery is retried after `retry_initial` seconds,
doubling up to `retry_max`, for as long as it takes: none is dropped, and pending ones are counted in
`/metrics` (`ragpulse_alert_notifications_pending`). Per webhook, notifications go out in the order
they were made, so a `resolved` never overtakes its `firing`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import httpx
import orjson

from collector.background import BackgroundWorker
from collector.monitoring.config import MonitoringConfig, WebhookConfig
from collector.schema.windows import utc_now
from collector.store.base import AlertLog
from collector.store.health import log_failure
from collector.telemetry import Metrics

log = logging.getLogger(__name__)
# How often the outbox is looked at when nothing wakes the notifier.
POLL_SECONDS = 1.0


class WebhookNotifier(BackgroundWorker):
    """Delivers pending notifications on its own thread; `deliver_once` is one pass."""

    def __init__(
        self,
        store: AlertLog,
        config: MonitoringConfig,
        metrics: Metrics,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._store = store
        self._config = config
        self._metrics = metrics
        self._clock = clock
        self._hooks = {hook.name: hook for hook in config.webhooks}
        self._client = httpx.Client(follow_redirects=False)
        self._wake = threading.Event()
        super().__init__("ragpulse-webhooks")

    def wake(self) -> None:
        """New notifications were written: look now rather than at the next poll."""
        self._wake.set()

    def stop(self, deadline: float | None = None) -> None:
        """Stop after the delivery in progress; what is pending is delivered after the next start."""
        self._wake.set()
        super().stop(deadline)
        self._client.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                if self._store.is_leader():  # one replica delivers for all
                    self.deliver_once()
            except Exception:
                log_failure(log, self._store, "webhooks", "delivering alert notifications failed; retrying")
            self._wake.wait(POLL_SECONDS)
            self._wake.clear()

    def deliver_once(self) -> int:
        """Try every due notification, oldest first per webhook, stopping at a webhook's first
        failure. Returns how many were delivered."""
        pending = self._store.pending_notifications().to_pylist()
        self._metrics.alert_notifications_pending.set(len(pending))
        delivered = 0
        blocked: set[str] = set()
        for row in pending:
            webhook = row["webhook"]
            if webhook in blocked or self._stopping.is_set():
                continue
            now = self._clock()
            if row["next_attempt_at"] is not None and row["next_attempt_at"] > now:
                blocked.add(webhook)  # keep the order: later ones wait for this one
                continue
            error = self._send(self._hooks.get(webhook), row["payload"])
            attempts = int(row["attempts"] or 0) + 1
            if error is None:
                self._store.update_notification(row["event_id"], webhook, attempts, self._clock(), None, None)
                self._metrics.alert_notifications.labels(webhook, "delivered").inc()
                delivered += 1
                continue
            # Doubling, capped (the exponent too: a float overflows past 2 ** 1023).
            wait = min(self._config.retry_max, self._config.retry_initial * 2 ** min(attempts - 1, 30))
            self._store.update_notification(
                row["event_id"], webhook, attempts, None, now + timedelta(seconds=wait), error
            )
            self._metrics.alert_notifications.labels(webhook, "failed").inc()
            log.warning(
                "webhook %s: notification not delivered (%s); retrying in %.0f s", webhook, error, wait
            )
            blocked.add(webhook)
        self._metrics.alert_notifications_pending.set(len(pending) - delivered)
        return delivered

    def _send(self, hook: WebhookConfig | None, payload: Any) -> str | None:
        """POST the payload; None when delivered, else why not."""
        if hook is None:
            return "the webhook is no longer configured"
        body = payload if isinstance(payload, str) else orjson.dumps(payload).decode()
        headers = {"Content-Type": "application/json", **hook.headers}
        try:
            response = self._client.post(hook.url, content=body, headers=headers, timeout=hook.timeout)
        except Exception as exc:  # any failure is a failed attempt, recorded and retried, never a crash
            return f"{type(exc).__name__}: {exc}"
        if 200 <= response.status_code < 300:
            return None
        return f"HTTP {response.status_code}"
