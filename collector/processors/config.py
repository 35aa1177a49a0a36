"""The processors' config sections: `assembler:`, `mapping:`, `sampling:`, `scoring:` and `redaction:`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field, field_validator

from collector.config_base import Section
from collector.processors.redaction import NamedPattern, Redactor, check_pattern
from semconv.options import MappingOptions


class AssemblerConfig(Section):
    decision_wait: float = Field(5.0, gt=0)
    max_wait: float = Field(60.0, gt=0)
    # Traces waiting to be complete; past it, the oldest are assembled early (reason `pressure`).
    max_traces: int = Field(50_000, gt=0)
    # Spans kept in memory for traces waiting for assembly; later batches wait on local disk
    # (`spill_directory`) and are read back when their traces are assembled, so a burst costs
    # disk, not memory. 25,000 spans of the standard load are about 22 MiB of Arrow rows; twice
    # that raised a 1,000,000-span burst's peak by about 50 MiB and was no faster (bench/README).
    max_held_spans: int = Field(25_000, gt=0)
    # Where those batches wait: null, next to the database file (`<store.path>.spill`), or in the
    # replica's `store.temp_directory` on a lake. Emptied at every start; the store holds the spans.
    spill_directory: str | None = None
    # Traces waiting for assembly (incomplete or ready); past it, exports are refused with a
    # retryable status until assembly catches up.
    max_backlog: int = Field(100_000, gt=0)
    poll_interval: float = Field(0.25, gt=0, le=10)
    # Seconds complete traces may wait for others before they are mapped and written, when fewer
    # than 500 become ready in that time: a write costs about 20 ms of CPU whatever its rows, so at
    # a low rate the traces of a second share one (0: each round writes what is ready).
    batch_wait: float = Field(1.0, ge=0, le=60)
    # Processes that map and score traces beside the service (0: map in the assembler thread).
    # Mapping is pure Python; in its own processes it does not compete with the receivers for the
    # GIL. Two keep the service's writer busy on two cores (one worker paces assembly there);
    # each costs about 200 MiB.
    workers: int = Field(2, ge=0, le=16)
    # The workers' scheduling niceness (os.nice). Under CPU saturation, receiving and storing spans
    # wins over mapping them: ingest keeps its rate and assembly catches up when the load drops
    # (in-flight traces stay bounded by max_traces). 0 gives mapping the receivers' priority.
    worker_nice: int = Field(10, ge=0, le=19)
    # The same for the assembler's own thread in the service, which writes the mapped and scored
    # rows (Linux only: threads have their own priority there). During a burst that saturates the
    # CPU, receiving keeps more of it; assembly catches up when the load drops.
    thread_nice: int = Field(10, ge=0, le=19)
    enabled: bool = True


class MappingConfig(Section):
    """`mapping:`: which tool calls are retrievals (docs/conventions.md, "Agents and tools")."""

    # Tool names or globs (`search_*`, `*_kb`) whose calls are retrieval steps, whatever they return.
    retrieval_tools: list[str] = Field(default_factory=list)
    # Also a tool whose name or description says search / retrieve / lookup / query / knowledge and
    # whose result reads as documents.
    detect_retrieval_tools: bool = True

    @field_validator("retrieval_tools")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not name.strip():
                raise ValueError("a tool name or glob must not be empty")
        return value

    def options(self) -> MappingOptions:
        """The options `semconv.map_trace` reads."""
        return MappingOptions(tuple(self.retrieval_tools), self.detect_retrieval_tools)


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
    # The earlier turns of its session a chat turn is judged with (relevance and correctness), the
    # latest first kept; 0: each turn alone (docs/sessions.md, "Multi-turn judging").
    conversation_turns: int = Field(3, ge=0, le=20)
    # Traces a rescore run scores and stores at once (`ragpulse rescore`): a run killed midway scores
    # at most this many again; with the judge, at most 4 per `judge.max_concurrency` (docs/rescore.md).
    rescore_batch: int = Field(1000, gt=0, le=100_000)


Preset = Literal["email", "phone", "credit_card", "iban", "ip_address", "api_key"]
Stage = Literal["storage", "judge", "export"]
STAGES: tuple[Stage, ...] = ("storage", "judge", "export")


class RedactionPattern(Section):
    # Names the placeholder: `order_id` -> `[ORDER_ID]`.
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    regex: str

    @field_validator("regex")
    @classmethod
    def _usable(cls, regex: str) -> str:
        return check_pattern(regex)


class RedactionConfig(Section):
    # Off by default (nothing configured); turn every preset on for production.
    presets: list[Preset] = Field(default_factory=list)
    patterns: list[RedactionPattern] = Field(default_factory=list)
    # storage: before spans, events and log bodies are stored; judge: before text goes to the judge;
    # export: before spans are forwarded and evaluation events exported.
    apply_to: list[Stage] = Field(default_factory=lambda: list(STAGES))

    @property
    def enabled(self) -> bool:
        return bool(self.presets or self.patterns)

    def redactor(self, stage: Stage, on_match: Callable[[str], None] | None = None) -> Redactor | None:
        """The redactor of one stage, or None when redaction is off or not applied there."""
        if not self.enabled or stage not in self.apply_to:
            return None
        patterns = [NamedPattern(p.name, p.regex) for p in self.patterns]
        return Redactor(self.presets, patterns, on_match)
