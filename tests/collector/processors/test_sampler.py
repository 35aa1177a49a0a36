"""The sampler (`collector/processors/sampler.py`): decisions by trace-id hash, rules, budgets.

Everything under test is pure: decisions are compared with an independent computation of the
documented rule (BLAKE2b-64 of the lowercased id against `rate * 2**64`), checked across fresh
interpreters with different `PYTHONHASHSEED`s, and measured against binomial tolerances. The token
buckets are driven by an injected clock.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import subprocess
import sys
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from collector.processors.config import BudgetConfig, SamplingConfig, SamplingRule
from collector.processors.sampler import (
    Decision,
    JudgeBudget,
    SampleDecision,
    TokenBucket,
    TraceFacts,
    decide,
    first_matching_rule,
    matches,
    trace_hash,
)
from tests.support.helpers import REPO

SCALE = 1 << 64
PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

hex_ids = st.binary(min_size=16, max_size=16).map(bytes.hex)
any_ids = st.one_of(hex_ids, st.text(min_size=1, max_size=40))
rates = st.one_of(st.sampled_from([0.0, 1.0, 0.5, 0.1]), st.floats(0.0, 1.0))


def facts(
    trace_id: str = "0" * 32,
    *,
    service: str | None = "shop-bot",
    status: str = "ok",
    duration_ms: float | None = 10.0,
    attributes: list[dict[str, Any]] | None = None,
    applicable: bool = True,
) -> TraceFacts:
    return TraceFacts(trace_id, service, status, duration_ms, attributes or [], applicable)


def config(
    rate: float = 1.0, judge_rate: float = 0.1, rules: list[dict[str, Any]] | None = None
) -> SamplingConfig:
    return SamplingConfig.model_validate({"rate": rate, "judge_rate": judge_rate, "rules": rules or []})


def rule(**fields: Any) -> SamplingRule:
    return SamplingRule.model_validate({"name": "r", **fields})


def reference_hash(trace_id: str) -> int:
    """The documented hash, computed here independently of the module."""
    digest = hashlib.blake2b(trace_id.lower().encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def random_ids(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.getrandbits(128):032x}" for _ in range(n)]


def sequential_ids(n: int) -> list[str]:
    return [f"{i:032x}" for i in range(n)]


def sampled_share(ids: list[str], rate: float) -> float:
    cfg = config(rate=rate, judge_rate=0.0)
    return sum(decide(facts(i), cfg).deterministic for i in ids) / len(ids)


def within_binomial(share: float, p: float, n: int, sigmas: float = 4.0) -> bool:
    return abs(share - p) <= sigmas * math.sqrt(p * (1 - p) / n)


# ---------------------------------------------------------------------------------- determinism


def test_hash_is_the_documented_blake2b_of_the_lowercased_id() -> None:
    for trace_id in [*random_ids(50, seed=1), "", "ABCDEF", "not-hex-at-all", "ünïcødé"]:
        assert trace_hash(trace_id) == reference_hash(trace_id)
        assert 0 <= trace_hash(trace_id) < SCALE


@PROPS
@given(trace_id=any_ids, rate=rates, judge_rate=rates)
def test_decision_is_the_hash_against_the_rates(trace_id: str, rate: float, judge_rate: float) -> None:
    position = reference_hash(trace_id)
    expected = (
        "judge"
        if position < min(rate, judge_rate) * SCALE
        else "deterministic"
        if position < rate * SCALE
        else "skip"
    )
    decision = decide(facts(trace_id), config(rate, judge_rate))
    assert decision.decision == expected
    assert decision == decide(facts(trace_id), config(rate, judge_rate))  # same call, same answer


@PROPS
@given(trace_id=hex_ids, rate=rates, judge_rate=rates)
def test_decision_ignores_the_case_of_the_id(trace_id: str, rate: float, judge_rate: float) -> None:
    cfg = config(rate, judge_rate)
    assert trace_hash(trace_id.upper()) == trace_hash(trace_id.lower())
    assert decide(facts(trace_id.upper()), cfg) == decide(facts(trace_id.lower()), cfg)


def test_decision_ignores_the_case_of_the_id_example() -> None:
    upper, lower = "ABCDEF0123456789ABCDEF0123456789", "abcdef0123456789abcdef0123456789"
    for rate in (0.1, 0.25, 0.5, 0.9):
        cfg = config(rate, rate / 2)
        assert decide(facts(upper), cfg) == decide(facts(lower), cfg)


_CHILD = """
import json, sys
from collector.processors.config import SamplingConfig
from collector.processors.sampler import TraceFacts, decide, trace_hash
ids = json.load(sys.stdin)
cfg = SamplingConfig(rate=0.5, judge_rate=0.2)
out = [[trace_hash(i), decide(TraceFacts(i, None, "ok", None, []), cfg).decision] for i in ids]
print(json.dumps(out))
"""


def test_decisions_are_the_same_in_fresh_processes_with_other_hash_seeds() -> None:
    """Python's `hash()` of a str changes with PYTHONHASHSEED; the sampler's must not."""
    ids = random_ids(150, seed=2) + sequential_ids(50)
    cfg = config(rate=0.5, judge_rate=0.2)
    here = [[trace_hash(i), decide(facts(i), cfg).decision] for i in ids]
    assert {d for _, d in here} == {"judge", "deterministic", "skip"}  # the comparison is not vacuous
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        child = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=json.dumps(ids),
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            timeout=60,
            check=True,
        )
        assert json.loads(child.stdout) == here, f"PYTHONHASHSEED={seed}"


# ---------------------------------------------------------------------------------- rates

N = 10_000


@pytest.mark.parametrize("rate", [0.1, 0.25, 0.5])
@pytest.mark.parametrize("kind", ["random", "sequential"])
def test_sampled_share_matches_the_rate(rate: float, kind: str) -> None:
    ids = random_ids(N, seed=3) if kind == "random" else sequential_ids(N)
    share = sampled_share(ids, rate)
    assert within_binomial(share, rate, N), (kind, rate, share)


@pytest.mark.parametrize("judge_rate", [0.1, 0.25])
def test_judged_share_matches_the_judge_rate(judge_rate: float) -> None:
    cfg = config(rate=0.5, judge_rate=judge_rate)
    decisions = [decide(facts(i), cfg).decision for i in random_ids(N, seed=4)]
    assert within_binomial(decisions.count("judge") / N, judge_rate, N)
    assert within_binomial(decisions.count("deterministic") / N, 0.5 - judge_rate, N)


@pytest.mark.parametrize("kind", ["sequential", "prefixed"])
def test_structured_ids_hash_uniformly(kind: str) -> None:
    """Ids that differ in a few characters spread evenly over 16 buckets of the hash range."""
    # prefixed: the same high half, as from one generator with a fixed prefix
    prefixed = [f"deadbeefdeadbeef{i:016x}" for i in range(N)]
    ids = sequential_ids(N) if kind == "sequential" else prefixed
    counts = [0] * 16
    for i in ids:
        counts[trace_hash(i) >> 60] += 1
    for count in counts:
        assert within_binomial(count / N, 1 / 16, N), counts


# ---------------------------------------------------------------------------------- subsets


@PROPS
@given(trace_id=any_ids, r1=rates, r2=rates)
def test_lower_rate_samples_a_subset(trace_id: str, r1: float, r2: float) -> None:
    low, high = sorted((r1, r2))
    if decide(facts(trace_id), config(low, 0.0)).deterministic:
        assert decide(facts(trace_id), config(high, 0.0)).deterministic
    if decide(facts(trace_id), config(1.0, low)).judge:
        assert decide(facts(trace_id), config(1.0, high)).judge


def test_lower_rate_samples_a_subset_on_many_ids() -> None:
    ids = random_ids(2_000, seed=5)
    sets = {r: {i for i in ids if decide(facts(i), config(r, 0.0)).deterministic} for r in (0.1, 0.25, 0.5)}
    assert sets[0.1] < sets[0.25] < sets[0.5]


@PROPS
@given(trace_id=any_ids, rate=rates, judge_rate=rates)
@example(trace_id="0" * 32, rate=0.1, judge_rate=0.9)
def test_judged_is_a_subset_of_deterministic(trace_id: str, rate: float, judge_rate: float) -> None:
    decision = decide(facts(trace_id), config(rate, judge_rate))
    if decision.judge:
        assert decision.deterministic
        assert decide(facts(trace_id), config(rate, 0.0)).deterministic
    # judge_rate above rate judges exactly what the rate samples: never more than it
    if judge_rate >= rate:
        assert decision.decision in ("judge", "skip")


def test_judge_rate_above_rate_is_capped_by_rate() -> None:
    ids = random_ids(2_000, seed=6)
    judged = [i for i in ids if decide(facts(i), config(0.2, 0.9)).judge]
    sampled = [i for i in ids if decide(facts(i), config(0.2, 0.0)).deterministic]
    assert judged == sampled


@PROPS
@given(trace_id=any_ids, judge_rate=rates)
def test_rate_zero_samples_nothing_and_rate_one_everything(trace_id: str, judge_rate: float) -> None:
    assert decide(facts(trace_id), config(0.0, judge_rate)) == Decision("skip", "not_sampled")
    assert decide(facts(trace_id), config(1.0, judge_rate)).deterministic
    assert decide(facts(trace_id), config(1.0, 1.0)) == Decision("judge", "sampled")
    assert not decide(facts(trace_id), config(1.0, 0.0)).judge


def test_rate_one_samples_the_top_of_the_hash_range() -> None:
    """An id whose hash is in the last 1/1000 of the range is still sampled at rate 1."""
    top = next(i for i in random_ids(100_000, seed=7) if trace_hash(i) > SCALE - SCALE // 1000)
    assert decide(facts(top), config(1.0, 1.0)) == Decision("judge", "sampled")
    assert decide(facts(top), config(0.999, 0.999)) == Decision("skip", "not_sampled")


# ---------------------------------------------------------------------------------- decisions


def test_the_three_decisions_and_their_reasons() -> None:
    cfg = config(rate=0.5, judge_rate=0.2)
    seen: dict[str, Decision] = {}
    for i in random_ids(200, seed=8):
        position = reference_hash(i)
        decision = decide(facts(i), cfg)
        if position < 0.2 * SCALE:
            assert decision == Decision("judge", "sampled")
            assert decision.judge and decision.deterministic
        elif position < 0.5 * SCALE:
            assert decision == Decision("deterministic", "sampled")
            assert decision.deterministic and not decision.judge
        else:
            assert decision == Decision("skip", "not_sampled")
            assert not decision.deterministic and not decision.judge
        seen[decision.decision] = decision
    assert set(seen) == {"judge", "deterministic", "skip"}


@PROPS
@given(trace_id=any_ids, rate=rates, judge_rate=rates)
def test_not_applicable_is_always_skipped(trace_id: str, rate: float, judge_rate: float) -> None:
    everything = [{"name": "all", "rate": 1.0, "judge_rate": 1.0}]
    for cfg in (config(rate, judge_rate), config(1.0, 1.0, everything)):
        assert decide(facts(trace_id, applicable=False), cfg) == Decision("skip", "not_applicable")


@PROPS
@given(trace_id=any_ids, rate=rates, judge_rate=rates)
def test_a_matching_rule_names_the_reason_whatever_it_decides(
    trace_id: str, rate: float, judge_rate: float
) -> None:
    cfg = config(
        0.5, 0.5, [{"name": "slow", "match": {"min_duration_ms": 0}, "rate": rate, "judge_rate": judge_rate}]
    )
    decision = decide(facts(trace_id), cfg)
    assert decision.reason == "rule:slow"
    assert decision.decision == decide(facts(trace_id), config(rate, judge_rate)).decision


def test_a_rule_that_does_not_match_leaves_the_global_rates() -> None:
    cfg = config(1.0, 1.0, [{"name": "never", "match": {"service": "other"}, "rate": 0.0}])
    assert decide(facts(), cfg) == Decision("judge", "sampled")
    cfg = config(0.0, 0.0, [{"name": "never", "match": {"service": "other"}, "rate": 1.0}])
    assert decide(facts(), cfg) == Decision("skip", "not_sampled")


# ---------------------------------------------------------------------------------- rules


def test_first_matching_rule_wins() -> None:
    skip_all = {"name": "first", "match": {"status": "error"}, "rate": 0.0}
    take_all = {"name": "second", "match": {"service": "shop-bot"}, "rate": 1.0, "judge_rate": 1.0}
    trace = facts(status="error")
    assert decide(trace, config(0.5, 0.5, [skip_all, take_all])) == Decision("skip", "rule:first")
    assert decide(trace, config(0.5, 0.5, [take_all, skip_all])) == Decision("judge", "rule:second")
    # the first rule does not match an ok trace: the second one applies
    assert decide(facts(status="ok"), config(0.5, 0.5, [skip_all, take_all])) == Decision(
        "judge", "rule:second"
    )


def test_a_rule_setting_only_judge_rate_keeps_the_global_rate() -> None:
    cfg = config(0.5, 0.0, [{"name": "j", "judge_rate": 1.0}])
    for i in random_ids(1_000, seed=9):
        expected: SampleDecision = "judge" if reference_hash(i) < 0.5 * SCALE else "skip"
        assert decide(facts(i), cfg) == Decision(expected, "rule:j")


def test_a_rule_setting_only_rate_keeps_the_global_judge_rate() -> None:
    cfg = config(0.0, 0.2, [{"name": "d", "rate": 1.0}])
    for i in random_ids(1_000, seed=10):
        expected: SampleDecision = "judge" if reference_hash(i) < 0.2 * SCALE else "deterministic"
        assert decide(facts(i), cfg) == Decision(expected, "rule:d")


@PROPS
@given(
    trace_id=any_ids,
    service=st.none() | st.text(max_size=10),
    status=st.sampled_from(["ok", "error", "unset", "UNSET", ""]),
    duration=st.none() | st.floats(0, 1e9),
    attributes=st.lists(
        st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5)), max_size=3
    ),
)
def test_a_rule_without_conditions_matches_every_trace(
    trace_id: str, service: str | None, status: str, duration: float | None, attributes: list[dict[str, Any]]
) -> None:
    trace = facts(trace_id, service=service, status=status, duration_ms=duration, attributes=attributes)
    assert matches(trace, rule())
    assert matches(trace, rule(match={}))
    assert first_matching_rule(trace, [rule(name="any")]) is not None


def test_match_on_service() -> None:
    shop = rule(match={"service": "shop-bot"})
    assert matches(facts(service="shop-bot"), shop)
    assert not matches(facts(service="shop-bot-2"), shop)
    assert not matches(facts(service="Shop-Bot"), shop)
    assert not matches(facts(service=None), shop)


@pytest.mark.parametrize(
    ("trace_status", "is_error"),
    [("error", True), ("ok", False), ("unset", False), ("UNSET", False), ("", False)],
)
def test_match_on_status(trace_status: str, is_error: bool) -> None:
    trace = facts(status=trace_status)
    assert matches(trace, rule(match={"status": "error"})) is is_error
    assert matches(trace, rule(match={"status": "ok"})) is not is_error
    # the config accepts `unset`: a trace no span marked as failed, i.e. one that is not `error`
    assert matches(trace, rule(match={"status": "unset"})) is not is_error


def test_match_on_min_duration_is_inclusive_and_no_duration_is_zero() -> None:
    slow = rule(match={"min_duration_ms": 100})
    assert matches(facts(duration_ms=100.0), slow)
    assert matches(facts(duration_ms=5_000.0), slow)
    assert not matches(facts(duration_ms=99.999), slow)
    assert not matches(facts(duration_ms=None), slow)
    assert not matches(facts(duration_ms=0.0), slow)
    assert matches(facts(duration_ms=None), rule(match={"min_duration_ms": 0}))
    assert matches(facts(duration_ms=0.0), rule(match={"min_duration_ms": 0}))


def test_match_on_an_attribute_of_any_span() -> None:
    refunds = rule(match={"attributes": {"rag.route": "refunds"}})
    spans: list[dict[str, Any]] = [{"http.method": "POST"}, {"rag.route": "refunds", "x": 1}, {}]
    assert matches(facts(attributes=spans), refunds)
    assert not matches(facts(attributes=[{"rag.route": "orders"}]), refunds)
    assert not matches(facts(attributes=[{"rag.router": "refunds"}, {"route": "refunds"}]), refunds)
    assert not matches(facts(attributes=[]), refunds)


def test_a_missing_attribute_never_matches_even_a_null_value() -> None:
    null = rule(match={"attributes": yaml.safe_load('{"rag.route": ~}')})
    assert null.match.attributes == {"rag.route": None}
    assert not matches(facts(attributes=[{}, {"other": None}]), null)
    assert not matches(facts(attributes=[]), null)


@pytest.mark.parametrize("rule_yaml", ['{"rag.tier": 2}', '{"rag.tier": "2"}'])
@pytest.mark.parametrize("sent", [2, "2"])
def test_int_and_string_attribute_values_match_each_other(rule_yaml: str, sent: Any) -> None:
    tier = rule(match={"attributes": yaml.safe_load(rule_yaml)})
    assert matches(facts(attributes=[{"rag.tier": sent}]), tier)
    assert not matches(facts(attributes=[{"rag.tier": 3}]), tier)
    assert not matches(facts(attributes=[{"rag.tier": "3"}]), tier)
    assert not matches(facts(attributes=[{"rag.tier": "20"}]), tier)


def test_bool_attribute_values() -> None:
    cached = rule(match={"attributes": yaml.safe_load('{"rag.cached": true}')})
    assert matches(facts(attributes=[{"rag.cached": True}]), cached)
    assert not matches(facts(attributes=[{"rag.cached": False}]), cached)
    assert not matches(facts(attributes=[{}]), cached)
    uncached = rule(match={"attributes": yaml.safe_load('{"rag.cached": false}')})
    assert matches(facts(attributes=[{"rag.cached": False}]), uncached)
    assert not matches(facts(attributes=[{"rag.cached": True}]), uncached)


def test_several_attributes_must_all_hold_possibly_on_different_spans() -> None:
    both = rule(match={"attributes": {"rag.route": "refunds", "rag.tier": 2}})
    assert matches(facts(attributes=[{"rag.route": "refunds", "rag.tier": 2}]), both)
    assert matches(facts(attributes=[{"rag.route": "refunds"}, {"rag.tier": "2"}]), both)
    assert not matches(facts(attributes=[{"rag.route": "refunds"}]), both)
    assert not matches(facts(attributes=[{"rag.route": "refunds"}, {"rag.tier": 3}]), both)
    assert not matches(facts(attributes=[{"rag.tier": 2}]), both)


def test_all_conditions_must_hold() -> None:
    strict = rule(
        match={
            "service": "shop-bot",
            "status": "error",
            "min_duration_ms": 100,
            "attributes": {"rag.route": "refunds"},
        }
    )
    good: dict[str, Any] = {
        "service": "shop-bot",
        "status": "error",
        "duration_ms": 100.0,
        "attributes": [{"rag.route": "refunds"}],
    }
    assert matches(facts(**good), strict)
    changes: list[tuple[str, Any]] = [
        ("service", "other"),
        ("status", "ok"),
        ("duration_ms", 50.0),
        ("attributes", [{"rag.route": "orders"}]),
    ]
    for field, bad in changes:
        assert not matches(facts(**{**good, field: bad}), strict), field


@PROPS
@given(trace_id=any_ids)
def test_errors_rule_judges_every_error_trace(trace_id: str) -> None:
    """README's example: `rules: [{name: errors, match: {status: error}, judge_rate: 1.0}]`."""
    errors = [{"name": "errors", "match": {"status": "error"}, "judge_rate": 1.0}]
    cfg = config(rules=errors)  # the default rate 1.0, judge_rate 0.1
    assert decide(facts(trace_id, status="error"), cfg) == Decision("judge", "rule:errors")
    ok = decide(facts(trace_id, status="ok"), cfg)
    assert ok == decide(facts(trace_id), config()) and ok.reason == "sampled"
    # with a lower global rate the rule must raise the rate too: judged traces are always scored
    both = [{"name": "errors", "match": {"status": "error"}, "rate": 1.0, "judge_rate": 1.0}]
    assert decide(facts(trace_id, status="error"), config(0.05, 0.01, both)) == Decision(
        "judge", "rule:errors"
    )


def test_rules_from_yaml_like_the_docs() -> None:
    cfg = SamplingConfig.model_validate(
        yaml.safe_load(
            """
            rate: 0.0
            judge_rate: 0.0
            rules:
              - {name: errors, match: {status: error}, rate: 1.0, judge_rate: 1.0}
              - {name: refunds, match: {service: shop-bot, attributes: {"rag.route": refunds}}, rate: 1.0}
              - {name: slow, match: {min_duration_ms: 5000}, rate: 1.0, judge_rate: 1.0}
            """
        )
    )
    route = [{"rag.route": "refunds"}]
    assert decide(facts(status="error", duration_ms=9_000.0), cfg) == Decision("judge", "rule:errors")
    assert decide(facts(attributes=route), cfg) == Decision("deterministic", "rule:refunds")
    assert decide(facts(service="other", attributes=route), cfg) == Decision("skip", "not_sampled")
    assert decide(facts(duration_ms=5_000.0), cfg) == Decision("judge", "rule:slow")
    assert decide(facts(duration_ms=4_999.0), cfg) == Decision("skip", "not_sampled")


# ---------------------------------------------------------------------------------- token bucket


def test_capacity_is_the_burst() -> None:
    bucket = TokenBucket(10, 60.0, now=0.0)
    assert bucket.available(0.0) == 10
    assert bucket.take(10, 0.0)
    assert not bucket.take(1, 0.0)
    assert bucket.available(0.0) == 0


def test_take_is_all_or_nothing() -> None:
    bucket = TokenBucket(10, 60.0, now=0.0)
    assert not bucket.take(11, 0.0)
    assert bucket.available(0.0) == 10  # a refused take takes nothing
    assert bucket.take(7, 0.0)
    assert not bucket.take(4, 0.0)
    assert bucket.available(0.0) == 3
    assert bucket.take(3, 0.0)


def test_refill_is_continuous_and_capped() -> None:
    bucket = TokenBucket(60, 60.0, now=100.0)  # one token a second
    assert bucket.take(60, 100.0)
    assert bucket.available(100.5) == pytest.approx(0.5)
    assert not bucket.take(1, 100.5)
    assert bucket.take(1, 101.0)
    assert bucket.available(103.0) == pytest.approx(2.0)
    assert bucket.available(10_000.0) == 60  # capped at capacity, not 9,900 tokens
    assert bucket.take(60, 10_000.0)
    assert not bucket.take(1, 10_000.0)


def test_refill_rate_is_capacity_over_period() -> None:
    bucket = TokenBucket(86_400, 86_400.0, now=0.0)
    bucket.take(86_400, 0.0)
    assert bucket.available(3_600.0) == pytest.approx(3_600)
    calls = TokenBucket(120, 60.0, now=0.0)
    calls.take(120, 0.0)
    assert calls.available(1.5) == pytest.approx(3.0)


def test_spend_goes_negative_and_blocks_until_refilled() -> None:
    bucket = TokenBucket(60, 60.0, now=0.0)
    bucket.spend(80, 0.0)
    assert bucket.available(0.0) == -20
    assert not bucket.take(1, 10.0)
    assert bucket.available(20.0) == pytest.approx(0.0)
    assert not bucket.take(1, 20.5)
    assert bucket.take(1, 21.0)


def test_unlimited_bucket() -> None:
    bucket = TokenBucket(None, 60.0, now=0.0)
    assert bucket.available(0.0) == math.inf
    for t in range(100):
        assert bucket.take(1_000_000, float(t))
    bucket.spend(10**12, 100.0)
    assert bucket.available(100.0) == math.inf
    assert bucket.take(10**12, 100.0)


def test_zero_capacity_admits_nothing() -> None:
    bucket = TokenBucket(0, 60.0, now=0.0)
    for t in (0.0, 1.0, 60.0, 1e9):
        assert bucket.available(t) == 0
        assert not bucket.take(1, t)
        assert not bucket.take(0.001, t)


@PROPS
@given(
    capacity=st.integers(1, 1_000),
    period=st.sampled_from([1.0, 60.0, 86_400.0]),
    ops=st.lists(
        st.tuples(st.sampled_from(["take", "spend", "wait"]), st.floats(0, 2_000, allow_nan=False)),
        max_size=40,
    ),
)
def test_takes_never_exceed_burst_plus_refill(
    capacity: int, period: float, ops: list[tuple[str, float]]
) -> None:
    bucket = TokenBucket(capacity, period, now=0.0)
    now, taken, spent = 0.0, 0.0, 0.0
    for op, amount in ops:
        if op == "wait":
            now += amount / 10
            continue
        before = bucket.available(now)
        assert before <= capacity
        if op == "take":
            ok = bucket.take(amount, now)
            assert ok is (before >= amount)
            assert bucket.available(now) == pytest.approx(before - amount if ok else before)
            taken += amount if ok else 0.0
        else:
            bucket.spend(amount, now)
            spent += amount
        # everything taken or spent came out of the burst or the refill so far
        assert taken + spent + bucket.available(now) <= capacity + now * capacity / period + 1e-6 * (
            1 + taken + spent
        )


# ---------------------------------------------------------------------------------- judge budget


def test_admit_takes_the_calls() -> None:
    budget = JudgeBudget(5, 1_000, now=0.0)
    assert budget.admit(3, 0.0) is None
    assert budget.calls.available(0.0) == 2
    assert budget.admit(3, 0.0) == "throttled"
    assert budget.calls.available(0.0) == 2  # a refusal takes nothing
    assert budget.admit(2, 0.0) is None
    assert budget.admit(1, 0.0) == "throttled"


def test_throttled_until_the_minute_refills() -> None:
    budget = JudgeBudget(60, None, now=0.0)  # one call a second
    assert budget.admit(60, 0.0) is None
    assert budget.admit(2, 1.0) == "throttled"
    assert budget.admit(1, 1.0) is None
    assert budget.admit(60, 60.0) == "throttled"
    assert budget.admit(60, 61.0) is None


def test_over_budget_when_the_day_is_spent_and_until_it_refills() -> None:
    budget = JudgeBudget(None, 86_400, now=0.0)  # one token a second
    assert budget.admit(1, 0.0) is None
    budget.used_tokens(86_410, 0.0)
    assert budget.admit(1, 5.0) == "over_budget"
    assert budget.admit(1, 10.0) == "over_budget"  # back to zero: still nothing left
    assert budget.admit(1, 11.0) is None


def test_over_budget_is_checked_first_and_takes_no_calls() -> None:
    budget = JudgeBudget(2, 100, now=0.0)
    assert budget.admit(2, 0.0) is None  # calls are now exhausted too
    budget.used_tokens(100, 0.0)
    assert budget.admit(1, 0.0) == "over_budget"
    refilled = JudgeBudget(2, 100, now=0.0)
    refilled.used_tokens(1_000, 0.0)
    assert refilled.admit(1, 0.0) == "over_budget"
    assert refilled.calls.available(0.0) == 2  # the refused trace took no call
    assert JudgeBudget(0, 0, now=0.0).admit(1, 0.0) == "over_budget"


def test_a_trace_may_overspend_the_day_by_its_own_tokens() -> None:
    """Tokens are known after the calls: a trace admitted with one token left may use many."""
    budget = JudgeBudget(None, 100, now=0.0)
    budget.used_tokens(99, 0.0)
    assert budget.admit(1, 0.0) is None
    budget.used_tokens(500, 0.0)
    assert budget.tokens.available(0.0) == -499
    assert budget.admit(1, 0.0) == "over_budget"


@pytest.mark.parametrize(
    ("calls", "tokens", "reason"),
    [(None, None, None), (0, None, "throttled"), (None, 0, "over_budget"), (0, 0, "over_budget")],
)
def test_none_is_unlimited_and_zero_is_nothing(
    calls: int | None, tokens: int | None, reason: str | None
) -> None:
    budget = JudgeBudget(calls, tokens, now=0.0)
    for t in range(0, 10_000, 100):
        assert budget.admit(1_000, float(t)) == reason
        budget.used_tokens(10**9, float(t))
        assert budget.admit(1, float(t) + 50) == reason


def test_budget_from_config() -> None:
    default = BudgetConfig()
    budget = JudgeBudget(default.judge_calls_per_minute, default.judge_tokens_per_day, now=0.0)
    assert budget.admit(120, 0.0) is None
    assert budget.admit(1, 0.0) == "throttled"
    unlimited = BudgetConfig.model_validate({"judge_calls_per_minute": None, "judge_tokens_per_day": None})
    budget = JudgeBudget(unlimited.judge_calls_per_minute, unlimited.judge_tokens_per_day, now=0.0)
    assert all(budget.admit(1_000, 0.0) is None for _ in range(100))
    nothing = BudgetConfig.model_validate({"judge_calls_per_minute": 0, "judge_tokens_per_day": 0})
    budget = JudgeBudget(nothing.judge_calls_per_minute, nothing.judge_tokens_per_day, now=0.0)
    assert budget.admit(1, 0.0) == "over_budget"
