"""`ragpulse rescore`: score stored traces again with the evaluators the config lists now
(docs/rescore.md)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Any

import click
import duckdb
import orjson
from pydantic import ValidationError

from collector.api_client import ApiClient
from collector.cli.common import config_option, judge_errors, key_option, target, user_errors, writable
from collector.config import Config
from collector.rescore.request import RescoreRequest
from collector.rescore.runner import Progress, RescoreError
from collector.store.base import RescoreScopeError

_POLL_SECONDS = 1.0


@click.command()
@config_option
@key_option
@click.option("--db", type=click.Path(dir_okay=False), help="DuckDB file (default: store.path).")
@click.option("--server", help="URL of a running ragpulse (its HTTP port): the run goes on inside it.")
@click.option("--since", default="7d", show_default=True, help="Traces started in this window: 1h, 7d, 30d.")
@click.option("--until", "until_text", help="Window end, ISO 8601 (default: now; times are UTC).")
@click.option("--service", help="Only this service's traces.")
@click.option("--slice", "slice_text", metavar="DIMENSION=VALUE", help="Only traces of this slice.")
@click.option(
    "--evaluator",
    "evaluators",
    multiple=True,
    metavar="NAME",
    help="A score to give again (repeatable; default: every configured evaluator).",
)
@click.option(
    "--judge-rate",
    type=click.FloatRange(0, 1),
    help="Judge this share of the traces (default: the traces the judge scored before).",
)
@click.option(
    "--dry-run", is_flag=True, help="Count the traces, judge calls, tokens and cost; write nothing."
)
@click.option("--json", "as_json", is_flag=True, help="The estimate or the run's end as one JSON object.")
@click.pass_context
@user_errors
def rescore(
    ctx: click.Context,
    config_path: str | None,
    db: str | None,
    server: str | None,
    since: str,
    until_text: str | None,
    service: str | None,
    slice_text: str | None,
    evaluators: tuple[str, ...],
    judge_rate: float | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Score stored traces again: after adding an evaluator, changing a threshold, a judge model or
    a prompt. The new scores replace the old ones (kept in score_history); aggregates, gates and the
    dashboard count the new. Stopped or killed, the same command goes on where it stopped."""
    try:
        request = RescoreRequest(
            since=since,
            until=until_text,
            service=service,
            slice=slice_text,
            evaluators=list(evaluators),
            judge_rate=judge_rate,
            dry_run=dry_run,
        )
    except ValidationError as exc:
        problem = exc.errors()[0]
        raise click.BadParameter(str(problem["msg"]), param_hint=f"--{problem['loc'][0]}") from None
    config, url = target(ctx, config_path, server, db)
    answer = _through_server(url, request, as_json) if url else _in_process(config, request, as_json)
    if as_json:
        sys.stdout.write(orjson.dumps(answer, default=str).decode() + "\n")
    if answer.get("status") in ("failed", "stopped"):
        raise SystemExit(1)


def _in_process(config: Config, request: RescoreRequest, as_json: bool) -> dict[str, Any]:
    from collector.rescore.setup import build_rescorer
    from collector.store import open_store

    # A dry run only reads: the file opened read-only (nothing migrated, nothing written).
    with writable(config), open_store(config.store_beside_workers(), read_only=request.dry_run) as store:
        judge = None
        try:
            rescorer = build_rescorer(config, store)
            plan = rescorer.plan(request)
            if request.dry_run:
                estimate = rescorer.estimate(request).as_dict()
                if not as_json:
                    _print_estimate(estimate)
                return estimate
            if plan.judged:
                from collector.judge_setup import open_judge

                with judge_errors():
                    judge = open_judge(config.judge)
            rescorer = build_rescorer(config, store, judge, refresh_sessions=True)
            if not store.shared:  # the file is ours: a run marked running was killed
                store.stop_orphaned_rescore_runs()
            stop = threading.Event()
            with _ProgressBar(as_json) as bar:
                try:
                    progress = rescorer.run(request, "cli", bar.update, stop)
                except (KeyboardInterrupt, duckdb.InterruptException, RuntimeError) as exc:
                    # Ctrl-C while DuckDB runs a statement reaches here as its interruption.
                    if isinstance(exc, RuntimeError) and "interrupted" not in str(exc):
                        raise
                    stop.set()
                    if bar.last is not None:  # recorded as stopped, not as failed
                        store.set_rescore_status(bar.last.run_id, "stopped")
                    raise click.ClickException(
                        "stopped: what was stored stays; the same command goes on from there"
                    ) from None
        except (RescoreError, RescoreScopeError) as exc:
            raise click.ClickException(str(exc)) from None
        finally:
            if judge is not None:
                from collector.judge_setup import close_judge

                close_judge(judge)
    if not as_json:
        _print_end(progress.as_dict())
    return progress.as_dict()


def _through_server(url: str, request: RescoreRequest, as_json: bool) -> dict[str, Any]:
    with ApiClient(url) as api:
        answer: dict[str, Any] = api.post("/api/rescore", request.model_dump())
        if request.dry_run:
            if not as_json:
                _print_estimate(answer)
            return answer
        with _ProgressBar(as_json) as bar:
            while True:
                bar.update(Progress(**{k: answer[k] for k in _PROGRESS_FIELDS if k in answer}))
                if answer["status"] != "running":
                    break
                time.sleep(_POLL_SECONDS)
                answer = api.get(f"/api/rescore/{answer['run_id']}")
    if not as_json:
        _print_end(answer)
    return answer


_PROGRESS_FIELDS = tuple(Progress.__dataclass_fields__)


class _ProgressBar:
    """rich's progress bar on stderr; when stderr is no terminal (a log, a CI job), a line per stored
    batch (`scoring.rescore_batch` traces); nothing with --json."""

    def __init__(self, quiet: bool) -> None:
        self._quiet = quiet
        self._lines = not quiet and not sys.stderr.isatty()
        self._bar: Any = None
        self._task: Any = None
        self._shown: tuple[int, str | None, str] | None = None
        self.last: Progress | None = None  # the run's latest progress
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> _ProgressBar:
        if not self._quiet and not self._lines:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = self._stack.enter_context(
                Progress(
                    TextColumn("[bold]{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TextColumn("{task.fields[note]}"),
                    TimeRemainingColumn(),
                    console=Console(stderr=True),
                )
            )
        return self

    def update(self, progress: Progress) -> None:
        self.last = progress
        note = f"waiting for the judge's budget ({progress.waiting})" if progress.waiting else ""
        if self._lines:
            shown = (progress.traces_done, progress.waiting, progress.status)
            if shown != self._shown:
                self._shown = shown
                click.echo(
                    f"{progress.run_id}: {progress.traces_done} of {progress.traces_total} traces"
                    + (f", {note}" if note else ""),
                    err=True,
                )
            return
        if self._bar is None:
            return
        if self._task is None:
            self._task = self._bar.add_task(progress.run_id, total=progress.traces_total, note="")
        self._bar.update(self._task, completed=progress.traces_done, total=progress.traces_total, note=note)

    def __exit__(self, *exc: object) -> None:
        self._stack.close()


def _print_estimate(estimate: dict[str, Any]) -> None:
    click.echo(
        f"dry run: traces started {estimate['window_start']} to {estimate['window_end']} UTC; nothing written"
    )
    click.echo(f"  traces to score again: {estimate['traces']:,}")
    names = ", ".join(estimate["evaluators"]) or "none"
    click.echo(f"  deterministic scores: {estimate['deterministic_scores']:,} ({names})")
    judge_names = ", ".join(estimate["judge_evaluators"]) or "none"
    click.echo(
        f"  judge calls: {estimate['judge_calls']:,} on {estimate['judged_traces']:,} traces ({judge_names})"
    )
    if estimate["judge_calls"]:
        if estimate["input_tokens"] is None:
            click.echo("  tokens: unknown (no judge call of these scores in the window to go by)")
        else:
            click.echo(
                f"  estimated tokens: {estimate['input_tokens']:,} in, {estimate['output_tokens']:,} out "
                "(the mean of the window's judge calls per score)"
            )
        cost = estimate["cost_usd"]
        click.echo(
            f"  estimated cost: ${cost:,.2f}"
            if cost is not None
            else "  estimated cost: set judge.input_cost_per_million / output_cost_per_million"
        )


def _print_end(run: dict[str, Any]) -> None:
    resumed = " (taken up where it stopped)" if run.get("resumed") else ""
    click.echo(
        f"{run['run_id']}: {run['status']}{resumed}; "
        f"{run['traces_done']:,} of {run['traces_total']:,} traces, "
        f"{run['traces_judged']:,} judged; {run['scores_written']:,} scores written, "
        f"{run['scores_replaced']:,} replaced (kept in score_history)"
    )
    if run.get("error"):
        click.echo(f"error: {run['error']}", err=True)
