"""The `sessions:` config section (docs/sessions.md)."""

from __future__ import annotations

from pydantic import Field

from collector.config_base import Section
from collector.store.schema_sql import DEFAULT_IDLE_TIMEOUT


class SessionsConfig(Section):
    # Seconds without a new turn after which a session has ended (`sessions.status`).
    idle_timeout: float = Field(DEFAULT_IDLE_TIMEOUT, gt=0, allow_inf_nan=False)
    # Seconds between two computations of the sessions whose turns or scores were written: how
    # long `sessions` (the view, the API, the dashboard) may lag behind a new turn.
    refresh_interval: float = Field(5.0, gt=0, le=3600, allow_inf_nan=False)
    # Session-level scores (session.turns, session.failed_turns, session.repeated_question) given
    # to each session once it has ended (idle_timeout without a new turn).
    scores: bool = True
    # The judge's `conversation_resolved` of each session that ended (one call a session, within
    # `sampling.budget`; needs `judge.model`): whether the user's needs were met (docs/sessions.md).
    conversation_resolved: bool = False
