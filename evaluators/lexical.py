"""The no-judge (lexical) machinery several metrics share: checkable sentences (`claims`), the
coverage rule, a trace's context documents read once, and the skips every metric gives alike.

**The no-judge variants are word-overlap heuristics, not judgements.** They count shared words and
numbers; they do not read. A paraphrase with other words looks unsupported, a sentence that reuses
the document's words to say the opposite ("refunds are *not* possible within 30 days") looks
supported, and negations, word order and synonyms are invisible (see `evaluators.textutil` for the
exact tokenising). Use them as cheap, deterministic, always-on signals — in CI without a model,
online on every trace, as a tripwire for invented numbers — and use the judge variants
(docs/scores.md, "The judge") when the verdict matters. Each metric module
(`evaluators/metrics/`) says how its two variants differ.

The coverage rule (faithfulness, context_recall, answer_correctness's items): a sentence is
*covered* when one document (not the documents pooled) contains at least `coverage` (default 0.7)
of the sentence's content words AND every number of the sentence (by value: `$25` needs a 25 in
that document). So an invented number is always unsupported, however much of the wording overlaps.
A sentence is *checkable* when it has a content word or a number and is not a question, a refusal
("I'm sorry, I could not find that ...", "I don't know") or a pleasantry ("Hope this helps");
`[id]` citation markers are removed before checking.

Decisions shared by the no-judge variants (each metric's docstring has the details):

- Missing input is never a pass and never an error: no answer -> `skipped` `no_answer`; no question
  -> `no_question`; no expected answer -> `no_reference`; documents retrieved but none with text
  recorded -> `no_document_text`; an answer with no checkable sentence (a refusal) ->
  `skipped` `no_claims` (RAGAS gives NaN for the same reason): a null with a reason, not a 0.
- No retrieval step at all (small talk, an action-only tool call): the scores of documents do not
  apply, `skipped` `no_retrieval` (an error in `ragpulse eval` suites). A retrieval that found no
  documents: the context supports nothing, so the context scores and faithfulness are 0 (`fail`), as
  RAGAS gives 0 for an empty context.
- A document without text among documents with text is read as empty (it supports nothing and is
  not useful); the explanation says how many there were. Documents are named by id, or
  `rank N` when they have none.
- Default thresholds are each metric's `DEFAULT_MIN`, shared by its judge variant.

Every factory checks its options when called (ValueError for a `min` or option out of range) and
returns a callable `RagTrace -> Score`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from semconv.models import Document, RagTrace

from . import textutil as tu
from .metric import doc_label
from .scores import Score, score_items

DEFAULT_COVERAGE = 0.7

_CITATION_WITH_SPACE = re.compile(r"[ \t]*\[[^\[\]\n]{1,200}\](?!\()")
_REFUSAL = re.compile(
    r"\b(?:i|we)\s+(?:do\s+not|don't|cannot|can't|could\s+not|couldn't|am\s+unable\s+to|'m\s+unable\s+to|"
    r"am\s+not\s+able\s+to|'m\s+not\s+able\s+to|have\s+no|don't\s+have|do\s+not\s+have)\s+"
    r"(?:know|find|answer|help|say|tell|locate|determine|see|information|access|enough)"
    r"|\b(?:i'm|i\s+am)\s+(?:sorry|afraid)\b|\bas\s+an\s+ai\b"
    r"|\bno\s+(?:relevant\s+)?information\s+(?:about|on|regarding)\b"
    r"|\b(?:not|isn't|is\s+not)\s+(?:mentioned|stated|covered|specified|found)\s+in\s+(?:the|our|my|any)\s+"
    r"(?:context|documents?|information|sources?|knowledge)",
    re.IGNORECASE,
)
# Cheap pre-check: the refusal pattern needs one of these substrings.
_REFUSAL_HINTS = (
    "i ",
    "we ",
    "i'm",
    "as an ai",
    "information",
    "mentioned",
    "stated",
    "covered",
    "specified",
    "found",
)
_REFUSAL_HINT = re.compile("|".join(re.escape(hint) for hint in _REFUSAL_HINTS))  # any of them
_PLEASANTRY = re.compile(
    r"^\W*(?:hope\s+(?:this|that)\s+helps|let\s+me\s+know|feel\s+free|is\s+there\s+anything\s+else|"
    r"happy\s+to\s+help|thanks?\b|thank\s+you|you're\s+welcome|glad\s+to\s+help)",
    re.IGNORECASE,
)


def strip_citations(text: str) -> str:
    return _stripped(text)


@lru_cache(maxsize=8192)
def _stripped(text: str) -> str:  # an answer is stripped by several evaluators in turn
    return _CITATION_WITH_SPACE.sub("", text)


# --------------------------------------------------------------------------- the context


@dataclass(frozen=True, slots=True)
class Doc:
    label: str  # the id, or "rank N"
    text: str
    words: frozenset[str]
    numbers: frozenset[str]


@dataclass(frozen=True, slots=True)
class Context:
    docs: list[Doc]
    without_text: int

    def note(self) -> str:
        if not self.without_text:
            return ""
        return f"; {self.without_text} document(s) without recorded text read as empty"


@lru_cache(maxsize=8192)
def read_doc(label: str, text: str) -> Doc:
    """A text with its content words and numbers (a document, or an answer read as one)."""
    return Doc(label, text, tu.content_words(text), tu.numbers(text))


_ContextKey = tuple[tuple[str | None, int, str | None], ...]


class _ContextMemo:
    """The last trace's `read_context`, keyed by its context documents' ids, ranks and texts (all it
    depends on): five evaluators read one trace's context in turn. Swapped whole, so thread-safe."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: tuple[_ContextKey, Context | None] | None = None

    def cache_clear(self) -> None:
        self.last = None


context_memo = _ContextMemo()


def read_context(trace: RagTrace) -> Context | None:
    """The trace's context documents with their words; None when documents exist but none has text."""
    documents = trace.contexts
    key = tuple([(doc.id, doc.rank, doc.content) for doc in documents])
    last = context_memo.last
    if last is not None and last[0] == key:
        return last[1]
    context = _read_documents(documents)
    context_memo.last = (key, context)
    return context


def _read_documents(documents: list[Document]) -> Context | None:
    docs: list[Doc] = []
    missing = 0
    for position, doc in enumerate(documents, start=1):
        text = doc.content
        if text is None:
            missing += 1
            text = ""
        docs.append(read_doc(doc_label(doc.id, doc.rank or position), text))
    if documents and missing == len(documents):
        return None
    return Context(docs, missing)


def no_retrieval(name: str, threshold: float | None) -> Score:
    """`skipped` `no_retrieval`: the trace retrieved nothing at all (small talk, an action-only tool
    call), so a score of its documents does not apply. Not a failure: an empty retrieval (a step
    that found nothing) still scores 0. In `ragpulse eval` it is an error (`suite._promised`)."""
    return Score.skip(
        name,
        "no_retrieval",
        "the trace has no retrieval step, so there are no documents to score",
        threshold=threshold,
    )


def no_document_text(name: str, threshold: float | None) -> Score:
    """`skipped` `no_document_text`: documents were retrieved, but none has its text recorded."""
    return Score.skip(
        name,
        "no_document_text",
        "the retrieved documents have no recorded text, so nothing can be checked against them",
        threshold=threshold,
    )


def overlap(wanted: frozenset[str], doc_words: frozenset[str]) -> float:
    """Share of `wanted` words that the document contains (0 when nothing is wanted)."""
    return len(wanted & doc_words) / len(wanted) if wanted else 0.0


# --------------------------------------------------------------------------- checkable sentences


def is_checkable(sentence: str) -> bool:
    """Whether a sentence states something to check (see the module docstring)."""
    text = sentence.strip()
    if not text or text.endswith("?"):
        return False
    if _REFUSAL_HINT.search(text.lower()) and _REFUSAL.search(text):
        return False
    if _PLEASANTRY.search(text):
        return False
    return bool(tu.content_words(text) or tu.numbers(text))


def claims(text: str) -> list[str]:
    """The checkable sentences of a text, citation markers removed."""
    return list(_claims(text))


@lru_cache(maxsize=8192)
def _claims(text: str) -> tuple[str, ...]:
    return tuple(s for s in tu.sentences(strip_citations(text)) if is_checkable(s))


# --------------------------------------------------------------------------- the coverage rule


@dataclass(frozen=True, slots=True)
class Coverage:
    """How well the best document covers one sentence."""

    sentence: str
    covered: bool
    best: str | None  # label of the best-matching document
    ratio: float  # share of the sentence's content words in that document
    missing_words: list[str]  # as the sentence writes them (the comparison is of stems)
    missing_numbers: list[str]


def cover(sentence: str, docs: Sequence[Doc], threshold: float) -> Coverage:
    """Best document for `sentence`: covered ones first, then the most content words, then rank."""
    wanted = tu.content_word_list(sentence)
    wanted_set = tu.content_words(sentence)
    size = len(wanted_set)
    nums = tu.number_list(sentence)
    n_nums = len(nums)
    bar = threshold - 1e-9
    best: tuple[tuple[bool, int, float, int], Doc] | None = None
    for position, doc in enumerate(docs):
        shared = len(wanted_set & doc.words)
        ratio = shared / size if size else 1.0
        found_numbers = 0
        if n_nums:
            doc_numbers = doc.numbers
            for number in nums:
                if number in doc_numbers:
                    found_numbers += 1
        covered = found_numbers == n_nums and ratio >= bar
        rank_key = (covered, found_numbers + shared, ratio, -position)
        if best is None or rank_key > best[0]:
            best = (rank_key, doc)
    if best is None:
        return Coverage(sentence, False, None, 0.0, tu.as_written(wanted, sentence), list(nums))
    (covered, _, ratio, _), doc = best
    return Coverage(
        sentence,
        covered,
        doc.label,
        ratio,
        tu.as_written([w for w in wanted if w not in doc.words], sentence),
        [n for n in nums if n not in doc.numbers],
    )


def _coverage_evidence(result: Coverage, threshold: float) -> str:
    if result.best is None:
        return "no retrieved document"
    parts = [f"best document {result.best}: {result.ratio:.0%} of content words"]
    if result.missing_numbers:
        parts.append("missing numbers: " + ", ".join(result.missing_numbers))
    if result.missing_words:
        parts.append("missing words: " + ", ".join(result.missing_words))
    if not result.covered and not result.missing_numbers:
        parts.append(f"below {threshold:.0%}")
    return "; ".join(parts)


def sentence_share(
    name: str, sentences_: list[str], context: Context, coverage_threshold: float, min_: float, what: str
) -> Score:
    """The score of the share of `sentences_` covered by one document of `context` (items: one per
    sentence, evidence the best document and what it lacks)."""
    results = [cover(s, context.docs, coverage_threshold) for s in sentences_]
    covered = sum(1 for r in results if r.covered)
    items = score_items((r.sentence, r.covered, _coverage_evidence(r, coverage_threshold)) for r in results)
    if not context.docs:
        explanation = f"no documents retrieved; none of the {len(results)} {what} can be covered"
    else:
        explanation = (
            f"{covered} of {len(results)} {what} covered by a retrieved document "
            f"(>= {coverage_threshold:.0%} of content words and every number in one document; "
            f"lexical proxy){context.note()}"
        )
        with_numbers = sum(1 for r in results if r.missing_numbers)
        if with_numbers:
            explanation += f"; {with_numbers} with a number found in no single document"
    return Score.judged(name, covered / len(results), min_, explanation=explanation, items=items)
