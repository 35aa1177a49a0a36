"""A deterministic stand-in for the LLM: it answers with the context sentences that best match the
question, so the example runs offline and every run gives the same answer.

With `hallucinate=True` it behaves like a model that embellishes: after the grounded sentences it
adds one confident claim that appears in no document (an invented number or policy).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from collector.shop_assistant.retriever import Hit
from collector.shop_assistant.text import sentences, terms, whitespace_tokens

SYSTEM_PROMPT = (
    "You are the shop assistant. Answer the customer's question using only the numbered context "
    "documents. Be brief. If the context does not answer the question, say so."
)
NOT_FOUND = "I'm sorry, I could not find that in our store information."

# What the embellishing model adds, by the id of the top retrieved document. Each sentence is
# plausible and on topic, and contradicts or goes beyond the knowledge base.
FABRICATIONS: dict[str, str] = {
    "refund-window": "Final-sale items can also be refunded within 90 days if you keep the receipt.",
    "refund-method": "Refunds over $200 are paid out in cash at any of our stores within 24 hours.",
    "shipping-times": "Orders placed before noon on weekdays arrive the next morning at no extra cost.",
    "shipping-costs": "Loyalty members get free express shipping on every order, with no minimum.",
    "international-shipping": "We refund import duties on international orders over $150.",
    "returns-damaged": "You also receive a $25 voucher for the inconvenience.",
    "return-shipping": "Returns can also be dropped at any post office for up to 60 days.",
    "warranty": "You can extend the warranty to 5 years for $9.99, and it then covers water damage too.",
    "price-match": "We refund 110% of the price difference when you find the item cheaper elsewhere.",
    "gift-cards": "Gift card balances over $100 can be withdrawn as cash at the till.",
    "exchanges": "Exchanges also work for items bought from our marketplace partners within 90 days.",
    "order-cancellation": "Shipped orders can still be cancelled by calling support within 24 hours.",
    "loyalty-points": "Points never expire for members who joined before 2024.",
    "store-hours": "On public holidays every store stays open until midnight.",
    "student-discount": "Teachers get the same 10% discount with a school ID.",
}
DEFAULT_FABRICATION = "Every order also comes with a lifetime satisfaction guarantee."


@dataclass(frozen=True)
class Completion:
    """What the model returns, plus what an instrumentation records about the call."""

    text: str
    system: str
    user: str
    input_tokens: int
    output_tokens: int
    # The unsupported sentence added in hallucinate mode (None otherwise).
    fabricated: str | None = None

    @property
    def messages(self) -> list[dict[str, str]]:
        """The chat input as role/content pairs (system first)."""
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


def format_context(hits: Sequence[Hit]) -> str:
    """The numbered context block of the prompt."""
    lines = (f"[{rank}] ({hit.document.id}) {hit.document.content}" for rank, hit in enumerate(hits, 1))
    return "\n".join(lines)


class ComposerLLM:
    """Extractive answers: up to `max_sentences` context sentences that best match the question
    (ties: better-ranked document first, then sentence order)."""

    model = "shop-composer-1"
    provider = "ragpulse-examples"

    def __init__(
        self,
        hallucinate: bool = False,
        max_sentences: int = 3,
        keep_ratio: float = 0.6,
        min_document_ratio: float = 0.4,
    ) -> None:
        self.hallucinate = hallucinate
        self.max_sentences = max_sentences
        self.keep_ratio = keep_ratio
        self.min_document_ratio = min_document_ratio

    def select(self, question: str, hits: Sequence[Hit]) -> list[str]:
        """The grounded sentences of the answer, most relevant first (empty: nothing matches).

        A sentence scores the sum of the weights of the question words it shares, a word weighing
        more the fewer context sentences contain it; sentences within `keep_ratio` of the best
        one are kept. Documents far below the top retrieval score are ignored, as a model mostly
        reads the best context.
        """
        wanted = set(terms(question))
        top_score = max((h.score for h in hits), default=0.0)
        pool = [
            (rank, position, sentence, set(terms(sentence)))
            for rank, hit in enumerate(hits)
            if hit.score >= self.min_document_ratio * top_score
            for position, sentence in enumerate(sentences(hit.document.content))
        ]
        frequency = Counter(t for *_, words in pool for t in words & wanted)
        weight = {t: math.log(1 + len(pool) / n) for t, n in frequency.items()}
        scored = sorted(
            (-sum(weight[t] for t in words & wanted), rank, position, sentence)
            for rank, position, sentence, words in pool
            if words & wanted
        )
        if not scored:
            return []
        best = -scored[0][0]
        return [s[3] for s in scored if -s[0] >= self.keep_ratio * best][: self.max_sentences]

    def complete(self, question: str, hits: Sequence[Hit]) -> Completion:
        """Answer `question` from the retrieved `hits`."""
        user = f"Context:\n{format_context(hits)}\n\nQuestion: {question}"
        chosen = self.select(question, hits)
        text = " ".join(chosen) if chosen else NOT_FOUND
        fabricated = None
        if self.hallucinate:
            top = hits[0].document.id if hits else ""
            fabricated = FABRICATIONS.get(top, DEFAULT_FABRICATION)
            text = f"{text} {fabricated}"
        return Completion(
            text=text,
            system=SYSTEM_PROMPT,
            user=user,
            input_tokens=whitespace_tokens(SYSTEM_PROMPT) + whitespace_tokens(user),
            output_tokens=whitespace_tokens(text),
            fabricated=fabricated,
        )
