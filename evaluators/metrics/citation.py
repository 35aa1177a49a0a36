"""citation: do the answer's `[id]` citation markers point to retrieved documents?

An exact rule, no judge variant. Default `min` 1 ("all valid").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from semconv.models import RagTrace

from ..lexical import no_retrieval
from ..metric import Evaluator, Metric, Options, pass_line
from ..scores import Score, score_item
from ..textutil import blank

NAME = "citation"
DEFAULT_MIN = 1.0

_CITATION = re.compile(r"\[([^\[\]\n]{1,200})\](?!\()")


@dataclass(frozen=True)
class CitationOptions(Options):
    ranks: bool = False


def make_citation(min: float | None = None, *, ranks: bool = False) -> Evaluator:
    """`[id]` citation markers in the answer: every cited id must be a retrieved document's id.

    Markers: `[...]` not followed by `(` (so Markdown links are not markers); `[a, b]` or `[a; b]`
    cites several ids. Value: the share of cited ids (per occurrence) that are retrieved; default
    `min` 1 (all valid). With `ranks=True`, a marker that is a number n and no document's id is
    read as the n-th retrieved document (for prompts that number the documents). No marker ->
    `skipped` `no_citations`. Items: one per citation, invalid first.
    """
    return _build(NAME, min, CitationOptions(ranks))


def _build(name: str, min: float | None, options: CitationOptions) -> Evaluator:
    threshold = pass_line(name, min, DEFAULT_MIN)
    ranks = options.ranks

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        if blank(trace.answer):
            return Score.skip(name, "no_answer", "the trace has no answer to check", threshold=threshold)
        assert trace.answer is not None
        cited = [
            part.strip()
            for match in _CITATION.finditer(trace.answer)
            for part in re.split(r"[,;]", match.group(1))
            if part.strip()
        ]
        if not cited:
            return Score.skip(
                name, "no_citations", "the answer has no [id] citation markers", threshold=threshold
            )
        documents = trace.contexts
        position: dict[str, int] = {}
        for i, doc in enumerate(documents, start=1):
            if doc.id is not None:
                position.setdefault(doc.id, i)
        items = []
        valid = 0
        for marker in cited:
            rank = position.get(marker)
            if rank is not None:
                evidence = f"retrieved document at rank {rank}"
            elif ranks and marker.isdigit() and 1 <= int(marker) <= len(documents):
                rank = int(marker)
                doc_id = documents[rank - 1].id
                evidence = f"retrieved document at rank {rank}" + (f" ({doc_id})" if doc_id else "")
            if rank is not None:
                valid += 1
                items.append(score_item(text=f"[{marker}]", ok=True, evidence=evidence))
            else:
                known = ", ".join(position) if position else "none of the retrieved documents has an id"
                items.append(
                    score_item(
                        text=f"[{marker}]",
                        ok=False,
                        evidence=f"not a retrieved document id (retrieved: {known})",
                    )
                )
        invalid = [item.text for item in items if not item.ok]
        explanation = f"{valid} of {len(cited)} citations point to a retrieved document"
        if invalid:
            explanation += "; pointing nowhere: " + ", ".join(dict.fromkeys(invalid))
        return Score.judged(name, valid / len(cited), threshold, explanation=explanation, items=items)

    return evaluate


METRIC = Metric(
    name=NAME,
    doc="The share of the answer's [id] citations that point to a retrieved document.",
    evaluates="generation",
    order=40,
    build=_build,
    options=CitationOptions,
)
