"""Evaluator entries (DESIGN §9: `{name: retrieval.recall@5, min: 0.8}`) -> evaluators.

An entry is a score name of DESIGN §6 plus options: `min` (or its synonym `threshold`), `mode` and
`judge` (both for the judge variants), and the evaluator's own options (e.g. `coverage` for
`faithfulness`, `entities` for `context_entity_recall`). Every mistake is a ValueError that names
the entry and the key, raised when the configuration is read, never while scoring.

Built so far: the retrieval family and the no-judge variants of the text evaluators. The judge
variants come next; until they exist, `judge: true` and `mode` are refused with a message saying so.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .retrieval import make_retrieval_evaluator
from .text import FAITHFULNESS_ALIASES, TEXT_EVALUATORS, Evaluator

# The deterministic set used when the configuration lists no evaluators. Precision@k is left out:
# DESIGN requires an explicit `min` for it (its reachable maximum depends on k and the case).
DEFAULT_ENTRIES: tuple[dict[str, Any], ...] = (
    {"name": "retrieval.hit@5"},
    {"name": "retrieval.recall@5"},
    {"name": "retrieval.mrr@5"},
    {"name": "retrieval.ndcg@5"},
    {"name": "retrieval.map@5"},
    *({"name": name} for name in TEXT_EVALUATORS),
)
_COMMON_KEYS = frozenset({"name", "min", "threshold", "mode", "judge"})


def known_names() -> list[str]:
    """Every score name an entry may use (retrieval names also take `@k`)."""
    retrieval = [f"retrieval.{m}" for m in ("hit", "recall", "precision", "mrr", "ndcg", "map")]
    return [*retrieval, *TEXT_EVALUATORS, *(a for a in FAITHFULNESS_ALIASES if a not in TEXT_EVALUATORS)]


def build_evaluator(entry: Mapping[str, Any]) -> Evaluator:
    """One evaluator from one entry; ValueError (`<key>: <problem>`) when the entry is wrong."""
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("name: required, a score name such as retrieval.recall@5 or faithfulness")
    minimum = _minimum(entry)
    if entry.get("judge") is True:
        raise ValueError(f"judge: the judge variant of {name} is not built yet; use judge: false")
    if entry.get("mode") is not None:
        raise ValueError(f"mode: applies to the judge variant of {name}, which is not built yet")
    options = {k: v for k, v in entry.items() if k not in _COMMON_KEYS}
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


def build_evaluators(entries: Sequence[Mapping[str, Any]] | None) -> list[Evaluator]:
    """Every evaluator of a configuration's `evaluators:` list (None: the default deterministic set).
    Errors name the entry: `evaluators[2].coverage: ...`."""
    built = []
    for index, entry in enumerate(DEFAULT_ENTRIES if entries is None else entries):
        try:
            built.append(build_evaluator(entry))
        except ValueError as exc:
            raise ValueError(f"evaluators[{index}].{exc}") from None
    return built


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
