"""A ready judge client from settings: the one way every command gets its judge."""

from __future__ import annotations

from typing import Any

from collector.store.verdicts import DuckDBVerdictStore, VerdictStoreError
from evaluators.judge.client import JudgeClient
from evaluators.judge.settings import JudgeSettings


class JudgeSetupError(ValueError):
    """The judge cannot be set up from the settings; the message names the key to fix."""


def open_judge(
    settings: JudgeSettings,
    *,
    model: str | None = None,
    persistent_cache: bool = True,
    check: bool = True,
    **overrides: Any,
) -> JudgeClient:
    """A judge client for `settings` (with `model` and any setting overridden), after its pre-run
    check (`JudgeCheckError` when the model does not answer a tiny structured request; `check=False`
    leaves the check to the caller, e.g. a service that must start even when the judge is down).

    With `persistent_cache` and `verdict_store` set, verdicts are kept in that DuckDB file, so a
    later run reuses them. Close both with `close_judge`."""
    updates = dict(overrides)
    if model:
        updates["model"] = model
    settings = JudgeSettings.model_validate({**settings.model_dump(), **updates})
    if not settings.model:
        raise JudgeSetupError("no judge model: set judge.model in the config or pass --judge MODEL")
    store = None
    if persistent_cache and settings.verdict_store:
        try:
            store = DuckDBVerdictStore(settings.verdict_store)
        except VerdictStoreError as exc:
            raise JudgeSetupError(f"judge.verdict_store: {exc}") from None
    client = JudgeClient(settings, store=store)
    if check:
        try:
            client.check()
        except Exception:
            close_judge(client)
            raise
    return client


def close_judge(client: JudgeClient | None) -> None:
    """Close a client from `open_judge` and the verdict store it opened for it."""
    if client is None:
        return
    try:
        client.close()
    finally:
        if isinstance(client.store, DuckDBVerdictStore):
            client.store.close()
