"""`ragpulse agreement`: how far each evaluator agrees with the verdicts people gave on its scores;
with `--feedback NAME`, how well each score predicts the users' feedback of that name (the AUC)."""

from __future__ import annotations

import sys

import click
import orjson

from collector.cli.common import config_option, key_option, sql_runner, target, user_errors
from collector.cli.output import print_table
from collector.config import Config
from collector.feedback.agreement import SAMPLES, agreement_report, feedback_report
from collector.schema.windows import Window, parse_duration, parse_time, utc_now


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


@click.command()
@config_option
@key_option
@click.option("--db", type=click.Path(dir_okay=False), help="DuckDB file (default: store.path).")
@click.option("--server", help="URL of a running ragpulse (its HTTP port), e.g. http://127.0.0.1:4318.")
@click.option("--since", default="30d", show_default=True, help="Verdicts given in this window: 1h, 7d, 30d.")
@click.option("--until", "until_text", help="Window end, ISO 8601 (default: now; times are UTC).")
@click.option("--service", help="Only this service's traces.")
@click.option(
    "--sample",
    type=click.Choice(SAMPLES),
    default="random",
    show_default=True,
    help="Estimate on the random queue's verdicts (unbiased), or on every verdict.",
)
@click.option(
    "--feedback",
    "feedback_name",
    metavar="NAME",
    help="Instead: the AUC of each score against the users' feedback NAME (thumbs), with a 95% interval.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout instead of a table.")
@click.pass_context
@user_errors
def agreement(
    ctx: click.Context,
    config_path: str | None,
    db: str | None,
    server: str | None,
    since: str,
    until_text: str | None,
    service: str | None,
    sample: str,
    feedback_name: str | None,
    as_json: bool,
) -> None:
    """Agreement of each evaluator (and judge model and prompt version) with people's verdicts:
    n, raw agreement, Cohen's kappa with a 95 % interval, the confusion, Spearman and MAE. With
    --feedback NAME: for each score, the AUC against that feedback (the chance that a random trace
    with negative feedback scores lower than one with positive feedback), with DeLong's 95 % interval."""
    if feedback_name is not None and not feedback_name.strip():
        raise click.BadParameter(
            "give the name of the feedback (thumbs, rating, ...)", param_hint="--feedback"
        )
    try:
        end = parse_time(until_text) if until_text else utc_now()
        window = Window.ending(end, parse_duration(since))
    except (ValueError, OverflowError) as exc:
        raise click.BadParameter(str(exc), param_hint="--since / --until") from None
    config, url = target(ctx, config_path, server, db)
    if feedback_name is not None:
        _print_feedback(config, url, window, service, feedback_name.strip(), as_json)
        return
    with sql_runner(config, url) as run:
        report = agreement_report(lambda sql: run(sql, config.sql.max_rows)[0], window, service, sample)  # type: ignore[arg-type]
    if as_json:
        sys.stdout.write(orjson.dumps(report).decode() + "\n")
        return
    click.echo(
        f"verdicts given {window.start:%Y-%m-%d %H:%M} to {window.end:%Y-%m-%d %H:%M} UTC, {sample} sample"
    )
    if not report["evaluators"]:
        click.echo("no verdicts in this window: annotate scores in the dashboard or POST /api/annotations")
        return
    rows = [
        [
            e["name"],
            e["model"] or ("judge, no call" if e["evaluator"] == "judge" else "deterministic"),
            e["prompt_version"] or "-",
            str(e["n"]),
            _number(e["agreement"]),
            _number(e["kappa"]),
            "-" if e["kappa_low"] is None else f"{e['kappa_low']:.2f} to {e['kappa_high']:.2f}",
            "{pass_pass}/{pass_fail}/{fail_pass}/{fail_fail}".format(**e["confusion"]),
            _number(e["spearman"]),
            _number(e["mae"]),
            str(e["n_other"]),
        ]
        for e in report["evaluators"]
    ]
    headers = [
        "score",
        "model",
        "prompt",
        "n",
        "agree",
        "kappa",
        "95% CI",
        "pp/pf/fp/ff",
        "rho",
        "mae",
        "other",
    ]
    print_table(headers, rows, width=130)


def _print_feedback(
    config: Config, url: str | None, window: Window, service: str | None, name: str, as_json: bool
) -> None:
    """`--feedback NAME`: the AUC of each score against that feedback, as a table or JSON."""
    with sql_runner(config, url) as run:
        report = feedback_report(lambda sql: run(sql, config.sql.max_rows)[0], window, service, name)
    if as_json:
        sys.stdout.write(orjson.dumps(report).decode() + "\n")
        return
    click.echo(
        f"feedback {name!r} given {window.start:%Y-%m-%d %H:%M} to {window.end:%Y-%m-%d %H:%M} UTC "
        "(AUC: the chance that a negative scores below a positive)"
    )
    if not report["scores"]:
        click.echo(f"no pass/fail feedback {name!r} on scored traces in this window: POST /api/feedback")
        return
    rows = [
        [
            s["name"],
            str(s["n_positive"]),
            str(s["n_negative"]),
            _number(s["auc"], 3),
            "-" if s["auc_low"] is None else f"{s['auc_low']:.3f} to {s['auc_high']:.3f}",
        ]
        for s in report["scores"]
    ]
    print_table(["score", "n+", "n-", "AUC", "95% CI"], rows, width=100)
