"""The `judge:` config section, owned by the judge: the endpoint, the model and the client's knobs.

`collector.config.Config` composes it as its `judge:` key; `evaluators.judge.open_judge` builds a
client from it. The same rules as every config section: unknown keys are refused.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr


def _judge_evaluator(name: str) -> str:
    """`name` when it is the name of an evaluator with a judge variant (a key of `examples`)."""
    from ..registry import JUDGE_NAMES

    if name not in JUDGE_NAMES:
        raise ValueError(f"not a judge evaluator (examples are for {', '.join(JUDGE_NAMES)})")
    return name


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
    # Judge evaluator (score name) -> a file of few-shot examples from people's corrections that its
    # calls carry (`ragpulse align --write` writes it; evaluators/judge/examples.py). Read when the
    # judge is set up (`collector.judge_setup.open_judge`); relative paths from the working directory.
    examples: dict[Annotated[str, AfterValidator(_judge_evaluator)], Annotated[str, Field(min_length=1)]] = (
        Field(default_factory=dict)
    )
