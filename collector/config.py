"""The one configuration file every command reads (documented in docs/operations.md).

Each component owns the model of its own section (`receivers/config.py`, `store/config.py`, ...);
`Config` composes them. `ragpulse.yaml` (or `--config F`) is validated with pydantic; unknown keys
and bad values are refused with the dotted path of the key. `RAGPULSE_<SECTION>__<KEY>=value`
environment variables override the file (values are read as YAML scalars, so `8080`, `true` and
`[a, b]` work).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import yaml
from pydantic import Field, ValidationError, model_validator

from collector.auth.config import AuthConfig
from collector.config_base import ConfigError, Section
from collector.exporters.config import ExportersConfig
from collector.monitoring.config import MonitoringConfig
from collector.probes.config import Probes
from collector.processors.config import (
    AssemblerConfig,
    MappingConfig,
    RedactionConfig,
    SamplingConfig,
    ScoringConfig,
)
from collector.receivers.config import ReceiversConfig
from collector.receivers.tls import TlsConfig
from collector.sessions.config import SessionsConfig
from collector.store.config import StoreConfig
from collector.store.sql import SqlConfig
from evaluators.embeddings import EmbeddingSettings
from evaluators.judge.settings import JudgeSettings
from evaluators.registry import EvaluatorEntry, check_entries

if TYPE_CHECKING:
    from collector.processors.scoring import ScoringSetup

ENV_PREFIX = "RAGPULSE_"
DEFAULT_CONFIG_FILE = "ragpulse.yaml"


class Config(Section):
    receivers: ReceiversConfig = Field(default_factory=ReceiversConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    sql: SqlConfig = Field(default_factory=SqlConfig)
    assembler: AssemblerConfig = Field(default_factory=AssemblerConfig)
    mapping: MappingConfig = Field(default_factory=MappingConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    evaluators: list[EvaluatorEntry] | None = None
    exporters: ExportersConfig = Field(default_factory=ExportersConfig)
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    sessions: SessionsConfig = Field(default_factory=SessionsConfig)
    tls: TlsConfig = Field(default_factory=TlsConfig)
    redaction: RedactionConfig = Field(default_factory=RedactionConfig)
    probes: Probes = Field(default_factory=list)

    @model_validator(mode="after")
    def _canaries_need_a_judge(self) -> Self:
        if self.monitoring.canaries is not None and not self.judge.model:
            raise ValueError("monitoring.canaries re-judges calibration cases: it needs judge.model")
        if self.sessions.conversation_resolved and not self.judge.model:
            raise ValueError("sessions.conversation_resolved is a judge score: it needs judge.model")
        return self

    def evaluator_entries(self) -> list[dict[str, Any]] | None:
        """The `evaluators:` entries as the registry takes them (None: the default set)."""
        if self.evaluators is None:
            return None
        return [entry.as_entry() for entry in self.evaluators]

    def scoring_setup(self) -> ScoringSetup | None:
        """The online scoring this configuration asks for (None when `scoring.enabled` is false)."""
        from collector.processors.scoring import ScoringSetup  # the evaluators, loaded when scoring

        if not self.scoring.enabled:
            return None
        return ScoringSetup.from_entries(
            self.evaluator_entries(),
            self.sampling,
            judge_configured=bool(self.judge.model),
            export_events=bool(self.exporters.otlp.endpoint),
        )

    def store_beside_workers(self) -> StoreConfig:
        """`store:` for a process that runs the assembler's mapping workers beside DuckDB: a null
        `threads` becomes the cores the workers leave (`StoreConfig.beside_workers`)."""
        return self.store.beside_workers(self.assembler.workers if self.assembler.enabled else 0)

    def check_evaluators(self) -> None:
        """Refuse `evaluators:` entries that could not be built (unknown name or option, a judge
        option without a judge), naming the entry and key; `ConfigError`."""
        try:
            check_entries(self.evaluator_entries(), judge_configured=bool(self.judge.model))
        except ValueError as exc:
            raise ConfigError(f"invalid configuration: {exc}") from None


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
