"""Alerts: rules evaluated inside `serve`, notifications to a real HTTP webhook receiver, exactly one
firing and one resolved per incident, delivery after the receiver comes back (and after a restart),
and the state machine and configuration on their own."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from collector.config import ConfigError, load_config
from collector.feedback.agreement_stats import Confusion, cohen_kappa
from collector.monitoring.alerts import AlertSpec, Observation, condition_text, observe, step
from collector.monitoring.config import AlertRule, MonitoringConfig
from collector.schema.tables import ANNOTATIONS
from collector.schema.windows import utc_now
from collector.service import BackgroundService, Service
from collector.store.base import Store
from collector.store.duckdb_rows import insert_rows
from collector.store.duckdb_store import DuckDBStore
from tests.support.helpers import free_port, make_config, metric, run_ragpulse, seed_scores, sql, wait_for
from tests.support.openai_stub import OpenAIStub, RecordedRequest, always_pass, passing_verdict


class WebhookReceiver:
    """A real HTTP server that records the JSON bodies POSTed to it (start and stop at will, on
    one port, to play a webhook that goes down and comes back)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.bodies: list[dict[str, Any]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> None:
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    hook = WebhookReceiver()
    hook.start()
    yield hook
    hook.stop()


def _monitoring(*hooks: WebhookReceiver, **rule: Any) -> dict[str, Any]:
    alert = {"name": "recall-drop", "score": "retrieval.recall@5", "min": 0.8, "window": 600, **rule}
    alert["notify"] = [f"hook{i}" for i in range(len(hooks))] if "notify" not in rule else rule["notify"]
    return {
        "evaluate_every": 0.2,
        "retry_initial": 0.2,
        "retry_max": 0.5,
        "webhooks": [
            {"name": f"hook{i}", "url": hook.url, "format": "slack" if i else "json"}
            for i, hook in enumerate(hooks)
        ],
        "alerts": [alert],
    }


def _seed(
    service: Service, values: list[float], name: str = "retrieval.recall@5", service_name: str = "shop-bot"
) -> None:
    assert service.store is not None
    now = utc_now().replace(second=0, microsecond=0)
    offset = len(sql(service, "SELECT trace_id FROM scores"))
    seed_scores(
        service.store,
        [now] * len(values),
        [name] * len(values),
        values,
        service_name,
        trace_ids=[f"{offset + i:032x}" for i in range(len(values))],
    )


def test_one_firing_and_one_resolved_per_incident(tmp_path: Path, receiver: WebhookReceiver) -> None:
    slack = WebhookReceiver()
    slack.start()
    try:
        config = make_config(tmp_path, monitoring=_monitoring(receiver, slack))
        with BackgroundService(config) as service:
            _seed(service, [0.2] * 30)  # mean 0.2 < 0.8 over 30 scores
            wait_for(lambda: len(receiver.bodies) == 1 and len(slack.bodies) == 1, timeout=15, what="firing")
            # It keeps firing, but says so once (re-notify is an hour away).
            wait_for(lambda: metric(service, "ragpulse_alert_evaluations_total") >= 10, timeout=15)
            assert len(receiver.bodies) == 1
            _seed(service, [1.0] * 300)  # mean (6 + 300) / 330 = 0.93
            wait_for(
                lambda: len(receiver.bodies) == 2 and len(slack.bodies) == 2, timeout=15, what="resolved"
            )
            wait_for(lambda: metric(service, "ragpulse_alert_evaluations_total") >= 20, timeout=15)
            events = sql(service, "SELECT state, value, n FROM alert_events ORDER BY time")
            alerts = sql(service, "SELECT state, started_at, resolved_at FROM alerts")
            delivered = sql(
                service, "SELECT count(*) AS n FROM alert_notifications WHERE delivered_at IS NOT NULL"
            )
            assert (
                metric(service, "ragpulse_alert_notifications_total", webhook="hook0", outcome="delivered")
                == 2
            )
    finally:
        slack.stop()
    firing, resolved = receiver.bodies
    assert (firing["alert"], firing["state"], firing["score"], firing["service"]) == (
        "recall-drop",
        "firing",
        "retrieval.recall@5",
        None,
    )
    assert firing["value"] == pytest.approx(0.2) and firing["n"] == 30 and firing["window"] == 600
    assert firing["started_at"] is not None and "[FIRING] recall-drop" in firing["message"]
    assert resolved["state"] == "resolved" and resolved["value"] == pytest.approx(306 / 330)
    assert resolved["started_at"] == firing["started_at"]
    assert slack.bodies[0]["text"].startswith(":rotating_light: [FIRING] recall-drop")
    assert "[RESOLVED] recall-drop" in slack.bodies[1]["text"]
    assert len(receiver.bodies) == 2  # nothing more came
    assert [(e["state"], e["n"]) for e in events] == [("firing", 30), ("resolved", 330)]
    assert alerts[0]["state"] == "ok" and alerts[0]["resolved_at"] is not None
    assert delivered[0]["n"] == 4  # two events, two webhooks


def test_a_notification_waits_for_the_webhook_to_come_back_even_across_a_restart(tmp_path: Path) -> None:
    down = WebhookReceiver()  # not started: connection refused
    config = make_config(tmp_path, monitoring=_monitoring(down))
    with BackgroundService(config) as service:
        _seed(service, [0.1] * 25)
        wait_for(
            lambda: (
                metric(service, "ragpulse_alert_notifications_total", webhook="hook0", outcome="failed") >= 2
            ),
            timeout=15,
            what="failed deliveries",
        )
        assert metric(service, "ragpulse_alert_notifications_pending") == 1
        (pending,) = sql(service, "SELECT attempts, last_error FROM alert_notifications")
        assert pending["attempts"] >= 2 and "Connect" in pending["last_error"]
    # The service stops with the notification undelivered; the webhook comes back; a new run sends it.
    down.start()
    try:
        with BackgroundService(config) as service:
            wait_for(lambda: len(down.bodies) >= 1, timeout=15, what="the delivery after the restart")
            wait_for(lambda: metric(service, "ragpulse_alert_evaluations_total") >= 5, timeout=15)
            assert metric(service, "ragpulse_alert_notifications_pending") == 0
            events = sql(service, "SELECT state FROM alert_events")
        assert [b["state"] for b in down.bodies] == ["firing"]  # once, and no second firing after the restart
        assert [e["state"] for e in events] == ["firing"]
    finally:
        down.stop()


def test_regression_alerts_fire_per_service(tmp_path: Path, receiver: WebhookReceiver) -> None:
    """A regression rule without a service watches each service apart: only the one that dropped fires."""
    config = make_config(
        tmp_path,
        monitoring=_monitoring(
            receiver,
            name="faithfulness-regression",
            score="faithfulness",
            min=None,
            regression={"baseline": 86400},
        ),
    )
    with BackgroundService(config) as service:
        assert service.store is not None
        now = utc_now().replace(second=0, microsecond=0)
        yesterday = now - timedelta(days=1)
        values = [1.0] * 40 + [0.0] * 5
        for name, recent in (("good-bot", values), ("bad-bot", [1.0] * 15 + [0.0] * 30)):
            _seed_at(service.store, yesterday, "faithfulness", values, name)
            _seed_at(service.store, now, "faithfulness", recent, name)
        wait_for(lambda: len(receiver.bodies) >= 1, timeout=15, what="the regression alert")
        wait_for(lambda: metric(service, "ragpulse_alert_evaluations_total") >= 5, timeout=15)
        states = {
            r["service_name"]: r["state"] for r in sql(service, "SELECT service_name, state FROM alerts")
        }
    assert states == {"good-bot": "ok", "bad-bot": "firing"}
    assert [(b["service"], b["state"]) for b in receiver.bodies] == [("bad-bot", "firing")]


def _seed_at(store: Store, bucket: datetime, name: str, values: list[float], service_name: str) -> None:
    prefix = f"{abs(hash((bucket, service_name))) % 10**8:08d}"
    ids = [f"{prefix}{i:024x}" for i in range(len(values))]
    seed_scores(store, [bucket] * len(values), [name] * len(values), values, service_name, trace_ids=ids)


# --------------------------------------------------------------------------- the state machine alone

RULE = AlertSpec.of(AlertRule(name="r", score="faithfulness", min=0.9, window=600))
T0 = datetime(2026, 12, 1, 12, 0)


def _seen(status: str, value: float | None = 0.5) -> Observation:
    return Observation(None, status, value, 40, "faithfulness mean")  # type: ignore[arg-type]


def test_states_fire_remind_and_resolve() -> None:
    state, event = step(RULE, None, _seen("ok", 0.95), T0, 3600)
    assert state is not None and state.state == "ok" and event is None
    state, event = step(RULE, state, _seen("firing"), T0 + timedelta(minutes=1), 3600)
    assert state is not None and event is not None and (event.state, event.repeat) == ("firing", False)
    started = state.started_at
    state, event = step(RULE, state, _seen("firing"), T0 + timedelta(minutes=30), 3600)
    assert event is None  # still firing, reminder not due
    state, event = step(RULE, state, _seen("firing"), T0 + timedelta(minutes=62), 3600)
    assert state is not None and event is not None and event.repeat and event.started_at == started
    # Too little data neither resolves nor fires.
    state, event = step(RULE, state, _seen("insufficient", None), T0 + timedelta(minutes=63), 3600)
    assert state is not None and state.state == "firing" and event is None
    state, event = step(RULE, state, _seen("ok", 0.95), T0 + timedelta(minutes=64), 3600)
    assert state is not None and event is not None and event.state == "resolved" and state.state == "ok"
    assert "firing since 2026-12-01 12:01:00 UTC" in event.message
    # Without reminders, a long incident says so once.
    state, event = step(RULE, state, _seen("firing"), T0 + timedelta(hours=2), 0)
    assert event is not None
    assert step(RULE, state, _seen("firing"), T0 + timedelta(days=2), 0)[1] is None


@pytest.mark.parametrize(
    ("alert", "message"),
    [
        ({"name": "a", "score": "faithfulness", "window": 60}, "exactly one condition"),
        ({"name": "a", "score": "faithfulness", "min": 0.9, "max_error_rate": 0.1}, "exactly one condition"),
        ({"name": "a", "min": 0.9}, "needs a score"),
        (
            {"name": "a", "score": "faithfulness", "min": 0.9, "notify": ["nobody"]},
            "unknown webhook(s): nobody",
        ),
        ({"name": "a", "score": "faithfulness", "min": 1.5}, "monitoring.alerts.0.min"),
        ({"name": "a", "min_agreement": 0.6}, "needs a score"),
        (
            {"name": "a", "score": "faithfulness", "min_agreement": 0.6, "by": "category"},
            "no probe, slice or by",
        ),
        ({"name": "a", "score": "faithfulness", "min_agreement": -1.5}, "monitoring.alerts.0.min_agreement"),
    ],
)
def test_bad_alert_config_is_refused_with_its_path(
    tmp_path: Path, alert: dict[str, Any], message: str
) -> None:
    path = tmp_path / "ragpulse.yaml"
    path.write_text(json.dumps({"monitoring": {"alerts": [alert]}}))
    with pytest.raises(ConfigError, match="monitoring") as raised:
        load_config(path, environ={})
    assert message in str(raised.value)


# --------------------------------------------------------------------------- judge drift canaries

CANARY_CASES = {
    "name": "canaries",
    "cases": [
        {
            "name": f"refund-{i}",
            "question": "How long do I have to ask for a refund?",
            "contexts": [
                {"id": "refund-window", "text": f"You can request a refund within {days} days of delivery."}
            ],
            "answer": f"You can request a refund within {days} days of delivery.",
            "verdicts": {"faithfulness": "pass"},
        }
        for i, days in enumerate((14, 30, 45, 60))
    ],
}


def test_a_judge_that_starts_judging_wrongly_raises_the_drift_alerts_once(
    tmp_path: Path, receiver: WebhookReceiver
) -> None:
    """The canaries re-judge 4 known cases every 0.3 s. The judge answers right, then (same model
    name) starts calling every claim unsupported: accuracy drops to 0 and every verdict shifts.
    Each drift alert fires once, however many runs follow; each run is in `canary_runs`."""
    wrong = threading.Event()

    def respond(request: RecordedRequest) -> str:
        messages = request.json["messages"]
        verdict = passing_verdict(messages[0]["content"], messages[-1]["content"])
        if wrong.is_set() and "claims" in verdict:
            verdict["claims"] = [{**claim, "verdict": "unsupported"} for claim in verdict["claims"]]
        return json.dumps(verdict)

    cases = tmp_path / "canaries.yaml"
    cases.write_text(json.dumps(CANARY_CASES))
    with OpenAIStub(responder=respond) as judge:
        monitoring = {
            "webhooks": [{"name": "ops", "url": receiver.url}],
            "canaries": {
                "cases": str(cases),
                "every": 0.3,
                "sample": 4,
                "min_accuracy": 0.75,
                "notify": ["ops"],
            },
        }
        judge_settings = {
            "base_url": judge.base_url,
            "model": "judge-test",
            "api_key": "test",
            "max_retries": 0,
        }
        config = make_config(tmp_path, monitoring=monitoring, judge=judge_settings)
        with BackgroundService(config) as service:
            wait_for(
                lambda: metric(service, "ragpulse_judge_canary_runs_total", status="done") >= 3, timeout=20
            )
            assert metric(service, "ragpulse_judge_canary_accuracy") == 1.0
            assert receiver.bodies == []
            wrong.set()
            wait_for(lambda: len(receiver.bodies) >= 2, timeout=20, what="the drift alerts")
            settled = metric(service, "ragpulse_judge_canary_runs_total", status="done") + 4
            wait_for(
                lambda: metric(service, "ragpulse_judge_canary_runs_total", status="done") >= settled,
                timeout=20,
            )
            runs = sql(
                service,
                "SELECT status, pairs, correct, accuracy, shift, verdicts FROM canary_runs "
                "ORDER BY started_at",
            )
    fired = sorted((b["alert"], b["state"]) for b in receiver.bodies)
    assert fired == [("judge-canary-accuracy", "firing"), ("judge-canary-shift", "firing")]
    accuracy = next(b for b in receiver.bodies if b["alert"] == "judge-canary-accuracy")
    assert accuracy["value"] == 0.0 and accuracy["n"] == 4
    first, last = runs[0], runs[-1]
    assert (first["status"], first["pairs"], first["correct"], first["accuracy"], first["shift"]) == (
        "done",
        4,
        4,
        1.0,
        None,
    )
    assert (last["correct"], last["accuracy"], last["shift"]) == (0, 0.0, 1.0)
    assert last["verdicts"] == {"faithfulness": {"pass": 0, "fail": 4, "error": 0}}
    # Every canary call went to the judge (4 per run), and nothing else did.
    assert len(judge.chat_requests) >= 4 * len(runs)


def test_canaries_without_a_judge_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "ragpulse.yaml"
    path.write_text(json.dumps({"monitoring": {"canaries": {"cases": "cases.yaml"}}}))
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    assert "monitoring.canaries re-judges calibration cases: it needs judge.model" in str(raised.value)


def test_canary_calls_count_against_the_judge_budget(tmp_path: Path) -> None:
    """With 8 judge calls a minute, two runs of 4 calls go through; the next ones are recorded as
    throttled, without a judge call."""
    cases = tmp_path / "canaries.yaml"
    cases.write_text(json.dumps(CANARY_CASES))

    with OpenAIStub(responder=always_pass) as judge:
        config = make_config(
            tmp_path,
            monitoring={"canaries": {"cases": str(cases), "every": 0.2, "sample": 4}},
            judge={"base_url": judge.base_url, "model": "judge-test", "api_key": "test", "max_retries": 0},
            sampling={"budget": {"judge_calls_per_minute": 8}},
        )
        with BackgroundService(config) as service:
            throttled = lambda: metric(service, "ragpulse_judge_canary_runs_total", status="throttled")  # noqa: E731
            wait_for(lambda: throttled() >= 3, timeout=20, what="throttled canary runs")
            statuses = [
                r["status"] for r in sql(service, "SELECT status FROM canary_runs ORDER BY started_at")
            ]
        calls = len(judge.chat_requests)
    assert statuses[:2] == ["done", "done"] and set(statuses[2:]) == {"throttled"}
    # The canaries' two runs, and the pre-run check of the online judge (a judge model is set, so the
    # default evaluators include the judge ones, whose calls come only with traces).
    assert calls == 8 + 1


def test_an_unreadable_canary_file_stops_serve_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "ragpulse.yaml"
    canaries = {"cases": "missing.yaml"}
    config.write_text(
        json.dumps(
            {"judge": {"model": "m", "base_url": "http://127.0.0.1:9"}, "monitoring": {"canaries": canaries}}
        )
    )
    result = run_ragpulse(
        "serve",
        "--db",
        str(tmp_path / "x.duckdb"),
        "--grpc-port",
        "0",
        "--http-port",
        "0",
        cwd=tmp_path,
        timeout=60,
    )
    assert result.returncode == 1
    assert "Error: monitoring.canaries.cases: missing.yaml: cannot read" in result.stderr
    assert "Traceback" not in result.stderr and "JUDGE IS NOT ANSWERING" not in result.stderr


def test_a_webhook_that_keeps_failing_neither_crashes_delivery_nor_starves_the_others(
    tmp_path: Path, receiver: WebhookReceiver
) -> None:
    """A notification already tried 2,000 times (the doubling wait would overflow a float) to a webhook
    whose header cannot even be sent: the attempt is recorded with its error and the longest wait,
    and the next webhook's notification goes out in the same pass."""
    from collector.exporters.webhooks import WebhookNotifier
    from collector.monitoring.config import MonitoringConfig
    from collector.schema.tables import ALERT_EVENTS, ALERT_NOTIFICATIONS, ALERTS
    from collector.telemetry import Metrics

    config = MonitoringConfig.model_validate(
        {
            "retry_max": 300,
            "webhooks": [
                {"name": "a-broken", "url": receiver.url, "headers": {"X-Team": "équipe €"}},
                {"name": "b-fine", "url": receiver.url},
            ],
        }
    )
    now = utc_now()
    rows = {
        "event_id": ["e1", "e2"],
        "webhook": ["a-broken", "b-fine"],
        "payload": ['{"n": 1}', '{"n": 2}'],
        "created_at": [now, now],
        "attempts": [2000, 0],
        "next_attempt_at": [now, now],
    }
    with DuckDBStore(tmp_path / "hooks.duckdb") as store:
        no_states, no_events = ALERTS.arrow_schema().empty_table(), ALERT_EVENTS.arrow_schema().empty_table()
        store.write_alerts(no_states, no_events, ALERT_NOTIFICATIONS.arrow_table(rows, 2))
        notifier = WebhookNotifier(store, config, Metrics())
        assert notifier.deliver_once() == 1
        left = store.pending_notifications().to_pylist()
    assert receiver.bodies == [{"n": 2}]
    (broken,) = left
    assert broken["attempts"] == 2001 and "UnicodeEncodeError" in broken["last_error"]
    assert (broken["next_attempt_at"] - now).total_seconds() == pytest.approx(300, abs=5)


@pytest.mark.parametrize(
    ("monitoring", "message"),
    [
        (
            {"alerts": [{"name": "a", "score": "f", "regression": {"baseline": 600}, "window": 3600}]},
            "regression.baseline must be at least the window",
        ),
        (
            {
                "alerts": [{"name": "judge-canary-accuracy", "score": "f", "min": 0.5}],
                "canaries": {"cases": "c.yaml"},
            },
            "alert names must be unique; repeated: judge-canary-accuracy",
        ),
    ],
)
def test_overlapping_windows_and_clashing_alert_names_are_refused(
    tmp_path: Path, monitoring: dict[str, Any], message: str
) -> None:
    path = tmp_path / "ragpulse.yaml"
    path.write_text(json.dumps({"judge": {"model": "m"}, "monitoring": monitoring}))
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    assert message in str(raised.value)


# --------------------------------------------------------------------------- agreement with reviewers


def _verdicts(store: DuckDBStore, pairs: list[tuple[str, str]], queue: str | None = "random") -> None:
    """Reviewers' verdicts (judge status, human status) on faithfulness scores of judge-4o, given now."""
    now = int(utc_now().timestamp() * 1e6)
    rows = {
        "annotation_id": [uuid.uuid4().hex for _ in pairs],
        "trace_id": [f"{i:032x}" for i in range(len(pairs))],
        "name": ["faithfulness"] * len(pairs),
        "author": ["ana"] * len(pairs),
        "human_status": [human for _, human in pairs],
        "queue": [queue] * len(pairs),
        "created_at": [now] * len(pairs),
        "score_status": [judge for judge, _ in pairs],
        "score_evaluator": ["judge"] * len(pairs),
        "judge_model": ["judge-4o"] * len(pairs),
        "prompt_version": ["faithfulness/4"] * len(pairs),
    }
    with store._cursor() as con:
        con.execute("DELETE FROM annotations")
        insert_rows(con, "annotations", ANNOTATIONS.arrow_table(rows, len(pairs)))


def test_min_agreement_fires_when_the_judge_stops_agreeing_with_reviewers(tmp_path: Path) -> None:
    """The alert reads the verdicts through the store's read-only SQL, as `serve` does: ok while κ
    holds, firing below it, insufficient on too few verdicts or those outside the random queue."""
    rule = AlertRule(
        name="judge-agrees", score="faithfulness", min_agreement=0.6, window=86400, min_samples=10
    )
    monitoring = MonitoringConfig()
    with DuckDBStore(tmp_path / "store.duckdb") as store:

        def query(text: str) -> list[dict[str, Any]]:
            return store.query(text, 10_000, 30).records()

        def seen() -> Observation:
            (observation,) = observe(rule, query, utc_now(), monitoring)
            return observation

        agreeing = [("pass", "pass")] * 12 + [("fail", "fail")] * 8
        _verdicts(store, agreeing)
        first = seen()
        assert (first.status, first.value, first.n) == ("ok", 1.0, 20)
        assert "judge-4o faithfulness/4" in first.detail
        # Half the judge's fails are passes to people, and people fail a quarter of its passes.
        drifting = (
            [("pass", "pass")] * 9 + [("pass", "fail")] * 3 + [("fail", "fail")] * 4 + [("fail", "pass")] * 4
        )
        _verdicts(store, drifting)
        expected = cohen_kappa(Confusion(9, 3, 4, 4))
        second = seen()
        assert (second.status, second.n) == ("firing", 20) and second.value == pytest.approx(expected.kappa)
        assert expected.kappa is not None and expected.kappa < 0.6
        _verdicts(store, agreeing[:6])
        assert seen().status == "insufficient"
        _verdicts(store, agreeing, queue="contested")  # chosen by people: out of the estimate
        assert seen().status == "insufficient"
    assert condition_text(rule) == "faithfulness kappa with reviewers >= 0.6"
    # Without a window: 30 days of verdicts, not the ten minutes of the other conditions.
    assert AlertRule(name="a", score="faithfulness", min_agreement=0.6).window == 30 * 86400
