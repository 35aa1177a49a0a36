"""The score record every evaluator returns (docs/scores.md, "Score record").

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
`Score.fail_error`, rather than setting `status` by hand, and items with `score_item` (or
`score_items` for several).

Speed: the deterministic evaluators build ~20 scores and ~100 items per trace, and pydantic
validation was a fifth of their time. The three constructors and `score_item(s)` therefore build the
record directly (as `model_construct` does, without its per-field bookkeeping) when every argument
already has its field's exact type (`str`, `float`, `bool`, `None`, a `list` of `ScoreItem`): the
rules above then hold by construction (`judged` checks and clamps the value and derives the status,
items are sorted failing first here), and the record is the one validation would build (same field
values, same fields set). Any other argument (an int threshold, a numpy float, a dict item, a
subclass) goes through validation as before. An import-time self-check compares both ways and turns
the direct path off if this pydantic version lays out models differently.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from operator import attrgetter
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from semconv.construct import new_instance, same_record, set_dict, set_extra, set_fields_set, set_private

ScoreStatus = Literal["pass", "fail", "error", "skipped"]

# Values are ratios of small integers or sums of logarithms: a value that should equal the threshold
# may land a few ulps below it (e.g. 0.7 computed as 7/10 vs a sum), and must still pass.
THRESHOLD_TOLERANCE = 1e-9


class ScoreItem(BaseModel):
    """One piece of evidence behind a score: a document, a claim, an expected fact, a citation.

    Frozen: scores of one trace may share items (the six retrieval metrics at one cutoff do)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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
        # NaN slips through ge/le comparisons; a score is never a silent NaN (an error has no value).
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

    @property
    def judge_tokens(self) -> int:
        """Prompt and completion tokens the judge spent on this score (0 without a judge)."""
        return (self.judge_input_tokens or 0) + (self.judge_output_tokens or 0)

    @property
    def judge_version(self) -> str | None:
        """What gave a judge score, as `scores.evaluator_version` stores it: `model@prompt_version`
        (the prompt version alone for a verdict decided by rule, without a call)."""
        return f"{self.model}@{self.prompt_version}" if self.model else self.prompt_version

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
        if (
            cls is Score
            and _DIRECT
            and type(value) is float
            and type(threshold) is float
            and type(name) is str
            and (label is None or type(label) is str)
            and (explanation is None or type(explanation) is str)
        ):
            direct = _sorted_items(items)
            if direct is not None:
                fields = _DEFAULTS.copy()
                fields["name"] = name
                fields["value"] = value
                fields["status"] = status
                fields["threshold"] = threshold
                fields["label"] = label
                fields["explanation"] = explanation
                fields["items"] = direct
                return _build(fields, _JUDGED_SET)
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
        if cls is Score and _DIRECT and _simple(name, reason, explanation, threshold):
            fields = _DEFAULTS.copy()
            fields["name"] = name
            fields["status"] = "skipped"
            fields["threshold"] = threshold
            fields["label"] = reason
            fields["explanation"] = explanation
            fields["items"] = []
            return _build(fields, _SKIP_SET)
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
        if cls is Score and _DIRECT and _simple(name, reason, explanation, threshold):
            direct = _sorted_items(items)
            if direct is not None:
                fields = _DEFAULTS.copy()
                fields["name"] = name
                fields["status"] = "error"
                fields["threshold"] = threshold
                fields["label"] = reason
                fields["explanation"] = explanation
                fields["items"] = direct
                return _build(fields, _ERROR_SET)
        return cls(
            name=name,
            status="error",
            label=reason,
            explanation=explanation,
            threshold=threshold,
            items=items or [],
        )


# --------------------------------------------------------------------------- direct construction
# See the module docstring. `_build` does what `BaseModel.model_construct` does (set the four
# instance slots), for a field dict already complete and in field order.

_ok = attrgetter("ok")
# Field defaults in field order; `items` (a default factory) is always given by the constructors.
_DEFAULTS: dict[str, Any] = {name: info.default for name, info in Score.model_fields.items()}
_JUDGED_SET = frozenset({"name", "value", "status", "threshold", "label", "explanation", "items"})
_SKIP_SET = frozenset({"name", "status", "label", "explanation", "threshold"})
_ERROR_SET = _SKIP_SET | {"items"}
_DIRECT = False  # set by the self-check below


def _build(fields: dict[str, Any], fields_set: frozenset[str]) -> Score:
    score = new_instance(Score)
    set_dict(score, fields)
    set_fields_set(score, set(fields_set))
    set_extra(score, None)
    set_private(score, None)
    return score


def _simple(name: object, reason: object, explanation: object, threshold: object) -> bool:
    return (
        type(name) is str
        and type(reason) is str
        and type(explanation) is str
        and (threshold is None or type(threshold) is float)
    )


def _sorted_items(items: object) -> list[ScoreItem] | None:
    """`items` failing first (a new list), or None when validation has to look at them."""
    if not items:
        return []
    if type(items) is not list:
        return None
    in_order = True  # already failing first: all False, then all True
    passing = False
    for item in items:
        if type(item) is not ScoreItem:
            return None
        ok = item.ok
        if ok is True:
            passing = True
        elif ok is not False or passing:
            in_order = False
    return list(items) if in_order else sorted(items, key=_ok)  # stable, as `Score._failing_first`


def score_item(text: str, ok: bool, evidence: str | None = None) -> ScoreItem:
    """`ScoreItem(text=text, ok=ok, evidence=evidence)`, built directly when the types are exact."""
    if _DIRECT and type(text) is str and type(ok) is bool and (evidence is None or type(evidence) is str):
        item = new_instance(ScoreItem)
        set_dict(item, {"text": text, "ok": ok, "evidence": evidence})
        set_fields_set(item, {"text", "ok", "evidence"})
        set_extra(item, None)
        set_private(item, None)
        return item
    return ScoreItem(text=text, ok=ok, evidence=evidence)


def score_items(rows: Iterable[tuple[str, bool, str | None]]) -> list[ScoreItem]:
    """`[score_item(text, ok, evidence) for text, ok, evidence in rows]`, in one loop."""
    if not _DIRECT:
        return [ScoreItem(text=text, ok=ok, evidence=evidence) for text, ok, evidence in rows]
    items: list[ScoreItem] = []
    append = items.append
    for text, ok, evidence in rows:
        if type(text) is str and type(ok) is bool and (evidence is None or type(evidence) is str):
            item = new_instance(ScoreItem)
            set_dict(item, {"text": text, "ok": ok, "evidence": evidence})
            set_fields_set(item, {"text", "ok", "evidence"})
            set_extra(item, None)
            set_private(item, None)
            append(item)
        else:
            append(ScoreItem(text=text, ok=ok, evidence=evidence))
    return items


def _self_check() -> bool:
    """Whether directly built records equal validated ones on this pydantic version."""
    global _DIRECT
    _DIRECT = True
    try:
        items = [score_item("a", True, "e"), *score_items([("b", False, None)])]
        validated_items = [
            ScoreItem(text="a", ok=True, evidence="e"),
            ScoreItem(text="b", ok=False, evidence=None),
        ]
        pairs: list[tuple[BaseModel, BaseModel]] = [
            *zip(items, validated_items, strict=True),
            (
                Score.judged("n", 0.5, 0.5, explanation="x", items=items, label="l"),
                Score(
                    name="n",
                    value=0.5,
                    status="pass",
                    threshold=0.5,
                    label="l",
                    explanation="x",
                    items=validated_items,
                ),
            ),
            (
                Score.skip("n", "r", "x", threshold=1.0),
                Score(name="n", status="skipped", label="r", explanation="x", threshold=1.0),
            ),
            (
                Score.fail_error("n", "r", "x", items=items),
                Score(
                    name="n",
                    status="error",
                    label="r",
                    explanation="x",
                    threshold=None,
                    items=validated_items,
                ),
            ),
        ]
        _DIRECT = all(same_record(built, validated) for built, validated in pairs)
    except Exception:  # a pydantic whose models differ: validate everything
        _DIRECT = False
    return _DIRECT


_self_check()
