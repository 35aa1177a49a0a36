"""Tokenising shared by the retriever and the composer: lower-case words, no stop words, crude stemming."""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z0-9$%]+(?:[.'][a-z0-9]+)*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9$])")

_STOP_WORDS = """a about after an and any are as at be been before below by can cannot do does for from
    get had has have how i if in into is it its me my no not of on once or our out over so than that the
    their them then there these they this to up us was we what when which while who why will with
    within you your"""
STOP_WORDS = frozenset(_STOP_WORDS.split())


def stem(word: str) -> str:
    """Strip a few English suffixes so `refunds`/`refunded` and `shipping`/`ships` meet."""
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)] + keep
            break
    # shipping -> shipp -> ship
    if len(word) >= 4 and word[-1] == word[-2] and word[-1] not in "aeiou":
        word = word[:-1]
    return word


def terms(text: str) -> list[str]:
    """Content terms of a text, in order (duplicates kept: the retriever counts them)."""
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]


def sentences(text: str) -> list[str]:
    """Split a short factual text into sentences."""
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def whitespace_tokens(text: str) -> int:
    """The token count the example reports: whitespace-separated words (no tokenizer dependency)."""
    return len(text.split())
