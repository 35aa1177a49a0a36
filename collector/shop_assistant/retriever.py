"""A deterministic BM25 retriever over an in-memory index; pure Python."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from collector.shop_assistant.knowledge import KbDocument
from collector.shop_assistant.text import terms


@dataclass(frozen=True)
class Hit:
    """A retrieved document with its BM25 score (higher is better)."""

    document: KbDocument
    score: float


class Bm25Retriever:
    """Okapi BM25 over title + content. Ties keep index order, so results never depend on hashing."""

    def __init__(self, name: str, documents: Sequence[KbDocument], k1: float = 1.2, b: float = 0.75) -> None:
        self.name = name
        self.documents = list(documents)
        self.k1, self.b = k1, b
        self._tf = [Counter(terms(f"{d.title} {d.content}")) for d in self.documents]
        self._length = [sum(tf.values()) for tf in self._tf]
        self._avg_length = sum(self._length) / max(len(self._length), 1)
        df: Counter[str] = Counter()
        for tf in self._tf:
            df.update(tf.keys())
        n = len(self.documents)
        self._idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def score(self, query: str) -> list[float]:
        """BM25 score of every document of the index for `query`, in index order."""
        query_terms = set(terms(query))
        scores = []
        for tf, length in zip(self._tf, self._length, strict=True):
            norm = self.k1 * (1 - self.b + self.b * length / self._avg_length)
            matched = (t for t in query_terms if t in tf)
            scores.append(sum((self._idf[t] * tf[t] * (self.k1 + 1) / (tf[t] + norm) for t in matched), 0.0))
        return scores

    def search(self, query: str, top_k: int = 3) -> list[Hit]:
        """The `top_k` best documents, best first. Like a vector store, it always returns `top_k`
        documents when the index has them, even weak matches."""
        scores = self.score(query)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:top_k]
        return [Hit(self.documents[i], round(scores[i], 4)) for i in order]
