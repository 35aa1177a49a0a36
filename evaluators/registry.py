"""Evaluator entries (`{name: retrieval.recall@5, min: 0.8}`) -> evaluators.

An entry is a score name (docs/scores.md lists them all) plus options: `min` (or its synonym
`threshold`), `mode` and `judge` (both for the judge variants), and the metric's own options (e.g.
`coverage` for `faithfulness`, `entities` for `context_entity_recall`). Every mistake is a ValueError
that names the entry and the key, raised when the configuration is read, never while scoring
(docs/scores.md, "Configuring scores").

The metrics are the modules of `evaluators.metrics`, each declaring its names, options, variants
and evaluated span once (`evaluators.metric.Metric`); nothing here lists them. Every metric has a
no-judge variant; those with a judge variant use it when a `JudgeClient` is given, unless the entry
says `judge: false`; `judge: true` without a judge, or on a metric with no judge variant (an exact
rule), is refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import metadata
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from .metric import Evaluates, Evaluator, JudgeVariant
from .metrics import all_metrics, metric_for, metric_of_score

if TYPE_CHECKING:  # the judge modules (and `openai`) load only when a judge variant is built
    from .judge.client import JudgeClient

# The deterministic set used when the configuration lists no evaluators: every metric's defaults.
DEFAULT_ENTRIES: tuple[dict[str, Any], ...] = tuple(
    entry for metric in all_metrics() for entry in metric.default_entries()
)
_COMMON_KEYS = frozenset({"name", "min", "threshold", "mode", "judge"})
# Every name (aliases too) of the metrics that have a judge variant.
JUDGE_NAMES: tuple[str, ...] = tuple(
    name for metric in all_metrics() if metric.judge is not None for name in (metric.name, *metric.aliases)
)


class EvaluatorEntry(BaseModel):
    """One `evaluators:` config entry: a score name plus options. Only the common keys are typed
    here; `check_entries` (or `build_evaluators`) checks the name and every option."""

    model_config = ConfigDict(extra="allow")
    name: str
    min: float | None = None
    threshold: float | None = None
    mode: str | None = None
    judge: bool | None = None

    def as_entry(self) -> dict[str, Any]:
        """The entry as `build_evaluator` takes it (keys left out of the file stay out)."""
        return self.model_dump(exclude_none=True)


def known_names() -> list[str]:
    """Every score name an entry may use (retrieval names also take `@k`), aliases last."""
    metrics = all_metrics()
    names = [name for metric in metrics for name in metric.names if name not in metric.aliases]
    return [*names, *(alias for metric in metrics for alias in metric.aliases)]


def uses_judge(entry: Mapping[str, Any], judge_configured: bool) -> bool:
    """Whether an entry is scored by the judge: its name has a judge variant, a judge is
    configured, and the entry does not say `judge: false`."""
    return judge_configured and entry.get("name") in JUDGE_NAMES and entry.get("judge") is not False


@lru_cache(maxsize=1024)
def evaluates(name: str) -> Evaluates:
    """What a score named `name` evaluates, as its metric declares: `retrieval`, `generation` or
    `answer` (a name no metric has: `answer`, the trace as a whole)."""
    metric = metric_of_score(name)
    return metric.evaluates if metric is not None else "answer"


def build_evaluator(entry: Mapping[str, Any], judge: JudgeClient | None = None) -> Evaluator:
    """One evaluator from one entry; ValueError (`<key>: <problem>`) when the entry is wrong.

    With `judge`, names that have a judge variant use it unless the entry says `judge: false`."""
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("name: required, a score name such as retrieval.recall@5 or faithfulness")
    minimum = _minimum(entry)
    wants = entry.get("judge")
    if wants is not None and not isinstance(wants, bool):
        raise ValueError(f"judge: must be true or false, got {wants!r}")
    metric = metric_for(name)
    if wants is True and metric is not None and metric.judge is None:
        raise ValueError(f"judge: {name} is an exact rule with no judge variant; drop judge: true")
    if wants is True and judge is None and name in JUDGE_NAMES:
        raise ValueError("judge: no judge configured (set judge.model)")
    options = {k: v for k, v in entry.items() if k not in _COMMON_KEYS}
    if uses_judge(entry, judge is not None):
        assert judge is not None and metric is not None and metric.judge is not None
        return _judge_variant(metric.judge, name, judge, minimum, entry.get("mode"), options)
    if entry.get("mode") is not None:
        raise ValueError(f"mode: applies to the judge variant of {name}, which is not in use")
    if metric is None:
        raise ValueError(f"name: unknown evaluator {name!r}; known: {', '.join(known_names())}")
    # The metric checks `min` and its own options; its message names the score and the option.
    return metric.deterministic(name, minimum, options)


def _judge_variant(
    variant: JudgeVariant,
    name: str,
    judge: JudgeClient,
    minimum: float | None,
    mode: Any,
    options: dict[str, Any],
) -> Evaluator:
    if mode is not None and not variant.modes:
        raise ValueError(f"mode: unknown option for {name}{variant.mode_hint}")
    if mode is not None and mode not in variant.modes:
        raise ValueError(f"mode: must be {' or '.join(variant.modes)} for {name}, got {mode!r}")
    for option in options:
        if option not in variant.options:
            raise ValueError(f"{option}: unknown option for the judge variant of {name}")
    return variant.build(judge, name, minimum, mode, options)


def build_evaluators(
    entries: Sequence[Mapping[str, Any]] | None, judge: JudgeClient | None = None
) -> list[Evaluator]:
    """Every evaluator of a configuration's `evaluators:` list (None: the default deterministic set,
    with every evaluator that has a judge variant using it when `judge` is given). Errors name the
    entry: `evaluators[2].coverage: ...`."""
    built = []
    for index, entry in enumerate(DEFAULT_ENTRIES if entries is None else entries):
        try:
            built.append(build_evaluator(entry, judge))
        except ValueError as exc:
            raise ValueError(f"evaluators[{index}].{exc}") from None
    return built


@lru_cache(maxsize=1)
def _package_version() -> str:
    try:
        return metadata.version("ragpulse")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "dev"


def entry_version(entry: Mapping[str, Any]) -> str:
    """The `evaluator_version` of the scores a deterministic evaluator built from `entry` gives:
    ragpulse's version and a hash of the entry (its threshold and options), so that a score given
    after an upgrade or a changed threshold is told apart from one given before."""
    canonical = json.dumps(dict(entry), sort_keys=True, default=str)
    return f"ragpulse-{_package_version()}#{hashlib.sha256(canonical.encode()).hexdigest()[:8]}"


def check_entries(entries: Sequence[Mapping[str, Any]] | None, judge_configured: bool) -> None:
    """Raise the ValueError `build_evaluators` would raise for these entries (`evaluators[i].key:
    problem`), without a judge to call: with `judge_configured`, the judge variants are built on a
    client that is never used, then dropped."""
    if not judge_configured:
        build_evaluators(entries)
        return
    from .judge.client import JudgeClient
    from .judge.settings import JudgeSettings

    with JudgeClient(JudgeSettings(model="unused")) as unused:
        build_evaluators(entries, unused)


def _minimum(entry: Mapping[str, Any]) -> float | None:
    """The entry's `min` (or `threshold`): a number, checked against 0..1 by the metric."""
    minimum, threshold = entry.get("min"), entry.get("threshold")
    if minimum is not None and threshold is not None and minimum != threshold:
        raise ValueError("threshold: give min or threshold (the same thing), not both")
    value = minimum if minimum is not None else threshold
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ValueError(f"min: must be a number from 0 to 1, got {value!r}")
    return None if value is None else float(value)
