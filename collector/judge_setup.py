"""A ready judge client from settings: the one way every command gets its judge."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from collector.config_base import ConfigError
from collector.store.verdicts import DuckDBVerdictStore, VerdictStoreError
from evaluators.judge.client import JudgeClient
from evaluators.judge.examples import ExamplesError, FewShot, read_examples
from evaluators.judge.settings import JudgeSettings


class JudgeSetupError(ConfigError):
    """The judge cannot be set up from the settings; the message names the key to fix. A
    `ConfigError`, so that `ragpulse serve` reports it in one line too."""


def open_judge(
    settings: JudgeSettings,
    *,
    model: str | None = None,
    persistent_cache: bool = True,
    check: bool = True,
    examples: Mapping[str, FewShot] | None = None,
    **overrides: Any,
) -> JudgeClient:
    """A judge client for `settings` (with `model` and any setting overridden), after its pre-run
    check (`JudgeCheckError` when the model does not answer a tiny structured request; `check=False`
    leaves the check to the caller, e.g. a service that must start even when the judge is down).

    Its calls carry the few-shot examples of `judge.examples` (`load_examples`), or `examples`
    when given (`ragpulse align` measuring new ones). With `persistent_cache` and `verdict_store`
    set, verdicts are kept in that DuckDB file, so a later run reuses them. Close both with
    `close_judge`."""
    updates = dict(overrides)
    if model:
        updates["model"] = model
    settings = JudgeSettings.model_validate({**settings.model_dump(), **updates})
    if not settings.model:
        raise JudgeSetupError("no judge model: set judge.model in the config or pass --judge MODEL")
    if examples is None:
        examples = load_examples(settings)
    store = None
    if persistent_cache and settings.verdict_store:
        try:
            store = DuckDBVerdictStore(settings.verdict_store)
        except VerdictStoreError as exc:
            raise JudgeSetupError(f"judge.verdict_store: {exc}") from None
    client = JudgeClient(settings, store=store, examples=examples)
    if check:
        try:
            client.check()
        except Exception:
            close_judge(client)
            raise
    return client


def load_examples(settings: JudgeSettings) -> dict[str, FewShot]:
    """The few-shot examples of every evaluator `judge.examples` names, read from their files;
    `JudgeSetupError` naming the key (`judge.examples.faithfulness: ...`) when one cannot be used."""
    loaded = {}
    for name, path in settings.examples.items():
        try:
            examples = read_examples(Path(path))
        except ExamplesError as exc:
            raise JudgeSetupError(f"judge.examples.{name}: {exc}") from None
        if examples.evaluator != name:
            raise JudgeSetupError(
                f"judge.examples.{name}: {path} holds examples for {examples.evaluator}, not {name}"
            )
        loaded[name] = FewShot.of(examples.examples)
    return loaded


def close_judge(client: JudgeClient | None) -> None:
    """Close a client from `open_judge` and the verdict store it opened for it."""
    if client is None:
        return
    try:
        client.close()
    finally:
        if isinstance(client.store, DuckDBVerdictStore):
            client.store.close()
