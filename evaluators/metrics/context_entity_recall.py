"""context_entity_recall: do the documents contain the expected answer's names, numbers and dates?

An exact rule, no judge variant: entities are found by `textutil.entities` and matched by key
(`March 3, 2026` = `2026-03-03`, `30 days` = `30-day`), names case-insensitively; RAGAS compares
LLM-extracted strings exactly. Default `min` 0.8.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from semconv.models import RagTrace

from .. import textutil as tu
from ..lexical import no_document_text, no_retrieval, read_context
from ..metric import Evaluator, Metric, Options, pass_line
from ..scores import Score, score_item

NAME = "context_entity_recall"
DEFAULT_MIN = 0.8


@dataclass(frozen=True)
class EntityRecallOptions(Options):
    entities: Sequence[str] | None = None

    def check(self, name: str) -> None:
        entities = self.entities
        if entities is None:
            return
        if isinstance(entities, str) or not all(isinstance(e, str) and e.strip() for e in entities):
            raise ValueError(f"{name}: entities must be a list of non-empty strings, got {entities!r}")
        if not entities:
            raise ValueError(f"{name}: entities must not be empty (leave it out to use the expected answer)")


def make_context_entity_recall(
    min: float | None = None, *, entities: Sequence[str] | None = None
) -> Evaluator:
    """The share of the expected answer's entities (names, numbers, dates; `textutil.entities`) that
    occur in at least one retrieved document. Default `min` 0.8.

    With `entities` (a list of strings) those are looked for instead, and no expected answer is
    needed. No entities in the expected answer -> `skipped` `no_entities` (RAGAS: 0.0; an absent
    reference is not a failure). Items: one per entity; evidence the first document that has it, or
    "not in any retrieved document".
    """
    return _build(NAME, min, EntityRecallOptions(entities))


def _build(name: str, min: float | None, options: EntityRecallOptions) -> Evaluator:
    threshold = pass_line(name, min, DEFAULT_MIN)
    options.check(name)
    listed: tuple[tu.Entity, ...] | None = None
    if options.entities is not None:
        listed = tuple(dict.fromkeys(tu.entity_from_text(e) for e in options.entities))

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        if listed is not None:
            wanted = listed
            source = "listed"
        else:
            if tu.blank(trace.expected_answer):
                return Score.skip(
                    name, "no_reference", "no expected answer and no `entities` list", threshold=threshold
                )
            assert trace.expected_answer is not None
            wanted = tu.entities(trace.expected_answer)
            source = "expected-answer"
            if not wanted:
                return Score.skip(
                    name,
                    "no_entities",
                    "the expected answer has no names, numbers or dates to look for",
                    threshold=threshold,
                )
        context = read_context(trace)
        if context is None:
            return no_document_text(name, threshold)
        indexes = [(doc.label, tu.entity_index(doc.text)) for doc in context.docs]
        items = []
        missing = []
        for entity in wanted:
            where = next((label for label, index in indexes if tu.entity_in(entity, index)), None)
            if where is None:
                missing.append(entity.text)
            evidence = f"in document {where}" if where is not None else "not in any retrieved document"
            items.append(
                score_item(text=f"{entity.text} ({entity.kind})", ok=where is not None, evidence=evidence)
            )
        found = len(wanted) - len(missing)
        if not context.docs:
            explanation = f"no documents retrieved; none of the {len(wanted)} {source} entities found"
        else:
            explanation = f"{found} of {len(wanted)} {source} entities found in the retrieved documents"
            if missing:
                explanation += "; missing: " + ", ".join(missing)
            explanation += context.note()
        return Score.judged(name, found / len(wanted), threshold, explanation=explanation, items=items)

    return evaluate


METRIC = Metric(
    name=NAME,
    doc="The share of the expected answer's names, numbers and dates found in the retrieved documents.",
    evaluates="retrieval",
    order=30,
    build=_build,
    options=EntityRecallOptions,
)
