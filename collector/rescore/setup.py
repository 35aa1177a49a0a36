"""A `Rescorer` from the config: the evaluators it lists, the judge's when one is given, the
mapping options, the workers and the judge's prices: one setup for `ragpulse rescore --db` and
for `serve`'s rescore jobs."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from collector.config import Config
from collector.dashboard.data import JudgePrices
from collector.processors.sampler import JudgeBudget
from collector.rescore.runner import JudgeParts, RescoreError, Rescorer
from collector.store.base import Store
from evaluators.registry import build_evaluator

if TYPE_CHECKING:
    from collector.processors.redaction import Redactor
    from evaluators.judge.client import JudgeClient


class BetweenBatches:
    """What a run does with the store after each batch it stored: fold the write-ahead log into the
    file once it passes `store.checkpoint_threshold_mb` (DuckDB does not after deletes; without it a
    run over a million traces kept every new and replaced row in memory and ran out of
    `store.memory_limit`), and, with `refresh_sessions` (the command line, where no sessions refresher
    runs), compute the sessions of the rescored turns."""

    def __init__(self, store: Store, threshold_bytes: int, refresh_sessions: bool) -> None:
        self._store = store
        self._threshold = threshold_bytes
        self._refresh_sessions = refresh_sessions

    def __call__(self) -> None:
        if self._refresh_sessions:
            self._store.refresh_sessions()
        if not self._store.shared and self._store.storage_size().wal_bytes > self._threshold:
            self._store.checkpoint()


def build_rescorer(
    config: Config,
    store: Store,
    judge: JudgeClient | None = None,
    budget: JudgeBudget | None = None,
    redactor: Redactor | None = None,
    refresh_sessions: bool = False,
) -> Rescorer:
    """The rescorer of `config` on `store`; with `judge`, its evaluators on that client within
    `budget` (default: a budget of its own from `sampling.budget`); `refresh_sessions`: it computes
    the sessions of each batch itself (no sessions refresher runs beside it)."""
    setup = config.scoring_setup()
    if setup is None:
        raise RescoreError("scoring.enabled is false: no evaluator to score with")
    parts = None
    if judge is not None and setup.judge_entries:
        limits = config.sampling.budget
        parts = JudgeParts(
            [(str(e["name"]), build_evaluator(e, judge)) for e in setup.judge_entries],
            budget
            or JudgeBudget(limits.judge_calls_per_minute, limits.judge_tokens_per_day, time.monotonic()),
            config.judge.max_concurrency,
            config.scoring.conversation_turns,
            redactor if redactor is not None else config.redaction.redactor("judge", None),
        )
    prices = JudgePrices(config.judge.input_cost_per_million, config.judge.output_cost_per_million)
    return Rescorer(
        store,
        setup,
        parts,
        mapping=config.mapping.options(),
        workers=config.assembler.workers,
        niceness=config.assembler.worker_nice,
        batch=config.scoring.rescore_batch,
        prices=prices.cost,
        after_batch=BetweenBatches(store, config.store.checkpoint_threshold_mb << 20, refresh_sessions),
    )
