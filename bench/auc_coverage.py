"""How often DeLong's 95 % interval of a score's AUC against users' feedback
(`collector/feedback/agreement_stats.py`, `delong_auc`) holds the true AUC.

Binormal scores: traces users gave a fail score N(0, 1), those they gave a pass N(d, 1), so the true
AUC is Φ(d / √2). For each number of traces n, a share of them with negative feedback, and an AUC,
`--samples` samples are drawn (seeds fixed) and the share whose interval holds the AUC is printed as
the Markdown table of docs/feedback.md ("Does a score matter to users"). `--rounded` rounds the
scores to one decimal, as many scores are (ties between the classes count one half).

    .venv/bin/python bench/auc_coverage.py
    .venv/bin/python bench/auc_coverage.py --rounded
"""

from __future__ import annotations

import argparse
import math
from statistics import NormalDist

import numpy as np

from collector.feedback.agreement_stats import delong_auc

AUCS = (0.6, 0.75, 0.9)
NEGATIVE_SHARES = (0.2, 0.5)
SIZES = (30, 50, 100, 200, 400, 1000)


def separation(auc: float) -> float:
    """The d of the binormal model with this AUC: Φ(d / √2) = auc."""
    return NormalDist().inv_cdf(auc) * math.sqrt(2)


def draw(rng: np.random.Generator, mean: float, count: int, rounded: bool) -> np.ndarray:
    """`count` scores of one class; rounded: mapped into [0, 1] (about 0.5 ± 0.5) to one decimal."""
    values = rng.normal(mean, 1.0, count)
    return np.round(np.clip(0.5 + values / 6, 0, 1), 1) if rounded else values


def true_auc(auc: float, rounded: bool) -> float:
    """The model's AUC: `auc`, or (rounded) that of the rounded scores, ties counting one half, from
    400,000 draws a side."""
    if not rounded:
        return auc
    rng = np.random.default_rng(7)
    negative = draw(rng, 0.0, 400_000, True)
    positive = draw(rng, separation(auc), 400_000, True)
    levels = np.round(np.arange(0, 1.05, 0.1), 1)
    neg = np.array([np.mean(negative == v) for v in levels])
    pos = np.array([np.mean(positive == v) for v in levels])
    below = np.concatenate([[0.0], np.cumsum(neg)[:-1]])
    return float(np.sum(pos * (below + neg / 2)))


def coverage(n: int, auc: float, negative_share: float, samples: int, rounded: bool) -> float:
    """The share of samples whose interval holds the model's true AUC (samples without an interval
    left out)."""
    rng = np.random.default_rng(n * 11 + int(auc * 100) * 3 + int(negative_share * 10))
    negatives = max(2, round(n * negative_share))
    d, truth = separation(auc), true_auc(auc, rounded)
    covered = defined = 0
    for _ in range(samples):
        negative = draw(rng, 0.0, negatives, rounded)
        positive = draw(rng, d, n - negatives, rounded)
        result = delong_auc(positive.tolist(), negative.tolist())
        if result.low is None or result.high is None:
            continue
        defined += 1
        covered += result.low <= truth <= result.high
    return covered / defined


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--rounded", action="store_true", help="scores rounded to one decimal")
    args = parser.parse_args()
    columns = [(a, s) for a in AUCS for s in NEGATIVE_SHARES]
    truths = {a: true_auc(a, args.rounded) for a in AUCS}
    print("| n | " + " | ".join(f"AUC {truths[a]:.2f}, {int(s * 100)} % fail" for a, s in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for n in SIZES:
        cells = [coverage(n, a, s, args.samples, args.rounded) for a, s in columns]
        print(f"| {n} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
