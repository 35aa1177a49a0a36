"""The score record every evaluator returns (DESIGN.md section 6).

A score is `name`, `value` (0..1 or None), `status` (`pass` | `fail` | `error` | `skipped`),
`threshold`, `label`, `explanation` and `items` (`{text, ok, evidence}`, failing items first), plus
the judge's provider / model / temperature / prompt version / config hash, judge tokens and latency
for judge scores. The record enforces the rules that downstream code relies on:

- an `error` (or `skipped`) score has no value and never passes;
- a `pass` or `fail` score has a finite value in 0..1;
- items are kept failing first (stable, so each evaluator's own order survives within each group).

`label` is a short machine-readable tag: the reason code of a `skipped` or `error` score (for
example `no_expected_ids`, `missing_document_id`), or a categorical verdict an evaluator wants to
expose. `explanation` is the human sentence.

Build scores with `Score.judged` (pass/fail from value and threshold), `Score.skip` and
`Score.fail_error`, rather than setting `status` by hand.
"""

from __future__ import annotations

import math
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ScoreStatus = Literal["pass", "fail", "error", "skipped"]

# Values are ratios of small integers or sums of logarithms: a value that should equal the threshold
# may land a few ulps below it (e.g. 0.7 computed as 7/10 vs a sum), and must still pass.
THRESHOLD_TOLERANCE = 1e-9


class ScoreItem(BaseModel):
    """One piece of evidence behind a score: a document, a claim, an expected fact, a citation."""

    model_config = ConfigDict(extra="forbid")

    text: str
    ok: bool
    evidence: str | None = None


class Score(BaseModel):
    """One evaluator's result for one trace (or one eval case)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    value: float | None = Field(None, ge=0.0, le=1.0)
    status: ScoreStatus
    threshold: float | None = None
    label: str | None = None
    explanation: str | None = None
    items: list[ScoreItem] = Field(default_factory=list)
    # Judge scores only.
    provider: str | None = None
    model: str | None = None
    temperature: float | None = None
    prompt_version: str | None = None
    config_hash: str | None = None
    judge_input_tokens: int | None = Field(None, ge=0)
    judge_output_tokens: int | None = Field(None, ge=0)
    latency_ms: float | None = Field(None, ge=0.0)

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        # NaN slips through ge/le comparisons; a silent NaN is exactly what section 6 forbids.
        if value is not None and not math.isfinite(value):
            raise ValueError("score value must be finite (use status error/skipped with value None)")
        return value

    @field_validator("items")
    @classmethod
    def _failing_first(cls, items: list[ScoreItem]) -> list[ScoreItem]:
        return sorted(items, key=lambda item: item.ok)  # sorted() is stable: False before True

    @model_validator(mode="after")
    def _status_matches_value(self) -> Self:
        if self.status in ("pass", "fail") and self.value is None:
            raise ValueError(f"a {self.status} score needs a value")
        if self.status in ("error", "skipped") and self.value is not None:
            raise ValueError(f"an {self.status} score has no value")
        return self

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @classmethod
    def judged(
        cls,
        name: str,
        value: float | None,
        threshold: float,
        *,
        explanation: str | None = None,
        items: list[ScoreItem] | None = None,
        label: str | None = None,
    ) -> Score:
        """`pass` when `value >= threshold` (within `THRESHOLD_TOLERANCE`), else `fail`.

        A missing or non-finite value is an `error` (label `no_value`), never a pass or a 0.
        """
        if value is None or not math.isfinite(value):
            return cls.fail_error(
                name,
                "no_value",
                explanation or "the evaluator produced no value",
                threshold=threshold,
                items=items,
            )
        value = min(1.0, max(0.0, value))  # float noise only; metrics are 0..1 by construction
        status: ScoreStatus = "pass" if value >= threshold - THRESHOLD_TOLERANCE else "fail"
        return cls(
            name=name,
            value=value,
            status=status,
            threshold=threshold,
            label=label,
            explanation=explanation,
            items=items or [],
        )

    @classmethod
    def skip(cls, name: str, reason: str, explanation: str, *, threshold: float | None = None) -> Score:
        """A score whose input is absent (e.g. no expected ids online): value None, reason in `label`."""
        return cls(name=name, status="skipped", label=reason, explanation=explanation, threshold=threshold)

    @classmethod
    def fail_error(
        cls,
        name: str,
        reason: str,
        explanation: str,
        *,
        threshold: float | None = None,
        items: list[ScoreItem] | None = None,
    ) -> Score:
        """A score that could not be computed: value None, status `error`, reason code in `label`."""
        return cls(
            name=name,
            status="error",
            label=reason,
            explanation=explanation,
            threshold=threshold,
            items=items or [],
        )
