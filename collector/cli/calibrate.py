"""`ragpulse calibrate CASES`: measure a judge on cases with known verdicts."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import click
import orjson

from collector.cli.common import config_option, judge_errors, load, user_errors
from collector.cli.output import print_table

REPORT_HEADERS = (
    "evaluator",
    "mode",
    "runs",
    "accuracy",
    "false pass",
    "false fail",
    "errors",
    "timeouts",
    "disagree",
    "injection ok",
    "injection false pass",
)


@click.command()
@click.argument("cases_file", metavar="CASES", type=click.Path(dir_okay=False, path_type=Path))
@config_option
@click.option("--judge", "judge_model", help="Judge model (default: judge.model).")
@click.option("--base-url", help="Judge endpoint (default: judge.base_url, else OPENAI_BASE_URL).")
@click.option("--repeats", type=click.IntRange(1, 20), default=1, show_default=True, help="Runs per case.")
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the report as JSON."
)
@click.pass_context
@user_errors
def calibrate(
    ctx: click.Context,
    cases_file: Path,
    config_path: str | None,
    judge_model: str | None,
    base_url: str | None,
    repeats: int,
    json_path: Path | None,
) -> None:
    """Measure the judge on cases with known verdicts: accuracy per evaluator and mode, false
    passes and fails, errors, disagreement across repeats, and robustness to prompt injection.

    Every run asks the judge: the in-memory cache is off (cache_size 0) and judge.verdict_store is
    not used either, so calibration measures the model, never verdicts remembered from earlier runs.
    """
    from collector.judge_setup import close_judge, open_judge
    from evaluators.calibration import load_calibration, run_calibration, tag_counts
    from evaluators.registry import build_evaluator

    config = load(ctx, config_path)
    calibration = load_calibration(cases_file)
    overrides: dict[str, Any] = {"cache_size": 0}
    if base_url:
        overrides["base_url"] = base_url
    with judge_errors():
        judge = open_judge(config.judge, model=judge_model, persistent_cache=False, **overrides)
    try:
        reports = run_calibration(
            calibration,
            functools.partial(build_evaluator, judge=judge),
            repeats=repeats,
            workers=judge.settings.max_concurrency,
        )
    finally:
        close_judge(judge)
    tags = ", ".join(f"{tag} {n}" for tag, n in tag_counts(calibration).items())
    click.echo(
        f"{calibration.name}: {len(calibration.cases)} case(s) ({tags}); "
        f"judge {judge.model}, {repeats} run(s)"
    )
    print_table(REPORT_HEADERS, [_report_row(r) for r in reports], width=160)
    for r in reports:
        if r.false_pass_cases:
            click.echo(
                f"false passes, {r.evaluator} {r.mode or ''}: {', '.join(sorted(set(r.false_pass_cases)))}"
            )
    if json_path:
        report = {
            "name": calibration.name,
            "judge": judge.model,
            "repeats": repeats,
            "evaluators": [r.as_dict() for r in reports],
        }
        json_path.write_text(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode(), encoding="utf-8")


def _report_row(r: Any) -> list[str]:
    if r.unavailable:
        return [r.evaluator, r.mode or "-", "-", "no judge", *["-"] * 7]
    accuracy = "-" if r.accuracy is None else f"{r.accuracy:.0%}"
    injection = "-" if r.injection_accuracy is None else f"{r.injection_correct}/{r.injection_runs}"
    return [
        r.evaluator,
        r.mode or "-",
        str(r.runs),
        accuracy,
        str(r.false_passes),
        str(r.false_fails),
        str(r.errors),
        str(r.timeouts),
        str(r.disagreements),
        injection,
        str(r.injection_false_passes),
    ]
