"""The `auth:` config section: API keys and what each may do."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from collector.config_base import Section

# ingest: send spans and logs (and feedback); read: the API, the dashboard, SQL; admin: writes
# through the API (`POST /api/cases`); feedback: `POST /api/feedback` only (a key the app's
# frontend can hold); annotate: `POST /api/annotations` (reviewers). Independent: a key has
# exactly the scopes it lists.
Scope = Literal["ingest", "read", "admin", "feedback", "annotate"]


class KeyConfig(Section):
    """One key: where its secret is (an environment variable or a file, never the config itself)."""

    name: str = Field(min_length=1)
    key_env: str | None = Field(None, min_length=1)
    key_file: str | None = Field(None, min_length=1)
    scopes: list[Scope] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.key_env is None) == (self.key_file is None):
            raise ValueError("a key has exactly one of key_env (a variable's name) and key_file (a path)")
        return self


class AuthConfig(Section):
    # None configured: no authentication (the loopback default; a warning when bound elsewhere).
    keys: list[KeyConfig] = Field(default_factory=list)
    # GET /metrics: open (like /healthz, for scrapers on a private network) or needing a read key.
    metrics: Literal["open", "read"] = "open"

    @model_validator(mode="after")
    def _unique_names(self) -> Self:
        names = [k.name for k in self.keys]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"key names must be unique; repeated: {', '.join(repeated)}")
        return self
