"""The metrics, one module each: a module that declares `METRIC` (an `evaluators.metric.Metric`)
is a metric, found by `all_metrics` without a list to keep (a module without `METRIC` is not one).

Adding a metric is one module here, nothing else to edit: its names, options, deterministic variant,
judge prompt / verdict schema / version (when it has a judge variant), what span it evaluates and
its one-line doc, declared as `METRIC = Metric(...)` (docs/architecture.md, "Evaluators").
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from ..metric import Metric


@cache
def all_metrics() -> tuple[Metric, ...]:
    """Every metric of this package, in their `order` (checked: no name is claimed twice)."""
    found: list[Metric] = []
    for module in pkgutil.iter_modules(__path__):
        metric = getattr(importlib.import_module(f"{__name__}.{module.name}"), "METRIC", None)
        if isinstance(metric, Metric):
            found.append(metric)
    found.sort(key=lambda metric: (metric.order, metric.name))
    names = [name for metric in found for name in (metric.name, *metric.aliases)]
    if len(names) != len(set(names)):
        raise RuntimeError(f"two metrics claim one name: {sorted(names)}")
    return tuple(found)


def metric_for(name: str) -> Metric | None:
    """The metric an entry named `name` is (None: no metric has that name)."""
    return next((metric for metric in all_metrics() if metric.accepts(name)), None)


def metric_of_score(name: str) -> Metric | None:
    """The metric a score named `name` is from (`context_relevance.ndcg@5` is `context_relevance`'s)."""
    return next((metric for metric in all_metrics() if metric.scores(name)), None)
