"""Cohen's κ and its interval against textbook examples and against simulation; Spearman's rho."""

from __future__ import annotations

import numpy as np
import pytest

from collector.feedback.agreement_stats import Confusion, cohen_kappa, mean_absolute_error, spearman


@pytest.mark.parametrize(
    ("counts", "agreement", "kappa"),
    [
        # Wikipedia, "Cohen's kappa": the worked example, and the two tables with the same raw
        # agreement (60 %) and different κ.
        ((20, 5, 10, 15), 0.7, 0.4),
        ((45, 15, 25, 15), 0.6, 0.1304),
        ((25, 35, 5, 35), 0.6, 0.2593),
        ((10, 0, 0, 10), 1.0, 1.0),
        ((0, 10, 10, 0), 0.0, -1.0),
    ],
)
def test_kappa_of_textbook_tables(counts: tuple[int, int, int, int], agreement: float, kappa: float) -> None:
    result = cohen_kappa(Confusion(*counts))
    assert result.n == sum(counts)
    assert result.agreement == pytest.approx(agreement)
    assert result.kappa == pytest.approx(kappa, abs=5e-5)
    assert result.low is not None and result.high is not None
    assert -1.0 <= result.low <= result.kappa <= result.high <= 1.0


def test_kappa_is_undefined_when_both_raters_never_vary_and_absent_without_labels() -> None:
    constant = cohen_kappa(Confusion(pass_pass=12))
    assert (constant.agreement, constant.kappa, constant.low) == (1.0, None, None)
    assert cohen_kappa(Confusion()).n == 0 and cohen_kappa(Confusion()).kappa is None


def test_pairs_that_are_not_pass_or_fail_are_left_out() -> None:
    pairs = [("pass", "pass"), ("fail", "pass"), ("error", "pass"), ("pass", "skipped"), ("fail", "fail")]
    assert Confusion.of(pairs) == Confusion(pass_pass=1, fail_pass=1, fail_fail=1)


def _cells(kappa: float, prevalence: float) -> list[float]:
    """Cell probabilities (pp, pf, fp, ff) of two raters who both say pass with `prevalence` and agree
    with Cohen's κ `kappa`."""
    spread = prevalence * (1 - prevalence)
    return [
        prevalence**2 + kappa * spread,
        (1 - kappa) * spread,
        (1 - kappa) * spread,
        (1 - prevalence) ** 2 + kappa * spread,
    ]


def test_the_standard_error_matches_the_spread_of_kappa_over_many_samples() -> None:
    rng = np.random.default_rng(7)
    cells, n = _cells(0.6, 0.7), 2000
    draws = rng.multinomial(n, cells, size=3000)
    kappas = [cohen_kappa(Confusion(*map(int, d))).kappa for d in draws]
    expected = cohen_kappa(Confusion(*(round(p * n) for p in cells)))
    assert expected.low is not None and expected.high is not None and expected.kappa is not None
    se = (expected.high - expected.low) / (2 * 1.959963984540054)
    assert np.std(kappas) == pytest.approx(se, rel=0.06)


@pytest.mark.parametrize("n", [100, 400])
@pytest.mark.parametrize(("kappa", "prevalence"), [(0.3, 0.5), (0.6, 0.5), (0.6, 0.8), (0.8, 0.7)])
def test_the_95_percent_interval_covers_the_true_kappa_about_95_percent_of_the_time(
    n: int, kappa: float, prevalence: float
) -> None:
    rng = np.random.default_rng(n * 100 + int(kappa * 10) + int(prevalence * 1000))
    draws = rng.multinomial(n, _cells(kappa, prevalence), size=2000)
    covered = defined = 0
    for draw in draws:
        result = cohen_kappa(Confusion(*map(int, draw)))
        if result.low is None or result.high is None:
            continue
        defined += 1
        covered += result.low <= kappa <= result.high
    coverage = covered / defined
    # 2,000 draws: a true 95 % is measured within about ±1 %.
    assert 0.925 <= coverage <= 0.975, coverage


def test_spearman_of_a_textbook_example_and_with_ties() -> None:
    # Wikipedia, "Spearman's rank correlation coefficient": IQ against hours of TV a week.
    iq = [106, 100, 86, 101, 99, 103, 97, 113, 112, 110]
    tv = [7, 27, 2, 50, 28, 29, 20, 12, 6, 17]
    assert spearman(iq, tv) == pytest.approx(-29 / 165)
    # Ties share their mean rank: the Pearson correlation of [1, 2.5, 2.5, 4] with [1, 2, 3, 4].
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(
        np.corrcoef([1, 2.5, 2.5, 4], [1, 2, 3, 4])[0, 1]
    )
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert spearman([1, 2], [2, 1]) is None


def test_mean_absolute_error() -> None:
    assert mean_absolute_error([0.5, 1.0], [0.0, 1.0]) == 0.25
    assert mean_absolute_error([], []) is None
    with pytest.raises(ValueError, match="pairs"):
        mean_absolute_error([1.0], [])
