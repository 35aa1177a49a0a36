"""A score given from outside, read as ragpulse reads its own: a status from the label or the value.

People and apps label feedback in their own words (`thumbs_down`, `correct`, `no`), and evaluation
events carry `gen_ai.evaluation.score.label` and `.value` with no threshold. A score counts as
`pass` or `fail` in aggregates, gates and agreement only when its words say so:

- a label that is a known word of approval or disapproval (`PASS_LABELS`, `FAIL_LABELS`, compared
  without case, spaces, `-` or `_`) decides;
- without such a label, a value of exactly 1 is `pass` and 0 is `fail` (thumbs as numbers);
- anything else (a rating of 4 out of 5, a label like `neutral`) has no status: it counts in `n`
  and in the mean of the values, not in pass rates.

A label that decides and no value gives the value 1 (pass) or 0 (fail), so that means and AUCs
see thumbs given as words. Pure logic.
"""

from __future__ import annotations

import math
from typing import Literal

Verdict = Literal["pass", "fail"]

PASS_LABELS = frozenset(
    {
        "pass", "passed", "true", "yes", "y", "ok", "good", "correct", "right", "positive", "up",
        "thumbsup", "like", "liked", "helpful", "relevant", "grounded", "faithful", "supported",
        "resolved", "accept", "accepted", "approve", "approved", "+1", "1", "👍",
    }
)  # fmt: skip
FAIL_LABELS = frozenset(
    {
        "fail", "failed", "false", "no", "n", "bad", "incorrect", "wrong", "negative", "down",
        "thumbsdown", "dislike", "disliked", "unhelpful", "irrelevant", "ungrounded", "unfaithful",
        "unsupported", "hallucinated", "hallucination", "unresolved", "reject", "rejected", "-1",
        "0", "👎",
    }
)  # fmt: skip


def _word(label: str) -> str:
    return label.strip().lower().replace(" ", "").replace("_", "").replace("-", "")


def verdict(value: float | None, label: str | None) -> Verdict | None:
    """`pass` or `fail` as the label (first) or a 0/1 value says, else None (module docstring)."""
    if label:
        # As written first (`-1`, emoji), then without case, spaces and separators (`Thumbs-Up`).
        for word in (label.strip().lower(), _word(label)):
            if word in PASS_LABELS:
                return "pass"
            if word in FAIL_LABELS:
                return "fail"
    if value is not None and math.isfinite(value):
        if value == 1:
            return "pass"
        if value == 0:
            return "fail"
    return None


def value_of(value: float | None, status: str | None) -> float | None:
    """The value stored: the one given, else 1 for a pass and 0 for a fail read from the label."""
    if value is not None:
        return value
    if status == "pass":
        return 1.0
    if status == "fail":
        return 0.0
    return None
