"""The shape every metric module declares (`Metric`), and the checks all of them share.

A metric module (`evaluators/metrics/<name>.py`) holds everything about one metric: its name(s),
its options, its deterministic variant, its judge prompt, verdict schema and version (when it has a
judge variant), what span it evaluates and its one-line doc, and declares them once as
`METRIC = Metric(...)`. The registry (`evaluators.registry`) finds the modules itself
(`evaluators.metrics.all_metrics`), so adding a metric is one module and nothing else to edit.

The shared checks: `pass_line` (a `min` option: a number from 0 to 1, or the metric's default),
`check_fraction` (any such option) and `doc_label` (how items and evidence name a document).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Self, overload

from semconv.models import RagTrace

from .scores import Score

if TYPE_CHECKING:  # the judge client (and `openai`) loads only when a judge variant is built
    from .judge.client import JudgeClient

Evaluator = Callable[[RagTrace], Score]
# What a score evaluates, so which span it is written back under (collector.processors.scoring):
# the retrieval (or rerank) span, the LLM span that wrote the answer, or the root span.
Evaluates = Literal["retrieval", "generation", "answer"]


def check_fraction(name: str, option: str, value: object) -> None:
    """ValueError unless `value` is None or a number from 0 to 1 (`<name>: <option> must be ...`)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name}: {option} must be a number between 0 and 1, got {value!r}")


@overload
def pass_line(name: str, min: float | None, default: float) -> float: ...
@overload
def pass_line(name: str, min: float | None, default: None) -> float | None: ...
def pass_line(name: str, min: float | None, default: float | None) -> float | None:
    """The pass line of score `name`: `min` checked (`check_fraction`), else `default`."""
    check_fraction(name, "min", min)
    return float(min) if min is not None else default


def doc_label(doc_id: str | None, rank: int) -> str:
    """How an item or a piece of evidence names a document: its id, else `rank N`."""
    return doc_id if doc_id is not None else f"rank {rank}"


@dataclass(frozen=True)
class Options:
    """A metric's own entry options (besides `min`, `mode`, `judge`): a subclass declares them as
    fields with their defaults and checks their values in `check`."""

    @classmethod
    def parse(cls, name: str, options: Mapping[str, Any]) -> Self:
        """The options of an entry for score `name`, unchecked; ValueError naming the first unknown
        key (in the entry's order)."""
        known = {field.name for field in dataclasses.fields(cls)}
        for option in options:
            if option not in known:
                raise ValueError(f"{option}: unknown option for {name}")
        return cls(**options)

    def check(self, name: str) -> None:
        """ValueError (`<name>: <option> ...`) for an option out of range; none by default."""


@dataclass(frozen=True)
class JudgeVariant:
    """A metric's judge variant: `build(client, name, min, mode, options)` -> evaluator, where
    `mode` is one of `modes` or None (the variant's default) and `options` holds only `options`'
    keys (the registry refuses any other, and a mode not in `modes`, with `mode_hint` appended
    when the metric has no modes)."""

    build: Callable[[JudgeClient, str, float | None, str | None, dict[str, Any]], Evaluator]
    modes: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    mode_hint: str = ""


@dataclass(frozen=True)
class Metric:
    """One metric, declared once in its module as `METRIC`.

    - `name`: the score name; `aliases`: other names that score the same, under that name. A
      `family` (the retrieval metrics) is named `<name>.<member>` or `<name>.<member>@<k>`.
    - `doc`: one line. `evaluates`: the span its scores are written back under. `order`: where it is
      listed (known names, the default set, the order of their scores).
    - `options` and `build(name, min, options)`: the deterministic variant, which every metric has
      (it checks `min` and the options' values; ValueError naming the option).
    - `judge`: the judge variant, if any. `defaults`: its entries in the default set (no judge).
    """

    name: str
    doc: str
    evaluates: Evaluates
    order: int
    build: Callable[[str, float | None, Any], Evaluator]
    options: type[Options] = Options
    aliases: tuple[str, ...] = ()
    family: tuple[str, ...] = ()
    judge: JudgeVariant | None = None
    defaults: tuple[str, ...] | None = None  # None: the metric's own name

    @property
    def names(self) -> tuple[str, ...]:
        """The names an entry may use (a family's members also take `@k`), aliases last."""
        if self.family:
            return tuple(f"{self.name}.{member}" for member in self.family)
        return (self.name, *self.aliases)

    def accepts(self, name: str) -> bool:
        """Whether an entry named `name` is this metric's (a family's: any `<name>.` name, which its
        `build` checks)."""
        if self.family:
            return name.startswith(f"{self.name}.")
        return name == self.name or name in self.aliases

    def scores(self, name: str) -> bool:
        """Whether a score named `name` is this metric's (`context_relevance.ndcg@5` is
        `context_relevance`'s: the judge variant's ranking metrics are named so)."""
        if self.family:
            return name.startswith(f"{self.name}.")
        return name == self.name or name in self.aliases or name.startswith(f"{self.name}.")

    def default_entries(self) -> list[dict[str, Any]]:
        return [{"name": name} for name in (self.defaults if self.defaults is not None else (self.name,))]

    def deterministic(self, name: str, min: float | None, options: Mapping[str, Any]) -> Evaluator:
        """The deterministic variant for an entry (its own options only; ValueError when wrong)."""
        return self.build(name, min, self.options.parse(name, options))
