"""The base of every config section (unknown keys are refused, assignments are validated), and the
error a configuration that cannot be used raises."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the offending key path."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)
