"""The `embeddings:` config section and the embedder built from it.

An OpenAI-compatible embeddings endpoint (`OPENAI_API_KEY` / `OPENAI_BASE_URL` apply). Used by
`ragpulse eval --snapshot` for answer similarity (cosine); no model: lexical similarity.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Embed = Callable[[Sequence[str]], list[list[float]]]


class EmbeddingError(RuntimeError):
    """The embedding endpoint failed or answered something unusable."""


class EmbeddingSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    model: str | None = Field(None, min_length=1)
    base_url: str | None = None
    timeout: float = Field(30.0, gt=0)
    dimensions: int | None = Field(None, gt=0)


def open_embedder(settings: EmbeddingSettings) -> Embed:
    """`embed(texts)` on the configured endpoint; a failure is an `EmbeddingError`."""
    import openai

    if not settings.model:
        raise EmbeddingError("no embedding model: set embeddings.model")
    model = settings.model
    # Local servers need no key; a real endpoint without one answers 401, reported as an error.
    api_key = os.environ.get("OPENAI_API_KEY") or "no-key"
    client = openai.OpenAI(
        base_url=settings.base_url, api_key=api_key, timeout=settings.timeout, max_retries=2
    )
    extra: dict[str, Any] = {"dimensions": settings.dimensions} if settings.dimensions else {}

    def embed(texts: Sequence[str]) -> list[list[float]]:
        try:
            response = client.embeddings.create(model=model, input=list(texts), **extra)
        except openai.OpenAIError as exc:
            raise EmbeddingError(f"embedding model {model}: {exc}") from None
        vectors = [item.embedding for item in sorted(response.data, key=lambda item: item.index)]
        if len(vectors) != len(texts) or len({len(v) for v in vectors}) > 1:
            raise EmbeddingError(
                f"embedding model {model}: {len(vectors)} vector(s) for {len(texts)} text(s)"
            )
        return vectors

    return embed
