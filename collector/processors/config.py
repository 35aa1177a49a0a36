"""The processors' config sections: `assembler:` and `sampling:`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from collector.config_base import Section


class AssemblerConfig(Section):
    decision_wait: float = Field(5.0, gt=0)
    max_wait: float = Field(60.0, gt=0)
    # Traces waiting to be complete; past it, the oldest are assembled early (reason `pressure`).
    max_traces: int = Field(50_000, gt=0)
    # Spans kept in memory for traces waiting for assembly; the spans of later batches are read
    # back from the store when their traces are assembled, so a burst costs disk, not memory.
    max_held_spans: int = Field(50_000, gt=0)
    # Traces waiting for assembly (incomplete or ready); past it, exports are refused with a
    # retryable status until assembly catches up.
    max_backlog: int = Field(100_000, gt=0)
    poll_interval: float = Field(0.25, gt=0, le=10)
    # Processes that map traces beside the service (0: map in the assembler thread). Mapping is
    # pure Python; in its own processes it does not compete with the receivers for the GIL.
    workers: int = Field(1, ge=0, le=16)
    # The workers' scheduling niceness (os.nice). Under CPU saturation, receiving and storing spans
    # wins over mapping them: ingest keeps its rate and assembly catches up when the load drops
    # (in-flight traces stay bounded by max_traces). 0 gives mapping the receivers' priority.
    worker_nice: int = Field(10, ge=0, le=19)
    # The same for the assembler's own thread in the service, which writes the mapped and scored
    # rows (Linux only: threads have their own priority there). During a burst that saturates the
    # CPU, receiving keeps more of it; assembly catches up when the load drops.
    thread_nice: int = Field(10, ge=0, le=19)
    enabled: bool = True


class SamplingRuleMatch(Section):
    service: str | None = None
    status: Literal["error", "ok", "unset"] | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)
    min_duration_ms: float | None = None


class SamplingRule(Section):
    name: str
    match: SamplingRuleMatch = Field(default_factory=SamplingRuleMatch)
    rate: float | None = Field(None, ge=0, le=1)
    judge_rate: float | None = Field(None, ge=0, le=1)


class BudgetConfig(Section):
    """Judge spending limits; null: no limit, 0: no judge calls at all."""

    judge_calls_per_minute: int | None = Field(120, ge=0)
    judge_tokens_per_day: int | None = Field(5_000_000, ge=0)


class SamplingConfig(Section):
    """Which complete traces are scored (see `sampler.py`)."""

    # Share of complete traces scored by the deterministic evaluators.
    rate: float = Field(1.0, ge=0, le=1)
    # Share scored by the judge evaluators too (always a subset of the above).
    judge_rate: float = Field(0.1, ge=0, le=1)
    rules: list[SamplingRule] = Field(default_factory=list)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)


class ScoringConfig(Section):
    """The online scoring stage: deterministic evaluators after mapping, the judge stage after that."""

    enabled: bool = True
    # Judge-sampled traces the judge stage holds at once (taken from the store, where the rest wait).
    judge_queue: int = Field(64, gt=0)
    # How often the judge stage looks for pending traces and stores finished ones.
    judge_poll_interval: float = Field(0.5, gt=0, le=10)
