"""No-judge text evaluators: rough lexical proxies for the context, faithfulness and answer scores.

**These are word-overlap heuristics, not judgements.** They count shared words and numbers; they do
not read. A paraphrase with other words looks unsupported, a sentence that reuses the document's
words to say the opposite ("refunds are *not* possible within 30 days") looks supported, and
negations, word order and synonyms are invisible (see `evaluators.textutil` for the exact
tokenising). Use them as cheap, deterministic, always-on signals — in CI without a model, online on
every trace, as a tripwire for invented numbers — and use the judge versions (docs/scores.md, "The
judge") when the verdict matters. Where a judge version exists, the name is the same; what differs:

- `faithfulness` (aliases `groundedness`, `hallucination`): here the share of answer sentences
  *covered* by one document; the judge extracts statements and judges each supported or not.
- `context_recall`: here the share of expected-answer sentences covered by one document; the
  judge gives a verdict per statement of the expected answer.
- `context_precision`: here the rank-aware average precision of the documents whose words overlap
  the question + expected answer; the judge gives one usefulness verdict per document.
- `context_relevance`: here the share of documents sharing enough question words; the judge rates
  each document relevant or not.
- `answer_correctness`: here SQuAD-style token F1 between answer and expected answer; the judge
  compares claims both ways (F1).
- `answer_relevance`: here the share of the question's topic words that the answer repeats; the
  judge scores 0..1 with reasoning.
- `context_entity_recall` and `citation` are exact rules with no judge version.

The coverage rule (faithfulness, context_recall): a sentence is *covered* when one document (not
the documents pooled) contains at least `coverage` (default 0.7) of the sentence's content words
AND every number of the sentence (by value: `$25` needs a 25 in that document). So an invented
number is always unsupported, however much of the wording overlaps. A sentence is *checkable*
when it has a content word or a number and is not a question, a refusal ("I'm sorry, I could not
find that ...", "I don't know") or a pleasantry ("Hope this helps"); `[id]` citation markers are
removed before checking.

Decisions (each evaluator's docstring has the details):

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
- Default thresholds (shared by the judge variants where they exist; docs/scores.md per score):
  faithfulness 1 (every checkable sentence covered, as the judge's claims mode), context_recall 0.8,
  context_entity_recall 0.8, context_precision 0.5, context_relevance "at least one relevant
  document", answer_correctness 0.7, answer_relevance 0.5, citation 1 ("all valid").

Every factory checks its options when called (ValueError for a `min` or option out of range) and
returns a callable `RagTrace -> Score`, like `evaluators.retrieval.make_retrieval_evaluator`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from semconv.models import Document, RagTrace

from . import textutil as tu
from .scores import Score, score_item, score_items

Evaluator = Callable[[RagTrace], Score]

DEFAULT_COVERAGE = 0.7
DEFAULT_MIN: dict[str, float | None] = {
    "faithfulness": 1.0,
    "context_recall": 0.8,
    "context_entity_recall": 0.8,
    "context_precision": 0.5,
    "context_relevance": None,  # at least one relevant document
    "answer_correctness": 0.7,
    "answer_relevance": 0.5,
    "citation": 1.0,
}
FAITHFULNESS_ALIASES = ("faithfulness", "groundedness", "hallucination")

_CITATION = re.compile(r"\[([^\[\]\n]{1,200})\](?!\()")
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


# --------------------------------------------------------------------------- shared pieces


def _check_fraction(name: str, option: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name}: {option} must be a number between 0 and 1, got {value!r}")


def _threshold(name: str, min: float | None, default_key: str) -> float | None:
    _check_fraction(name, "min", min)
    return float(min) if min is not None else DEFAULT_MIN[default_key]


def _blank(text: str | None) -> bool:
    return text is None or not text.strip()


def strip_citations(text: str) -> str:
    return _stripped(text)


@lru_cache(maxsize=8192)
def _stripped(text: str) -> str:  # an answer is stripped by several evaluators in turn
    return _CITATION_WITH_SPACE.sub("", text)


@dataclass(frozen=True, slots=True)
class _Doc:
    label: str  # the id, or "rank N"
    text: str
    words: frozenset[str]
    numbers: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Context:
    docs: list[_Doc]
    without_text: int

    def note(self) -> str:
        if not self.without_text:
            return ""
        return f"; {self.without_text} document(s) without recorded text read as empty"


def _label(doc: Document, position: int) -> str:
    return doc.id if doc.id is not None else f"rank {doc.rank if doc.rank else position}"


@lru_cache(maxsize=8192)
def _doc(label: str, text: str) -> _Doc:
    return _Doc(label, text, tu.content_words(text), tu.numbers(text))


_ContextKey = tuple[tuple[str | None, int, str | None], ...]


class _ContextMemo:
    """The last trace's `_context`, keyed by its context documents' ids, ranks and texts (all it
    depends on): five evaluators read one trace's context in turn. Swapped whole, so thread-safe."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: tuple[_ContextKey, _Context | None] | None = None

    def cache_clear(self) -> None:
        self.last = None


_context_memo = _ContextMemo()


def _context(trace: RagTrace) -> _Context | None:
    """The trace's context documents with their words; None when documents exist but none has text."""
    documents = trace.contexts
    key = tuple([(doc.id, doc.rank, doc.content) for doc in documents])
    last = _context_memo.last
    if last is not None and last[0] == key:
        return last[1]
    context = _read_context(documents)
    _context_memo.last = (key, context)
    return context


def _read_context(documents: list[Document]) -> _Context | None:
    docs: list[_Doc] = []
    missing = 0
    for position, doc in enumerate(documents, start=1):
        text = doc.content
        if text is None:
            missing += 1
            text = ""
        docs.append(_doc(_label(doc, position), text))
    if documents and missing == len(documents):
        return None
    return _Context(docs, missing)


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


@dataclass(frozen=True, slots=True)
class Coverage:
    """How well the best document covers one sentence."""

    sentence: str
    covered: bool
    best: str | None  # label of the best-matching document
    ratio: float  # share of the sentence's content words in that document
    missing_words: list[str]
    missing_numbers: list[str]


def cover(sentence: str, docs: Sequence[_Doc], threshold: float) -> Coverage:
    """Best document for `sentence`: covered ones first, then the most content words, then rank."""
    wanted = tu.content_word_list(sentence)
    wanted_set = tu.content_words(sentence)
    size = len(wanted_set)
    nums = tu.number_list(sentence)
    n_nums = len(nums)
    bar = threshold - 1e-9
    best: tuple[tuple[bool, int, float, int], _Doc] | None = None
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
        return Coverage(sentence, False, None, 0.0, list(wanted), list(nums))
    (covered, _, ratio, _), doc = best
    return Coverage(
        sentence,
        covered,
        doc.label,
        ratio,
        [w for w in wanted if w not in doc.words],
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


def _sentence_share(
    name: str, sentences_: list[str], context: _Context, coverage_threshold: float, min_: float, what: str
) -> Score:
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


# --------------------------------------------------------------------------- faithfulness


def make_faithfulness(
    min: float | None = None, *, coverage: float = DEFAULT_COVERAGE, name: str = "faithfulness"
) -> Evaluator:
    """No-judge faithfulness: the share of the answer's checkable sentences covered by one document.

    Default `min` 1 (every sentence covered), `coverage` 0.7. `name` may be an alias
    (`groundedness`, `hallucination`): same score, that name on the record. Items: one per answer
    sentence, unsupported first; evidence names the best-matching document and the words and
    numbers it lacks. A lexical check cannot tell a contradiction from a missing statement, so the
    judge's separate "contradicted" count has no equivalent here.
    """
    if name not in FAITHFULNESS_ALIASES:
        raise ValueError(f"faithfulness name must be one of {', '.join(FAITHFULNESS_ALIASES)}, got {name!r}")
    threshold = _threshold(name, min, "faithfulness")
    assert threshold is not None
    _check_fraction(name, "coverage", coverage)

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        if _blank(trace.answer):
            return Score.skip(name, "no_answer", "the trace has no answer to check", threshold=threshold)
        assert trace.answer is not None
        sentences_ = claims(trace.answer)
        if not sentences_:
            return Score.skip(
                name,
                "no_claims",
                "the answer states nothing checkable (a refusal, a question or a pleasantry)",
                threshold=threshold,
            )
        context = _context(trace)
        if context is None:
            return no_document_text(name, threshold)
        return _sentence_share(name, sentences_, context, coverage, threshold, "answer sentences")

    return evaluate


# --------------------------------------------------------------------------- context recall


def make_context_recall(min: float | None = None, *, coverage: float = DEFAULT_COVERAGE) -> Evaluator:
    """No-judge context recall: the share of the expected answer's checkable sentences covered by one
    retrieved document (the faithfulness coverage rule). Default `min` 0.8, `coverage` 0.7.

    Needs the expected answer (`skipped` `no_reference` without it; `no_claims` when it has no
    checkable sentence, e.g. just "No."). Items: one per expected-answer sentence, missing first.
    """
    name = "context_recall"
    threshold = _threshold(name, min, name)
    assert threshold is not None
    _check_fraction(name, "coverage", coverage)

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        if _blank(trace.expected_answer):
            return Score.skip(
                name, "no_reference", "the trace has no expected answer to look for", threshold=threshold
            )
        assert trace.expected_answer is not None
        sentences_ = claims(trace.expected_answer)
        if not sentences_:
            return Score.skip(
                name, "no_claims", "the expected answer has no checkable sentence", threshold=threshold
            )
        context = _context(trace)
        if context is None:
            return no_document_text(name, threshold)
        return _sentence_share(name, sentences_, context, coverage, threshold, "expected-answer sentences")

    return evaluate


# --------------------------------------------------------------------------- context entity recall


def make_context_entity_recall(
    min: float | None = None, *, entities: Sequence[str] | None = None
) -> Evaluator:
    """The share of the expected answer's entities (names, numbers, dates; `textutil.entities`) that
    occur in at least one retrieved document. Default `min` 0.8.

    With `entities` (a list of strings) those are looked for instead, and no expected answer is
    needed. Matching is by entity key (`March 3, 2026` = `2026-03-03`, `30 days` = `30-day`), names
    case-insensitively; RAGAS compares LLM-extracted strings exactly. No entities in the expected
    answer -> `skipped` `no_entities` (RAGAS: 0.0; an absent reference is not a failure).
    Items: one per entity; evidence the first document that has it, or "not in any retrieved document".
    """
    name = "context_entity_recall"
    threshold = _threshold(name, min, name)
    assert threshold is not None
    listed: tuple[tu.Entity, ...] | None = None
    if entities is not None:
        if isinstance(entities, str) or not all(isinstance(e, str) and e.strip() for e in entities):
            raise ValueError(f"{name}: entities must be a list of non-empty strings, got {entities!r}")
        if not entities:
            raise ValueError(f"{name}: entities must not be empty (leave it out to use the expected answer)")
        listed = tuple(dict.fromkeys(tu.entity_from_text(e) for e in entities))

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        if listed is not None:
            wanted = listed
            source = "listed"
        else:
            if _blank(trace.expected_answer):
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
        context = _context(trace)
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


# --------------------------------------------------------------------------- citation


def make_citation(min: float | None = None, *, ranks: bool = False) -> Evaluator:
    """`[id]` citation markers in the answer: every cited id must be a retrieved document's id.

    Markers: `[...]` not followed by `(` (so Markdown links are not markers); `[a, b]` or `[a; b]`
    cites several ids. Value: the share of cited ids (per occurrence) that are retrieved; default
    `min` 1 (all valid). With `ranks=True`, a marker that is a number n and no document's id is
    read as the n-th retrieved document (for prompts that number the documents). No marker ->
    `skipped` `no_citations`. Items: one per citation, invalid first.
    """
    name = "citation"
    threshold = _threshold(name, min, name)
    assert threshold is not None

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        if _blank(trace.answer):
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


# --------------------------------------------------------------------------- context precision


def overlap(wanted: frozenset[str], doc_words: frozenset[str]) -> float:
    """Share of `wanted` words that the document contains (0 when nothing is wanted)."""
    return len(wanted & doc_words) / len(wanted) if wanted else 0.0


def rank_aware_precision(useful: Sequence[bool]) -> float:
    """RAGAS / DeepEval context precision: mean over useful positions k of precision@k.

    `sum_k (useful in 1..k / k) * v_k / (number useful)`, 0.0 when nothing is useful. Unlike `map@k`
    (evaluators.retrieval), the denominator is the number of useful *retrieved* documents, not the
    number of expected ones, so one useful document at rank 1 scores 1 whatever was missed
    (docs/scores.md, "context_precision"); and there is no epsilon, so a perfect list scores exactly 1.
    """
    hits = 0
    total = 0.0
    for k, ok in enumerate(useful, start=1):
        if ok:
            hits += 1
            total += hits / k
    return total / hits if hits else 0.0


def make_context_precision(min: float | None = None, *, useful: float = 0.3) -> Evaluator:
    """No-judge context precision: `rank_aware_precision` of the documents in context order, a
    document being *useful* when it contains at least `useful` (default 0.3) of the content words of
    the question and the expected answer together. Default `min` 0.5.

    Needs the question and the expected answer (`no_question` / `no_reference`; the judge version
    can fall back on the answer, this one does not). No documents -> 0. Items: one per document,
    evidence its rank and overlap.
    """
    name = "context_precision"
    threshold = _threshold(name, min, name)
    assert threshold is not None
    _check_fraction(name, "useful", useful)
    below = f"(below {useful:.0%})"

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        if _blank(trace.question):
            return Score.skip(name, "no_question", "the trace has no question", threshold=threshold)
        if _blank(trace.expected_answer):
            return Score.skip(
                name,
                "no_reference",
                "the trace has no expected answer to judge usefulness by",
                threshold=threshold,
            )
        context = _context(trace)
        if context is None:
            return no_document_text(name, threshold)
        if not context.docs:
            return Score.judged(name, 0.0, threshold, explanation="no documents retrieved")
        wanted = tu.content_words(f"{trace.question}\n{trace.expected_answer}")
        shares = [overlap(wanted, doc.words) for doc in context.docs]
        verdicts = [share >= useful - 1e-9 for share in shares]
        items = score_items(
            (
                doc.label,
                ok,
                f"rank {rank}: {share:.0%} of question + expected-answer words "
                + ("(useful)" if ok else below),
            )
            for rank, (doc, share, ok) in enumerate(zip(context.docs, shares, verdicts, strict=True), start=1)
        )
        ranks = [str(rank) for rank, ok in enumerate(verdicts, start=1) if ok]
        explanation = (
            f"{len(ranks)} of {len(verdicts)} documents useful"
            + (f" (ranks {', '.join(ranks)})" if ranks else "")
            + "; rank-aware average precision over the useful documents (not map@k)"
            + context.note()
        )
        return Score.judged(
            name, rank_aware_precision(verdicts), threshold, explanation=explanation, items=items
        )

    return evaluate


# --------------------------------------------------------------------------- context relevance


def question_words(question: str) -> frozenset[str]:
    """The question's topic words: content words minus question-form words (how, many, ...)."""
    return frozenset(w for w in tu.content_words(question) if w not in tu.QUESTION_WORDS)


def make_context_relevance(min: float | None = None, *, relevant: float = 0.5) -> Evaluator:
    """No-judge context relevance: the share of documents containing at least `relevant` (default 0.5)
    of the question's topic words (`question_words`).

    Default: pass when at least one document is relevant, recorded as threshold 1/n for n
    documents; with `min`, pass when the share >= `min`. No documents -> 0 (fail). A question with no
    topic word -> `skipped` `no_question_words`. Items: one per document.
    """
    name = "context_relevance"
    threshold = _threshold(name, min, name)
    _check_fraction(name, "relevant", relevant)

    def evaluate(trace: RagTrace) -> Score:
        if not trace.has_retrieval:
            return no_retrieval(name, threshold)
        if _blank(trace.question):
            return Score.skip(name, "no_question", "the trace has no question", threshold=threshold)
        assert trace.question is not None
        wanted = question_words(trace.question)
        if not wanted:
            return Score.skip(
                name, "no_question_words", "the question has no topic words", threshold=threshold
            )
        context = _context(trace)
        if context is None:
            return no_document_text(name, threshold)
        docs = context.docs
        if not docs:
            return Score.judged(
                name, 0.0, threshold if threshold is not None else 1.0, explanation="no documents retrieved"
            )
        bar = threshold if threshold is not None else 1.0 / len(docs)
        shares = [overlap(wanted, doc.words) for doc in docs]
        oks = [share >= relevant - 1e-9 for share in shares]
        items = score_items(
            (
                doc.label,
                ok,
                f"rank {rank}: {share:.0%} of the question's words ("
                + ", ".join(sorted(wanted & doc.words) or ["none"])
                + ")",
            )
            for rank, (doc, share, ok) in enumerate(zip(docs, shares, oks, strict=True), start=1)
        )
        count = sum(oks)
        rule = "at least one relevant" if threshold is None else f"share >= {threshold:g}"
        explanation = (
            f"{count} of {len(docs)} documents share >= {relevant:.0%} of the question's words ({rule})"
            + context.note()
        )
        return Score.judged(name, count / len(docs), bar, explanation=explanation, items=items)

    return evaluate


# --------------------------------------------------------------------------- answer correctness

_ARTICLES = frozenset({"a", "an", "the"})


def answer_tokens(text: str) -> list[str]:
    """SQuAD-style normalised tokens: lower case, punctuation and articles dropped (decimals kept)."""
    return [w for w in tu._words(strip_citations(text)) if w not in _ARTICLES]


@lru_cache(maxsize=8192)
def _token_counts(text: str) -> tuple[Counter[str], int]:
    tokens = answer_tokens(text)
    return Counter(tokens), len(tokens)


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD token F1: multiset overlap; 1 when both are empty, 0 when one is."""
    pred, n_pred = _token_counts(prediction)
    ref, n_ref = _token_counts(reference)
    if not n_pred or not n_ref:
        return float(n_pred == n_ref)
    if len(ref) < len(pred):
        pred, ref = ref, pred  # the multiset intersection is symmetric; walk the smaller one
    common = sum(min(count, ref[token]) for token, count in pred.items() if token in ref)
    if common == 0:
        return 0.0
    p = common / n_pred
    r = common / n_ref
    return 2 * p * r / (p + r)


def make_answer_correctness(min: float | None = None, *, coverage: float = DEFAULT_COVERAGE) -> Evaluator:
    """No-judge answer correctness: SQuAD token F1 between answer and expected answer. Default `min`
    0.7.

    Items explain the value at sentence level: each expected-answer sentence found in the answer or
    not, and each answer sentence not in the expected answer (the faithfulness coverage rule, the
    other text as the one document). Missing answer or expected answer -> skipped.
    """
    name = "answer_correctness"
    threshold = _threshold(name, min, name)
    assert threshold is not None
    _check_fraction(name, "coverage", coverage)

    def evaluate(trace: RagTrace) -> Score:
        if _blank(trace.answer):
            return Score.skip(name, "no_answer", "the trace has no answer", threshold=threshold)
        if _blank(trace.expected_answer):
            return Score.skip(name, "no_reference", "the trace has no expected answer", threshold=threshold)
        assert trace.answer is not None and trace.expected_answer is not None
        answer, expected = trace.answer, trace.expected_answer
        as_doc = [_doc("answer", strip_citations(answer))]
        ref_doc = [_doc("expected answer", strip_citations(expected))]
        items = []
        for sentence in claims(expected):
            result = cover(sentence, as_doc, coverage)
            evidence = (
                "in the answer"
                if result.covered
                else "missing from the answer: " + ", ".join(result.missing_numbers + result.missing_words)
            )
            items.append(score_item(text=f"expected: {sentence}", ok=result.covered, evidence=evidence))
        extra = 0
        for sentence in claims(answer):
            result = cover(sentence, ref_doc, coverage)
            if not result.covered:
                extra += 1
                evidence = "not in the expected answer: " + ", ".join(
                    result.missing_numbers + result.missing_words
                )
                items.append(score_item(text=f"answer: {sentence}", ok=False, evidence=evidence))
        value = token_f1(answer, expected)
        missing = sum(1 for item in items if not item.ok) - extra
        explanation = f"token F1 {value:.2f} between answer and expected answer (lexical)"
        if missing:
            explanation += f"; {missing} expected sentence(s) not found in the answer"
        if extra:
            explanation += f"; {extra} answer sentence(s) not in the expected answer"
        return Score.judged(name, value, threshold, explanation=explanation, items=items)

    return evaluate


# --------------------------------------------------------------------------- answer relevance


def make_answer_relevance(min: float | None = None) -> Evaluator:
    """Rough answer relevance: the share of the question's topic words (`question_words`) that the
    answer repeats. Default `min` 0.5.

    Very rough: a correct answer in other words scores low, an answer that echoes the question
    scores high. A refusal is not relevant: value 0, label `noncommittal` (RAGAS zeroes
    noncommittal answers too). No question or answer -> skipped; a question without topic words ->
    `skipped` `no_question_words`. Items: one per question word.
    """
    name = "answer_relevance"
    threshold = _threshold(name, min, name)
    assert threshold is not None

    def evaluate(trace: RagTrace) -> Score:
        if _blank(trace.question):
            return Score.skip(name, "no_question", "the trace has no question", threshold=threshold)
        if _blank(trace.answer):
            return Score.skip(name, "no_answer", "the trace has no answer", threshold=threshold)
        assert trace.question is not None and trace.answer is not None
        wanted = [w for w in tu.content_word_list(trace.question) if w not in tu.QUESTION_WORDS]
        if not wanted:
            return Score.skip(
                name, "no_question_words", "the question has no topic words", threshold=threshold
            )
        if not claims(trace.answer):
            return Score.judged(
                name,
                0.0,
                threshold,
                label="noncommittal",
                explanation="the answer is a refusal or states nothing checkable",
            )
        answer_words = _doc("answer", strip_citations(trace.answer)).words
        oks = [w in answer_words for w in wanted]
        items = score_items(
            (w, ok, "in the answer" if ok else "not in the answer") for w, ok in zip(wanted, oks, strict=True)
        )
        found = sum(oks)
        explanation = f"{found} of {len(wanted)} question words repeated in the answer (rough lexical proxy)"
        return Score.judged(name, found / len(wanted), threshold, explanation=explanation, items=items)

    return evaluate


# --------------------------------------------------------------------------- the set

TEXT_EVALUATORS: dict[str, Callable[..., Evaluator]] = {
    "faithfulness": make_faithfulness,
    "context_recall": make_context_recall,
    "context_entity_recall": make_context_entity_recall,
    "citation": make_citation,
    "context_precision": make_context_precision,
    "context_relevance": make_context_relevance,
    "answer_correctness": make_answer_correctness,
    "answer_relevance": make_answer_relevance,
}


def deterministic_text_set() -> list[Evaluator]:
    """Every no-judge text evaluator with its defaults (the benchmark's set)."""
    return [factory() for factory in TEXT_EVALUATORS.values()]
