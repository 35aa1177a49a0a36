"""`ragpulse eval SUITE`: offline evaluation of test cases; exit 1 when a score fails or errors."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from collector.cli.common import config_option, judge_errors, load, user_errors
from collector.config import Config
from evaluators.embeddings import EmbeddingSettings


@click.command("eval")
@click.argument("suite_file", metavar="SUITE", type=click.Path(dir_okay=False, path_type=Path))
@config_option
@click.option(
    "--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path), help="Write JUnit XML here."
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the results as JSON here.",
)
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A saved --json file; per-case, per-metric regressions against it are listed.",
)
@click.option(
    "--snapshot",
    "snapshot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Snapshot of each case's answer and retrieved ids; changed cases are listed (created if missing).",
)
@click.option("--update-snapshot", is_flag=True, help="Accept the current outputs into the --snapshot file.")
@click.option(
    "--min-similarity",
    type=click.FloatRange(0, 1),
    default=0.9,
    show_default=True,
    help="Snapshot answer similarity.",
)
@click.option(
    "--min-overlap",
    type=click.FloatRange(0, 1),
    default=0.8,
    show_default=True,
    help="Snapshot retrieval overlap.",
)
@click.option(
    "--embedding-model",
    help="Snapshot answer similarity by this embedding model's cosine (default: embeddings.model, "
    "else lexical).",
)
@click.pass_context
@user_errors
def eval_suite(
    ctx: click.Context,
    suite_file: Path,
    config_path: str | None,
    junit_path: Path | None,
    json_path: Path | None,
    baseline: Path | None,
    snapshot_path: Path | None,
    update_snapshot: bool,
    min_similarity: float,
    min_overlap: float,
    embedding_model: str | None,
) -> None:
    """Score a suite of cases offline; exit 1 when any score fails or errors.

    Evaluators: the suite's (or a case's) `evaluators:`, else the config's `evaluators:`, else the
    default set. Snapshot changes are listed for review and never fail the run.
    """
    from collector.judge_setup import close_judge, open_judge
    from collector.replay import read_trace
    from evaluators.suite import compare, junit_xml, load_suite, read_baseline, results_json

    config = load(ctx, config_path)
    config.check_evaluators()
    suite = load_suite(suite_file)
    previous = read_baseline(baseline) if baseline else None
    with judge_errors():
        judge = open_judge(config.judge) if config.judge.model else None
    try:
        results = _run(
            config,
            suite,
            judge,
            lambda path, trace_id: read_trace(suite_file.parent / path, trace_id, config.mapping.options()),
        )
    except ValueError as exc:
        raise click.ClickException(f"{suite_file}: {exc}") from None
    finally:
        close_judge(judge)
    if json_path:
        json_path.write_text(results_json(results), encoding="utf-8")
    if junit_path:
        junit_path.write_text(junit_xml(suite.name, results), encoding="utf-8")
    _print_report(suite.name, results)
    if previous is not None:
        regressions = compare(results, previous)
        click.echo(f"\nagainst baseline {baseline}: {len(regressions)} regression(s)")
        for r in regressions:
            click.echo(f"  {r.case} / {r.name}: {r.reason}")
    if snapshot_path:
        embeddings = config.embeddings
        if embedding_model:
            embeddings = embeddings.model_copy(update={"model": embedding_model})
        _check_snapshot(results, snapshot_path, update_snapshot, min_similarity, min_overlap, embeddings)
    elif update_snapshot:
        raise click.UsageError("--update-snapshot needs --snapshot FILE")
    if any(result.failed for result in results):
        sys.exit(1)


def _run(config: Config, suite: Any, judge: Any, load_trace: Any) -> list[Any]:
    """Score the suite; entries a suite does not give come from the config's `evaluators:`."""
    from evaluators.registry import build_evaluators
    from evaluators.suite import openai_generator, run_suite

    configured = config.evaluator_entries()

    def build(entries: Sequence[Mapping[str, Any]] | None) -> list[Any]:
        return build_evaluators(entries if entries is not None else configured, judge=judge)

    return run_suite(
        suite,
        build,
        load_trace=load_trace,
        generate=openai_generator(suite.model) if suite.model else None,
        # Models are waited on, so cases go at once; deterministic scoring gains nothing.
        workers=config.judge.max_concurrency if judge or suite.model else 1,
    )


def _check_snapshot(
    results: list[Any],
    path: Path,
    update: bool,
    min_similarity: float,
    min_overlap: float,
    embeddings: EmbeddingSettings,
) -> None:
    from evaluators.embeddings import open_embedder
    from evaluators.suite import (
        compare_snapshot,
        embedding_similarity,
        read_snapshot,
        snapshot_of,
        write_snapshot,
    )

    current = snapshot_of(results)
    if update or not path.exists():
        write_snapshot(path, current)
        click.echo(f"\nsnapshot {path}: {'updated' if update else 'created'} with {len(current)} case(s)")
        return
    options: dict[str, Any] = {"min_similarity": min_similarity, "min_overlap": min_overlap}
    measure = "lexical"
    if embeddings.model:
        options["similarity"] = embedding_similarity(open_embedder(embeddings))
        measure = f"embedding cosine, {embeddings.model}"
    changes = compare_snapshot(read_snapshot(path), current, **options)
    click.echo(
        f"\nagainst snapshot {path} (answer similarity: {measure}): {len(changes)} changed case(s) to review"
    )
    for change in changes:
        click.echo(f"  {change.case}: {change.reason}")


def _print_report(suite_name: str, results: list[Any]) -> None:
    """Failures first, each failing score with its failing items as evidence; then a summary."""
    from evaluators.suite import score_line

    ordered = sorted(results, key=lambda r: not r.failed)
    for result in ordered:
        mark = "FAIL" if result.failed else "ok  "
        click.echo(f"{mark} {result.name}")
        if result.failed:
            for score in result.scores:
                if score.status in ("fail", "error"):
                    click.echo("     " + score_line(score).replace("\n", "\n     "))
    failed = sum(1 for r in results if r.failed)
    click.echo(f"\n{suite_name}: {len(results) - failed}/{len(results)} case(s) passed, {failed} failed")
