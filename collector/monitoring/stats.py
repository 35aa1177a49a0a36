"""The statistics behind quality gates and regression detection: pure functions, standard library only.

- Confidence intervals: Wilson's score interval for rates (sound near 0 and 1, where scores pile up),
  the normal approximation for means of values in 0..1 (gates need `min_samples` first).
- Drop tests, one-sided (is the recent window *worse* than the baseline?): the two-proportion z-test
  for pass rates, Fisher's exact test when a cell is too small for it, and the Mann-Whitney U test
  (normal approximation with tie and continuity corrections) for values.
- Holm's step-down correction over every comparison of one run, so that the chance of any false
  alarm in the run stays at or below `alpha` (family-wise).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

_NORMAL = NormalDist()
# Below this expected count in any cell of the 2x2 table, the z-test's approximation is poor.
MIN_EXPECTED_FOR_Z = 5.0


@dataclass(frozen=True)
class Interval:
    low: float
    high: float


def _z(confidence: float) -> float:
    return _NORMAL.inv_cdf(0.5 + confidence / 2)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval | None:
    """Wilson's score interval of a rate `successes / n` (None when n is 0)."""
    if n <= 0:
        return None
    z = _z(confidence)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return Interval(max(0.0, centre - half), min(1.0, centre + half))


def mean_interval(n: int, total: float, total_sq: float, confidence: float = 0.95) -> Interval | None:
    """Normal-approximation interval of the mean of `n` values in 0..1, from their sum and sum of
    squares (what `score_aggregates` keeps). None when n < 2 (no spread to estimate)."""
    if n < 2:
        return None
    mean = total / n
    variance = max(0.0, (total_sq - total * total / n) / (n - 1))
    half = _z(confidence) * math.sqrt(variance / n)
    return Interval(max(0.0, mean - half), min(1.0, mean + half))


def proportion_drop_p(x_recent: int, n_recent: int, x_base: int, n_base: int) -> float:
    """One-sided p-value that the recent rate is lower than the baseline's: the pooled two-proportion
    z-test, or Fisher's exact test when an expected cell count is below `MIN_EXPECTED_FOR_Z`."""
    if n_recent <= 0 or n_base <= 0:
        return 1.0
    n = n_recent + n_base
    successes = x_recent + x_base
    failures = n - successes
    expected = min(n_recent, n_base) * min(successes, failures) / n
    if expected < MIN_EXPECTED_FOR_Z:
        return fisher_drop_p(x_recent, n_recent, x_base, n_base)
    pooled = successes / n
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_recent + 1 / n_base))
    if se == 0:
        return 1.0
    z = (x_recent / n_recent - x_base / n_base) / se
    return _NORMAL.cdf(z)


def fisher_drop_p(x_recent: int, n_recent: int, x_base: int, n_base: int) -> float:
    """Fisher's exact one-sided p-value: P(X <= x_recent) for X hypergeometric, the recent window's
    successes when the `x_recent + x_base` successes fall at random among all trials."""
    successes = x_recent + x_base
    n = n_recent + n_base
    low = max(0, successes - n_base)

    def log_pmf(k: int) -> float:
        return _log_choose(successes, k) + _log_choose(n - successes, n_recent - k) - _log_choose(n, n_recent)

    return min(1.0, sum(math.exp(log_pmf(k)) for k in range(low, x_recent + 1)))


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def mann_whitney_drop_p(n_recent: int, n_base: int, rank_sum_recent: float, tie_term: float) -> float:
    """One-sided p-value that recent values tend to be lower than the baseline's (Mann-Whitney U).

    `rank_sum_recent` is the sum of the recent values' ranks in the pooled sample (ties given their
    average rank), `tie_term` the sum of t^3 - t over groups of t tied values. Normal approximation
    with tie and continuity corrections: sound at the sample sizes a monitor waits for."""
    if n_recent <= 0 or n_base <= 0:
        return 1.0
    n = n_recent + n_base
    u_recent = rank_sum_recent - n_recent * (n_recent + 1) / 2
    variance = n_recent * n_base / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:
        return 1.0  # every value tied: nothing moved
    z = (u_recent - n_recent * n_base / 2 + 0.5) / math.sqrt(variance)
    return _NORMAL.cdf(z)


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down procedure: which hypotheses are rejected, keeping the family-wise error rate
    at or below `alpha` whatever the dependence between the tests."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    m = len(p_values)
    for position, index in enumerate(order):
        if p_values[index] > alpha / (m - position):
            break
        rejected[index] = True
    return rejected
