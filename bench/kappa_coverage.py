"""How often the 95 % interval of Cohen's κ (`collector/feedback/agreement_stats.py`) holds the true κ.

Two raters who both say pass at a given rate and agree with a given κ: cell probabilities
(pp, pf, fp, ff) = (p² + κs, (1-κ)s, (1-κ)s, (1-p)² + κs) with s = p(1-p). For each number of
verdicts n, 4,000 samples are drawn (seeds fixed) and the share whose interval holds κ is printed
as the Markdown table of docs/feedback.md ("The interval"). Samples where κ is undefined (both
raters constant) are left out.

    .venv/bin/python bench/kappa_coverage.py
"""

from __future__ import annotations

import numpy as np

from collector.feedback.agreement_stats import Confusion, cohen_kappa

KAPPAS = (0.3, 0.6, 0.8)
PASS_RATES = (0.5, 0.8)
SIZES = (30, 50, 100, 200, 400, 1000)
SAMPLES = 4000


def cells(kappa: float, pass_rate: float) -> list[float]:
    spread = pass_rate * (1 - pass_rate)
    return [
        pass_rate**2 + kappa * spread,
        (1 - kappa) * spread,
        (1 - kappa) * spread,
        (1 - pass_rate) ** 2 + kappa * spread,
    ]


def coverage(n: int, kappa: float, pass_rate: float) -> float:
    rng = np.random.default_rng(n * 7 + int(kappa * 10) * 3 + int(pass_rate * 10))
    covered = defined = 0
    for draw in rng.multinomial(n, cells(kappa, pass_rate), size=SAMPLES):
        result = cohen_kappa(Confusion(*map(int, draw)))
        if result.low is None or result.high is None:
            continue
        defined += 1
        covered += result.low <= kappa <= result.high
    return covered / defined


def main() -> None:
    columns = [(k, p) for k in KAPPAS for p in PASS_RATES]
    print("| n | " + " | ".join(f"κ {k}, pass rate {p}" for k, p in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for n in SIZES:
        print(f"| {n} | " + " | ".join(f"{coverage(n, k, p):.3f}" for k, p in columns) + " |")


if __name__ == "__main__":
    main()
