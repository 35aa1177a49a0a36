"""The one configuration file every command reads (DESIGN section 9).

`ragpulse.yaml` (or `--config F`) is validated with pydantic; unknown keys and bad values are
refused with the dotted path of the key. `RAGPULSE_<SECTION>__<KEY>=value` environment variables
override the file (values are read as YAML scalars, so `8080`, `true` and `[a, b]` work).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

ENV_PREFIX = "RAGPULSE_"
DEFAULT_CONFIG_FILE = "ragpulse.yaml"


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the offending key path."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ReceiversConfig(_Section):
    host: str = "127.0.0.1"
    grpc_port: int = Field(4317, ge=0, le=65535)
    http_port: int = Field(4318, ge=0, le=65535)
    max_request_bytes: int = Field(16 * 1024 * 1024, gt=0)
    # Seconds a client is told to wait (Retry-After / RetryInfo) when the store is behind.
    retry_after: float = Field(1.0, gt=0)


class StoreConfig(_Section):
    path: str = "ragpulse.duckdb"
    # Spans waiting for commit; beyond this, exports are refused with a retryable status.
    max_queue_spans: int = Field(100_000, gt=0)
    # One commit takes at most this many spans (many exports share a commit).
    max_commit_spans: int = Field(50_000, gt=0)
    # DuckDB folds the write-ahead log into the file once it grows past this many MiB.
    checkpoint_threshold_mb: int = Field(256, gt=0)
    memory_limit: str | None = None
    threads: int | None = Field(None, gt=0)


class SqlConfig(_Section):
    max_rows: int = Field(10_000, gt=0)
    timeout: float = Field(30.0, gt=0)


class AssemblerConfig(_Section):
    decision_wait: float = Field(5.0, gt=0)
    max_wait: float = Field(60.0, gt=0)
    max_traces: int = Field(50_000, gt=0)
    poll_interval: float = Field(0.25, gt=0, le=10)
    # Processes that map traces beside the service (0: map in the assembler thread). Mapping is
    # pure Python; in its own processes it does not compete with the receivers for the GIL.
    workers: int = Field(1, ge=0, le=16)
    # The workers' scheduling niceness (os.nice). Under CPU saturation, receiving and storing spans
    # wins over mapping them: ingest keeps its rate and assembly catches up when the load drops
    # (in-flight traces stay bounded by max_traces). 0 gives mapping the receivers' priority.
    worker_nice: int = Field(10, ge=0, le=19)
    enabled: bool = True


class SamplingRuleMatch(_Section):
    service: str | None = None
    status: Literal["error", "ok", "unset"] | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)
    min_duration_ms: float | None = None


class SamplingRule(_Section):
    name: str
    match: SamplingRuleMatch = Field(default_factory=SamplingRuleMatch)
    rate: float | None = Field(None, ge=0, le=1)
    judge_rate: float | None = Field(None, ge=0, le=1)


class BudgetConfig(_Section):
    judge_calls_per_minute: int = Field(120, ge=0)
    judge_tokens_per_day: int = Field(5_000_000, ge=0)


class SamplingConfig(_Section):
    rate: float = Field(1.0, ge=0, le=1)
    judge_rate: float = Field(0.1, ge=0, le=1)
    rules: list[SamplingRule] = Field(default_factory=list)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)


class JudgeConfig(_Section):
    base_url: str | None = None
    model: str | None = None
    temperature: float = Field(0.0, ge=0, le=2)
    timeout: float = Field(30.0, gt=0)
    max_concurrency: int = Field(16, gt=0)
    max_retries: int = Field(3, ge=0)
    # A DuckDB file keeping judge verdicts across runs (null: the judge client's in-memory cache only).
    # Used by `ragpulse eval`; never by `ragpulse calibrate`, which must measure the model.
    verdict_store: str | None = Field(None, min_length=1)


class EmbeddingsConfig(_Section):
    """An OpenAI-compatible embeddings endpoint (`OPENAI_API_KEY` / `OPENAI_BASE_URL` apply).

    Used by `ragpulse eval --snapshot` for answer similarity (cosine); null model: lexical similarity.
    """

    model: str | None = Field(None, min_length=1)
    base_url: str | None = None
    timeout: float = Field(30.0, gt=0)
    dimensions: int | None = Field(None, gt=0)


class EvaluatorConfig(BaseModel):
    """One evaluator entry: its score name plus options (validated by the evaluator registry)."""

    model_config = ConfigDict(extra="allow")
    name: str
    min: float | None = None
    threshold: float | None = None
    mode: str | None = None
    judge: bool | None = None


class OtlpExporterConfig(_Section):
    endpoint: str | None = None
    protocol: Literal["grpc", "http/protobuf"] = "grpc"
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(10.0, gt=0)


class ExportersConfig(_Section):
    otlp: OtlpExporterConfig = Field(default_factory=OtlpExporterConfig)
    forward_spans: bool = False  # every received export, traces and logs (the DESIGN §9 key name)
    # Exports waiting to be forwarded; beyond this the oldest are dropped (and counted).
    forward_queue: int = Field(1_000, gt=0)


class Config(_Section):
    receivers: ReceiversConfig = Field(default_factory=ReceiversConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    sql: SqlConfig = Field(default_factory=SqlConfig)
    assembler: AssemblerConfig = Field(default_factory=AssemblerConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    embeddings: EmbeddingsConfig = Field(default_factory=EmbeddingsConfig)
    evaluators: list[EvaluatorConfig] | None = None
    exporters: ExportersConfig = Field(default_factory=ExportersConfig)
    monitoring: dict[str, Any] = Field(default_factory=dict)


def _format_error(error: ValidationError, source: str) -> str:
    problems = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = "unknown key" if item["type"] == "extra_forbidden" else item["msg"]
        problems.append(f"{path}: {message}")
    return f"invalid configuration in {source}: " + "; ".join(problems)


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """Turn RAGPULSE_STORE__PATH=x into {"store": {"path": "x"}}."""
    tree: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        parts = name[len(ENV_PREFIX) :].lower().split("__")
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {name} conflicts with another override")
        try:
            node[parts[-1]] = yaml.safe_load(raw) if raw else raw
        except yaml.YAMLError:
            node[parts[-1]] = raw
    return tree


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read the config file (explicit path, else ./ragpulse.yaml when present), apply env overrides."""
    environ = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    source = "defaults"
    if path is None and Path(DEFAULT_CONFIG_FILE).is_file():
        path = DEFAULT_CONFIG_FILE
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(
                f"config file {path} must be a mapping of sections, got {type(loaded).__name__}"
            )
        data = loaded
    overrides = _env_overrides(environ)
    if overrides:
        data = _merge(data, overrides)
        source += " + RAGPULSE_* environment"
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc, source)) from None
