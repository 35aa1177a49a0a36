"""Which complete traces are scored, and by which evaluators: pure decisions, no I/O.

- **Deterministic by trace id.** A trace's 64-bit hash (BLAKE2b of its id) is compared with the
  rate: `hash < rate * 2**64`. The same trace id gets the same decision in every run, after a
  replay and on every replica, and a lower rate samples a subset of what a higher one does. Judge
  sampling uses the same hash against `min(judge_rate, rate)`, so judged traces are always a
  subset of the deterministically scored ones.
- **Rules** (`sampling.rules`, first match wins) match on service, trace status, span attributes
  and duration, and replace the rates they set.
- **Probes** (`probes:`): a trace a probe sent (a span with `rag.probe`) is always scored by every
  evaluator: the golden question's references are what make it worth sending.
- **Budgets** (`TokenBucket`) are applied later, by the judge stage, when it takes a trace: a trace
  it cannot afford keeps its deterministic scores and its reason becomes `throttled` (calls per
  minute) or `over_budget` (tokens per day).

Decisions (`traces.sample_decision`): `judge` (deterministic and judge evaluators), `deterministic`
(deterministic only), `skip` (not scored). Reasons (`traces.sample_reason`): `sampled`,
`not_sampled`, `rule:<name>`, `probe`, `not_applicable` (no RAG step to score), `throttled`, `over_budget`.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from collector.processors.config import SamplingConfig, SamplingRule

SampleDecision = Literal["judge", "deterministic", "skip"]
_SCALE = 1 << 64


@dataclass(frozen=True)
class Decision:
    decision: SampleDecision
    reason: str

    @property
    def deterministic(self) -> bool:
        return self.decision != "skip"

    @property
    def judge(self) -> bool:
        return self.decision == "judge"


@dataclass(frozen=True)
class TraceFacts:
    """What sampling rules look at, gathered from a mapped trace and its spans."""

    trace_id: str
    service_name: str | None
    status: str  # ok | error
    duration_ms: float | None
    attributes: Iterable[Mapping[str, Any]]  # every span's attributes
    applicable: bool = True  # False: nothing to score (no RAG step)
    probe: str | None = None  # the probe that sent the request (`rag.probe`)


def trace_hash(trace_id: str) -> int:
    """The trace id's 64-bit hash, uniform whatever the id's own distribution."""
    return int.from_bytes(hashlib.blake2b(trace_id.lower().encode(), digest_size=8).digest(), "big")


def decide(facts: TraceFacts, config: SamplingConfig) -> Decision:
    """The sampling decision for one complete trace."""
    if not facts.applicable:
        return Decision("skip", "not_applicable")
    if facts.probe is not None:
        return Decision("judge", "probe")
    rate, judge_rate, reason = config.rate, config.judge_rate, None
    rule = first_matching_rule(facts, config.rules)
    if rule is not None:
        rate = rule.rate if rule.rate is not None else rate
        judge_rate = rule.judge_rate if rule.judge_rate is not None else judge_rate
        reason = f"rule:{rule.name}"
    position = trace_hash(facts.trace_id)
    if position < min(judge_rate, rate) * _SCALE:
        return Decision("judge", reason or "sampled")
    if position < rate * _SCALE:
        return Decision("deterministic", reason or "sampled")
    return Decision("skip", reason or "not_sampled")


def first_matching_rule(facts: TraceFacts, rules: Iterable[SamplingRule]) -> SamplingRule | None:
    for rule in rules:
        if matches(facts, rule):
            return rule
    return None


def matches(facts: TraceFacts, rule: SamplingRule) -> bool:
    """Every condition the rule sets holds (a rule with none matches every trace)."""
    match = rule.match
    if match.service is not None and facts.service_name != match.service:
        return False
    # A trace is `error` or `ok`; a rule's `unset` (no span set a status) is a trace that is not `error`.
    if match.status is not None and _status(facts.status) != _status(match.status):
        return False
    if match.min_duration_ms is not None and (facts.duration_ms or 0.0) < match.min_duration_ms:
        return False
    return all(_any_span_has(facts.attributes, key, value) for key, value in match.attributes.items())


def _status(status: str) -> str:
    return "error" if status == "error" else "ok"


def _any_span_has(attributes: Iterable[Mapping[str, Any]], key: str, expected: Any) -> bool:
    return any(key in attrs and _same(attrs[key], expected) for attrs in attributes)


def _same(actual: Any, expected: Any) -> bool:
    # A YAML rule says `rag.tier: 2` or `"2"` for an attribute sent as int or string: both match.
    if actual == expected:
        return True
    scalars = (str, int, float, bool)
    return isinstance(actual, scalars) and isinstance(expected, scalars) and str(actual) == str(expected)


class TokenBucket:
    """`capacity` tokens refilled continuously over `period` seconds; `None` capacity: unlimited.

    The clock is passed in (seconds, monotonic), so the bucket is pure and testable."""

    def __init__(self, capacity: float | None, period: float, now: float) -> None:
        self.capacity = capacity
        self._rate = 0.0 if capacity is None else capacity / period
        self._tokens = capacity or 0.0
        self._at = now

    def available(self, now: float) -> float:
        if self.capacity is None:
            return float("inf")
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self._rate)
        self._at = now
        return self._tokens

    def take(self, amount: float, now: float) -> bool:
        """Take `amount` tokens if they are all there."""
        if self.available(now) < amount:
            return False
        if self.capacity is not None:
            self._tokens -= amount
        return True

    def spend(self, amount: float, now: float) -> None:
        """Take `amount` after the fact (tokens a call used); the bucket may go below zero."""
        self.available(now)
        if self.capacity is not None:
            self._tokens -= amount


class JudgeBudget:
    """`sampling.budget`: judge calls per minute and judge tokens per day, as two token buckets.
    One budget serves every judge caller of a service (online scoring and the judge canaries),
    from several threads."""

    def __init__(self, calls_per_minute: int | None, tokens_per_day: int | None, now: float) -> None:
        self.calls = TokenBucket(calls_per_minute, 60.0, now)
        self.tokens = TokenBucket(tokens_per_day, 86_400.0, now)
        self._lock = threading.Lock()

    def admit(self, calls: int, now: float) -> str | None:
        """None when work needing `calls` judge calls may go ahead (the calls are taken), else the
        reason it may not: `over_budget` (no tokens left today) or `throttled` (calls per minute)."""
        with self._lock:
            if self.tokens.available(now) <= 0:
                return "over_budget"
            if not self.calls.take(calls, now):
                return "throttled"
            return None

    def used_tokens(self, tokens: int, now: float) -> None:
        with self._lock:
            self.tokens.spend(tokens, now)
