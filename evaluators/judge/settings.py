"""The `judge:` config section, owned by the judge: the endpoint, the model and the client's knobs.

`collector.config.Config` composes it as its `judge:` key; `evaluators.judge.open_judge` builds a
client from it. The same rules as every config section: unknown keys are refused.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class JudgeSettings(BaseModel):
    """Where the judge is and how the client talks to it (docs/scores.md, "The judge")."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    base_url: str | None = None  # None: OPENAI_BASE_URL, else the OpenAI API
    model: str | None = None
    temperature: float = Field(0.0, ge=0, le=2)
    timeout: float = Field(30.0, gt=0)
    max_concurrency: int = Field(16, gt=0)
    max_retries: int = Field(3, ge=0)
    # None: OPENAI_API_KEY. Local servers (Ollama, llama.cpp, vLLM) usually need none at all.
    api_key: SecretStr | None = None
    backoff_initial: float = Field(0.5, gt=0)
    # Caps every wait, Retry-After included: a server asking for 10 minutes gets `backoff_max`.
    backoff_max: float = Field(20.0, gt=0)
    output_retries: int = Field(1, ge=0)
    max_tokens: int | None = Field(None, gt=0)
    # auto: json_schema, falling back to json_object when the server rejects it.
    response_format: Literal["auto", "json_schema", "json_object"] = "auto"
    cache_size: int = Field(10_000, ge=0)
    # A DuckDB file keeping verdicts across runs (null: the in-memory cache only). Used by
    # `ragpulse eval`; never by `ragpulse calibrate`, which must measure the model.
    verdict_store: str | None = Field(None, min_length=1)
    # What the model's tokens cost, US dollars per million: the dashboard and the report show the
    # judge's cost from them (null: tokens only).
    input_cost_per_million: float | None = Field(None, ge=0)
    output_cost_per_million: float | None = Field(None, ge=0)
