"""The `monitoring:` config section: how sure a gate or a regression must be before it speaks, the
alert rules `serve` evaluates, and the webhooks they notify."""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from collector.config_base import Section
from collector.schema.windows import check_window

Severity = Literal["info", "warning", "critical"]


class WebhookConfig(Section):
    name: str = Field(min_length=1)
    url: str = Field(min_length=1)
    # json: ragpulse's own payload; slack: `{"text": ...}`, which Slack, Mattermost and others take.
    format: Literal["json", "slack"] = "json"
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(10.0, gt=0)


class RegressionCondition(Section):
    # The baseline: the same window this many seconds earlier (86400: yesterday, 604800: last week).
    baseline: float = Field(86400.0, gt=0)
    min_effect: float | None = Field(None, ge=0, le=1)  # default: monitoring.min_effect
    alpha: float | None = Field(None, gt=0, lt=1)  # default: monitoring.alpha


# The window of a `min_agreement` alert that gives none: people label slowly.
MIN_AGREEMENT_WINDOW = 30 * 86400.0
PROBE_RUN_CONDITIONS = ("max_unanswered", "max_missing_traces")
ALERT_CONDITIONS = (
    "min",
    "min_pass_rate",
    "max_error_rate",
    "regression",
    "min_agreement",
    *PROBE_RUN_CONDITIONS,
)


class AlertRule(Section):
    """One alert: a score (and service), one condition, a window, and who to notify."""

    name: str = Field(min_length=1)
    score: str | None = None  # None only with max_error_rate: every score together
    service: str | None = None  # None: every service together (regression: each service apart)
    probe: str | None = None  # a probe's traffic (`probes:`) instead of the app's own
    # Only scores of these slices ({dimension: value}); `by`: each value of a dimension apart.
    slice: dict[str, str] = Field(default_factory=dict)
    by: str | None = None
    # The condition, exactly one of:
    min: float | None = Field(None, ge=0, le=1)  # the mean of the score's values
    min_pass_rate: float | None = Field(None, ge=0, le=1)
    max_error_rate: float | None = Field(None, ge=0, le=1)
    regression: RegressionCondition | None = None
    # Cohen's kappa of the score's evaluator with reviewers' verdicts (the random queue's, given in
    # the window: make it days), on its current judge model and prompt version, as `check --min-agreement`.
    min_agreement: float | None = Field(None, ge=-1, le=1)
    # Conditions on the probe's latest finished run (need `probe`): requests the app did not answer,
    # and answered requests whose trace never arrived (the app's tracing is broken).
    max_unanswered: int | None = Field(None, ge=0)
    max_missing_traces: int | None = Field(None, ge=0)
    # Seconds of scores the condition looks at: the whole minutes covering the last `window` seconds
    # (`Window.covering`), so at least a minute.
    window: float = Field(600.0, gt=0)
    min_samples: int | None = Field(None, ge=1)  # default: monitoring.min_samples
    severity: Severity = "warning"
    notify: list[str] = Field(default_factory=list)  # webhook names

    @field_validator("window")
    @classmethod
    def _whole_minutes(cls, window: float) -> float:
        # Refused rather than rounded: a rule that says 8 s but watches a minute or two misleads,
        # and before whole minutes such a rule could never fire.
        return check_window(window)

    @model_validator(mode="before")
    @classmethod
    def _agreement_window(cls, data: Any) -> Any:
        """A `min_agreement` alert that gives no window watches 30 days: ten minutes of verdicts
        (the default window) would never be enough, and the alert would never fire."""
        if isinstance(data, dict) and data.get("min_agreement") is not None and "window" not in data:
            return {**data, "window": MIN_AGREEMENT_WINDOW}
        return data

    @model_validator(mode="after")
    def _one_condition(self) -> Self:
        given = [k for k in ALERT_CONDITIONS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"an alert has exactly one condition of {', '.join(ALERT_CONDITIONS)}; "
                f"got {', '.join(given) or 'none'}"
            )
        if given[0] in PROBE_RUN_CONDITIONS:
            if self.probe is None:
                raise ValueError(f"an alert on {given[0]} watches a probe's runs: it needs probe")
            if self.score or self.service or self.slice or self.by:
                raise ValueError(f"an alert on {given[0]} takes no score, service, slice or by")
            return self
        if self.score is None and given[0] != "max_error_rate":
            raise ValueError(f"an alert on {given[0]} needs a score")
        if given[0] == "min_agreement" and (self.probe or self.slice or self.by):
            raise ValueError(
                "an alert on min_agreement watches reviewers' verdicts: it takes no probe, slice or by"
            )
        if self.regression is not None and self.regression.baseline < self.window:
            raise ValueError("regression.baseline must be at least the window, so the two do not overlap")
        return self


class CanaryConfig(Section):
    """Judge drift canaries: re-judge calibration cases with known verdicts on a schedule."""

    name: str = Field("judge-canary", min_length=1)  # alerts: NAME-accuracy and NAME-shift
    # A calibration file (`ragpulse calibrate`'s format): the shipped examples/calibration/cases.yaml
    # or your own.
    cases: str = Field(min_length=1)
    every: float = Field(3600.0, gt=0)
    # Judge calls per run: the same (case, evaluator) pairs every run, so runs compare like with like.
    sample: int = Field(12, ge=1)
    min_accuracy: float = Field(0.9, ge=0, le=1)
    # The share of verdicts that differ from the first run's on the same pairs (a model updated
    # behind the same name, a provider change) above which the shift alert fires.
    max_shift: float = Field(0.2, ge=0, le=1)
    severity: Severity = "warning"
    notify: list[str] = Field(default_factory=list)


# Slice dimension names become columns of `traces`, `scores` and `score_aggregates`.
DIMENSION_NAME = r"^[a-z][a-z0-9_]{0,62}$"


class DimensionConfig(Section):
    """A slice dimension: a span attribute or a resource attribute whose value cuts the aggregates,
    gates, alerts and dashboard (`category` from `rag.category`, `version` from `service.version`)."""

    name: str = Field(pattern=DIMENSION_NAME)
    attribute: str | None = Field(None, min_length=1)  # a span attribute (the root span's first)
    resource: str | None = Field(None, min_length=1)  # a resource attribute
    # The values kept apart: the most frequent ones; the rest are counted as `other`.
    max_values: int = Field(20, ge=1, le=1000)

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.attribute is None) == (self.resource is None):
            raise ValueError("a dimension reads exactly one of attribute or resource")
        from collector.schema.tables import SCORE_AGGREGATES, SCORES, TRACES

        taken = {*TRACES.column_names, *SCORES.column_names, *SCORE_AGGREGATES.column_names}
        if self.name in taken:
            raise ValueError(
                f"dimension name {self.name!r} is already a column of traces, scores or aggregates"
            )
        return self


class MonitoringConfig(Section):
    # Scores a gate, an alert or a regression test needs in a window before it decides.
    min_samples: int = Field(20, ge=1)
    # Confidence of the intervals `check` prints beside each gate.
    confidence: float = Field(0.95, gt=0, lt=1)
    # Regression tests: the family-wise false-alarm rate of one run (Holm), and the smallest drop
    # (of a mean or a pass rate, in 0..1) worth flagging.
    alpha: float = Field(0.05, gt=0, lt=1)
    min_effect: float = Field(0.05, ge=0, le=1)
    # Alerts, evaluated by `serve` every `evaluate_every` seconds.
    evaluate_every: float = Field(30.0, gt=0)
    # While an alert keeps firing, notify again this often (0: only when it starts and resolves).
    renotify_every: float = Field(3600.0, ge=0)
    webhooks: list[WebhookConfig] = Field(default_factory=list)
    alerts: list[AlertRule] = Field(default_factory=list)
    canaries: CanaryConfig | None = None
    # A failed notification is retried after retry_initial seconds, doubling up to retry_max, until
    # it is delivered: none is dropped (pending ones are counted in /metrics).
    retry_initial: float = Field(2.0, gt=0)
    retry_max: float = Field(300.0, gt=0)
    # Slice dimensions: columns of `traces`, `scores` and `score_aggregates` (`check --by NAME`).
    dimensions: list[DimensionConfig] = Field(default_factory=list)
    # How often each dimension's kept values are ranked again by traffic (seconds).
    dimension_rerank_every: float = Field(3600.0, gt=0)

    @model_validator(mode="after")
    def _names(self) -> Self:
        hooks = [w.name for w in self.webhooks]
        alerts = [a.name for a in self.alerts]
        if self.canaries is not None:
            alerts += [f"{self.canaries.name}-accuracy", f"{self.canaries.name}-shift"]
        dimensions = [d.name for d in self.dimensions]
        for kind, names in (("webhook", hooks), ("alert", alerts), ("dimension", dimensions)):
            repeated = sorted({n for n in names if names.count(n) > 1})
            if repeated:
                raise ValueError(f"{kind} names must be unique; repeated: {', '.join(repeated)}")
        declared = set(dimensions)
        for alert in self.alerts:
            unknown = sorted({*alert.slice, *([alert.by] if alert.by else [])} - declared)
            if unknown:
                raise ValueError(
                    f"alert {alert.name!r} cuts by undeclared dimension(s) {', '.join(unknown)} "
                    "(declare them in monitoring.dimensions)"
                )
        notifying = [(f"alert {a.name!r}", a.notify) for a in self.alerts]
        if self.canaries is not None:
            notifying.append(("canaries", self.canaries.notify))
        for who, notify in notifying:
            unknown = [n for n in notify if n not in hooks]
            if unknown:
                raise ValueError(f"{who} notifies unknown webhook(s): {', '.join(unknown)}")
        return self
