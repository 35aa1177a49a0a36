"""How far a judge agrees with people: Cohen's κ with a 95 % interval, and for numbers Spearman's rho
and the mean absolute error; and how well a score predicts users' feedback: the AUC with DeLong's
95 % interval (`delong_auc`). Pure arithmetic on counts and pairs (no numpy at run time).

Two raters, the judge and a person, each say pass or fail on the same n scores. With the counts

    a = judge pass, human pass    b = judge pass, human fail
    c = judge fail, human pass    d = judge fail, human fail

the observed agreement is p_o = (a + d) / n, the agreement expected by chance from each rater's own
pass rate is p_e = p_judge·p_human + (1 - p_judge)(1 - p_human), and κ = (p_o - p_e) / (1 - p_e):
1 is perfect agreement, 0 is what chance alone gives, below 0 worse than chance. When both raters
said one and the same thing every time (p_e = 1), κ is undefined (None).

The interval is Wald's, κ ± 1.96·SE, with the large-sample standard error of Fleiss, Cohen and
Everitt (1969, "Large sample standard errors of kappa and weighted kappa", Psychological Bulletin
72(5)), which holds when κ is not 0 (the null-hypothesis SE would be too narrow), clipped to
[-1, 1]. Its coverage, measured by simulation (tests/collector/feedback/test_agreement_stats.py,
docs/feedback.md), is close to 95 % from about 100 labels and below it for few labels or a κ near 1:
the reason the answer always carries n.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

Z95 = 1.959963984540054  # the standard normal's 97.5th percentile


@dataclass(frozen=True)
class Confusion:
    """Pass/fail counts of judge (first) against human (second)."""

    pass_pass: int = 0
    pass_fail: int = 0
    fail_pass: int = 0
    fail_fail: int = 0

    @property
    def n(self) -> int:
        return self.pass_pass + self.pass_fail + self.fail_pass + self.fail_fail

    @classmethod
    def of(cls, pairs: Sequence[tuple[str, str]]) -> Confusion:
        """Counts of (judge status, human status) pairs; pairs not both pass or fail are left out."""
        counts = {key: 0 for key in ("pass_pass", "pass_fail", "fail_pass", "fail_fail")}
        for judge, human in pairs:
            key = f"{judge}_{human}"
            if key in counts:
                counts[key] += 1
        return cls(**counts)


@dataclass(frozen=True)
class Kappa:
    """Agreement on pass/fail: raw agreement, κ and its 95 % interval (None where undefined)."""

    n: int
    agreement: float | None
    kappa: float | None
    low: float | None
    high: float | None


def cohen_kappa(confusion: Confusion) -> Kappa:
    """Cohen's κ of a 2x2 confusion, with the Fleiss-Cohen-Everitt interval (module docstring)."""
    n = confusion.n
    if n == 0:
        return Kappa(0, None, None, None, None)
    p = [
        [confusion.pass_pass / n, confusion.pass_fail / n],
        [confusion.fail_pass / n, confusion.fail_fail / n],
    ]
    rows = [p[0][0] + p[0][1], p[1][0] + p[1][1]]  # the judge's pass and fail rates
    cols = [p[0][0] + p[1][0], p[0][1] + p[1][1]]  # the human's
    observed = p[0][0] + p[1][1]
    expected = rows[0] * cols[0] + rows[1] * cols[1]
    if expected >= 1.0:
        return Kappa(n, observed, None, None, None)
    kappa = (observed - expected) / (1.0 - expected)
    se = _standard_error(p, rows, cols, kappa, expected, n)
    return Kappa(n, observed, kappa, max(-1.0, kappa - Z95 * se), min(1.0, kappa + Z95 * se))


def kappa_figures(confusion: Confusion) -> dict[str, Any]:
    """`n`, `agreement`, `kappa`, `kappa_low`, `kappa_high` and the `confusion` counts, as the API
    and `ragpulse align` write them."""
    kappa = cohen_kappa(confusion)
    return {
        "n": kappa.n,
        "agreement": kappa.agreement,
        "kappa": kappa.kappa,
        "kappa_low": kappa.low,
        "kappa_high": kappa.high,
        "confusion": asdict(confusion),
    }


def _standard_error(
    p: list[list[float]], rows: list[float], cols: list[float], kappa: float, expected: float, n: int
) -> float:
    """Fleiss, Cohen and Everitt (1969), equation (13): the SE of κ when κ is not assumed 0."""
    diagonal = sum(p[i][i] * (1.0 - (rows[i] + cols[i]) * (1.0 - kappa)) ** 2 for i in range(2))
    off = (1.0 - kappa) ** 2 * sum(
        p[i][j] * (cols[i] + rows[j]) ** 2 for i in range(2) for j in range(2) if i != j
    )
    variance = (diagonal + off - (kappa - expected * (1.0 - kappa)) ** 2) / (n * (1.0 - expected) ** 2)
    return math.sqrt(max(variance, 0.0))


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation of paired values (ties get their mean rank); None under 3 pairs
    or when either side is constant."""
    if len(xs) != len(ys):
        raise ValueError("spearman needs pairs: two sequences of one length")
    if len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        mean_rank = (start + end) / 2 + 1
        for k in range(start, end + 1):
            ranks[order[k]] = mean_rank
        start = end + 1
    return ranks


def mean_absolute_error(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Mean |x - y| over pairs; None without pairs."""
    if len(xs) != len(ys):
        raise ValueError("mean_absolute_error needs pairs: two sequences of one length")
    if not xs:
        return None
    return sum(abs(x - y) for x, y in zip(xs, ys, strict=True)) / len(xs)


@dataclass(frozen=True)
class Auc:
    """How well a score separates answers people liked from those they did not: the AUC and its
    95 % interval (None where undefined; see `delong_auc`)."""

    n_positive: int
    n_negative: int
    auc: float | None
    low: float | None
    high: float | None


def delong_auc(positive: Sequence[float], negative: Sequence[float]) -> Auc:
    """The AUC of a score against feedback, with DeLong's 95 % interval.

    `positive`: the score's values on the traces with positive feedback (a thumbs up, `pass`);
    `negative`: on those with negative feedback (a thumbs down, `fail`). The AUC is the probability
    that a random trace with negative feedback has a LOWER value than a random trace with positive
    feedback, ties counting one half: 1 when the score ranks every thumbs down below every thumbs up
    (a low score predicts a thumbs down), 0.5 when it says nothing about it, below 0.5 when a low
    score goes with a thumbs UP. None without a trace in either class.

    The interval is DeLong, DeLong and Clarke-Pearson (1988, Biometrics 44(3)), computed from the
    midranks as Sun and Xu (2014, IEEE Signal Processing Letters 21(11)) do, in O(n log n): with m
    positives X and n negatives Y, the structural components are

        V10(X_i) = (T_Z(X_i) - T_X(X_i)) / n       (the share of negatives below X_i, ties one half)
        V01(Y_j) = 1 - (T_Z(Y_j) - T_Y(Y_j)) / m   (the share of positives above Y_j, ties one half)

    where T_Z is the midrank among all m + n values and T_X, T_Y among the values of its own class.
    The AUC is the mean of either; its variance is S10 / m + S01 / n, S10 and S01 the sample
    variances of the V10 and the V01; the interval is AUC ± 1.96·SE, clipped to [0, 1]. With fewer
    than 2 traces in either class the variances are undefined, and so is the interval (None).
    A perfect separation has variance 0: the interval is the point [1, 1] (or [0, 0]).

    2·(T_Z - T_X) is a whole number (midranks are halves), so the sums go through `delong_from_sums`
    exactly: the same answer, to the last bit, as `feedback_auc_sql` gives in SQL, whatever the order.
    """
    m, n = len(positive), len(negative)
    if m == 0 or n == 0:
        return Auc(m, n, None, None, None)
    everything = _ranks([*positive, *negative])
    # Twice the count of the other class below each value, ties counting one half.
    below_positive = [round(2 * (t - own)) for t, own in zip(everything[:m], _ranks(positive), strict=True)]
    below_negative = [round(2 * (t - own)) for t, own in zip(everything[m:], _ranks(negative), strict=True)]
    return delong_from_sums(
        m,
        n,
        sum(below_positive),
        sum(a * a for a in below_positive),
        sum(below_negative),
        sum(b * b for b in below_negative),
    )


def delong_from_sums(
    n_positive: int, n_negative: int, sum_a: int, sum_a2: int, sum_b: int, sum_b2: int
) -> Auc:
    """The AUC and DeLong's interval (`delong_auc`) from whole-number sums: with a_i twice the number
    of negatives below the i-th positive and b_j twice the number of positives below the j-th
    negative (ties counting one half each), V10_i = a_i / 2n and V01_j = 1 - b_j / 2m, so

        AUC = Σa / 2mn,  S10 = (mΣa² - (Σa)²) / (m(m-1)·4n²),  S01 = (nΣb² - (Σb)²) / (n(n-1)·4m²),

    computed exactly (integers, then fractions) up to the square root: no cancellation, and one
    answer whatever order the sums were taken in (what `feedback_auc_sql` returns)."""
    m, n = n_positive, n_negative
    if m == 0 or n == 0:
        return Auc(m, n, None, None, None)
    auc = min(1.0, max(0.0, sum_a / (2 * m * n)))
    if m < 2 or n < 2:
        return Auc(m, n, auc, None, None)
    s10 = Fraction(m * sum_a2 - sum_a * sum_a, m * (m - 1) * 4 * n * n)
    s01 = Fraction(n * sum_b2 - sum_b * sum_b, n * (n - 1) * 4 * m * m)
    se = math.sqrt(max(s10 / m + s01 / n, Fraction(0)))
    return Auc(m, n, auc, max(0.0, auc - Z95 * se), min(1.0, auc + Z95 * se))
