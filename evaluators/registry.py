"""Evaluator entries (`{name: retrieval.recall@5, min: 0.8}`) -> evaluators.

An entry is a score name (docs/scores.md lists them all) plus options: `min` (or its synonym
`threshold`), `mode` and `judge` (both for the judge variants), and the evaluator's own options (e.g.
`coverage` for `faithfulness`, `entities` for `context_entity_recall`). Every mistake is a ValueError
that names the entry and the key, raised when the configuration is read, never while scoring
(docs/scores.md, "Configuring scores").

Every evaluator has a no-judge variant; these also have a judge variant: `faithfulness` (and its
aliases; option `mode`: claims | answer), `context_relevance` (option `metric`: share | precision@k |
ndcg@k | mrr), `context_precision`, `context_recall`, `answer_relevance` and `answer_correctness`
(option `mode`: f1 | precision). With a `JudgeClient` given, those names use the judge variant unless
the entry says `judge: false`; `judge: true` without a judge, or on a name with no judge variant
(the retrieval family, `context_entity_recall`, `citation`: exact rules), is refused.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from .retrieval import make_retrieval_evaluator
from .text import FAITHFULNESS_ALIASES, TEXT_EVALUATORS, Evaluator

if TYPE_CHECKING:  # the judge modules (and `openai`) load only when a judge variant is built
    from .judge.client import JudgeClient

# The deterministic set used when the configuration lists no evaluators. Precision@k is left out:
# it requires an explicit `min` (its reachable maximum depends on k and the case).
DEFAULT_ENTRIES: tuple[dict[str, Any], ...] = (
    {"name": "retrieval.hit@5"},
    {"name": "retrieval.recall@5"},
    {"name": "retrieval.mrr@5"},
    {"name": "retrieval.ndcg@5"},
    {"name": "retrieval.map@5"},
    *({"name": name} for name in TEXT_EVALUATORS),
)
_COMMON_KEYS = frozenset({"name", "min", "threshold", "mode", "judge"})
JUDGE_NAMES = (
    *FAITHFULNESS_ALIASES,
    "context_relevance",
    "context_precision",
    "context_recall",
    "answer_relevance",
    "answer_correctness",
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
    """Every score name an entry may use (retrieval names also take `@k`)."""
    retrieval = [f"retrieval.{m}" for m in ("hit", "recall", "precision", "mrr", "ndcg", "map")]
    return [*retrieval, *TEXT_EVALUATORS, *(a for a in FAITHFULNESS_ALIASES if a not in TEXT_EVALUATORS)]


def uses_judge(entry: Mapping[str, Any], judge_configured: bool) -> bool:
    """Whether an entry is scored by the judge: its name has a judge variant, a judge is
    configured, and the entry does not say `judge: false`."""
    return judge_configured and entry.get("name") in JUDGE_NAMES and entry.get("judge") is not False


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
    if wants is True and name not in JUDGE_NAMES:
        known = name.startswith("retrieval.") or name in TEXT_EVALUATORS
        if known:
            raise ValueError(f"judge: {name} is an exact rule with no judge variant; drop judge: true")
    if wants is True and judge is None and (name in JUDGE_NAMES):
        raise ValueError("judge: no judge configured (set judge.model)")
    use_judge = uses_judge(entry, judge is not None)
    options = {k: v for k, v in entry.items() if k not in _COMMON_KEYS}
    if use_judge:
        assert judge is not None
        return _judge_variant(name, judge, minimum, entry.get("mode"), options)
    if entry.get("mode") is not None:
        raise ValueError(f"mode: applies to the judge variant of {name}, which is not in use")
    if name.startswith("retrieval."):
        if options:
            raise ValueError(f"{sorted(options)[0]}: unknown option for {name}")
        return make_retrieval_evaluator(name, minimum)
    if name in FAITHFULNESS_ALIASES:
        return _call(TEXT_EVALUATORS["faithfulness"], name, minimum, {**options, "name": name})
    factory = TEXT_EVALUATORS.get(name)
    if factory is None:
        raise ValueError(f"name: unknown evaluator {name!r}; known: {', '.join(known_names())}")
    return _call(factory, name, minimum, options)


def _judge_variant(
    name: str, judge: JudgeClient, minimum: float | None, mode: Any, options: dict[str, Any]
) -> Evaluator:
    from .judge import scorers

    modes: dict[str, tuple[str, ...]] = {
        "answer_correctness": scorers.ANSWER_CORRECTNESS_MODES,
        **{alias: scorers.FAITHFULNESS_MODES for alias in FAITHFULNESS_ALIASES},
    }
    if mode is not None and name not in modes:
        hint = " (use metric: share | precision@k | ndcg@k | mrr)" if name == "context_relevance" else ""
        raise ValueError(f"mode: unknown option for {name}{hint}")
    if mode is not None and mode not in modes[name]:
        raise ValueError(f"mode: must be {' or '.join(modes[name])} for {name}, got {mode!r}")
    metric = options.pop("metric", "share") if name == "context_relevance" else None
    for option in options:
        raise ValueError(f"{option}: unknown option for the judge variant of {name}")
    if name in FAITHFULNESS_ALIASES:
        return scorers.make_judge_faithfulness(judge, minimum, mode=mode or "claims", name=name)
    if name == "context_relevance":
        assert metric is not None
        return scorers.make_judge_context_relevance(judge, minimum, metric=metric)
    if name == "answer_correctness":
        return scorers.make_judge_answer_correctness(judge, minimum, mode=mode or "f1")
    factories: dict[str, Callable[[JudgeClient, float | None], Evaluator]] = {
        "context_precision": scorers.make_judge_context_precision,
        "context_recall": scorers.make_judge_context_recall,
        "answer_relevance": scorers.make_judge_answer_relevance,
    }
    return factories[name](judge, minimum)


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
    minimum, threshold = entry.get("min"), entry.get("threshold")
    if minimum is not None and threshold is not None and minimum != threshold:
        raise ValueError("threshold: give min or threshold (the same thing), not both")
    value = minimum if minimum is not None else threshold
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ValueError(f"min: must be a number from 0 to 1, got {value!r}")
    return None if value is None else float(value)


def _call(
    factory: Callable[..., Evaluator], name: str, minimum: float | None, options: dict[str, Any]
) -> Evaluator:
    """Call a factory with the entry's options, turning an unknown option into a clear error."""
    accepted = inspect.signature(factory).parameters
    for option in options:
        if option not in accepted or option == "min":
            raise ValueError(f"{option}: unknown option for {name}")
    # The factory checks `min` and its own options; its message names the evaluator and the option.
    return factory(minimum, **options)
