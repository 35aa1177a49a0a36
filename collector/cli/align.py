"""`ragpulse align EVALUATOR`: few-shot examples for a judge evaluator from people's corrections,
measured on held-out labels before and after, and with `--write` made the prompt the service uses
(docs/feedback.md, "Alignment from corrections")."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from collector.cli.common import config_option, judge_errors, key_option, target, user_errors
from collector.cli.labels import read_labelled, window_since
from collector.cli.output import print_table
from evaluators.judge.examples import MAX_EXAMPLES

if TYPE_CHECKING:
    from collector.config import Config
    from collector.feedback.align import Measure
    from evaluators.judge.client import JudgeClient
    from evaluators.judge.examples import FewShot
    from evaluators.scores import Score
    from semconv import RagTrace

EXAMPLES_DIRECTORY = "judge-examples"  # where --write puts a new examples file, beside the config file


@click.command()
@click.argument("evaluator")
@config_option
@key_option
@click.option("--since", default="30d", show_default=True, help="Labels given in this window: 1h, 7d, 30d.")
@click.option("--service", help="Only this service's traces.")
@click.option(
    "--holdout",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.3,
    show_default=True,
    help="Share of the labelled traces held out to measure on (of people's passes and of their fails).",
)
@click.option(
    "--examples",
    "count",
    type=click.IntRange(1, MAX_EXAMPLES),
    default=4,
    show_default=True,
    help="Most examples to add to the prompt.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the split and of the picking.")
@click.option("--write", is_flag=True, help="Write the examples and make the service's judge use them.")
@click.option(
    "--examples-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where --write writes the examples (default: the file judge.examples names, else "
    f"{EXAMPLES_DIRECTORY}/EVALUATOR.yaml beside the config file).",
)
@click.option("--judge", "judge_model", help="Judge model (default: judge.model).")
@click.option("--base-url", help="Judge endpoint (default: judge.base_url, else OPENAI_BASE_URL).")
@click.option("--db", type=click.Path(dir_okay=False), help="DuckDB file (store.path).")
@click.option("--server", help="URL of a running ragpulse (its HTTP port).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout instead of a table.")
@click.pass_context
@user_errors
def align(
    ctx: click.Context,
    evaluator: str,
    config_path: str | None,
    since: str,
    service: str | None,
    holdout: float,
    count: int,
    seed: int,
    write: bool,
    examples_file: Path | None,
    judge_model: str | None,
    base_url: str | None,
    db: str | None,
    server: str | None,
    as_json: bool,
) -> None:
    """Pick few-shot examples for the judge EVALUATOR (e.g. faithfulness) among the labelled traces
    where people corrected it, and measure them: the labelled traces (but those that are already
    examples in judge.examples) are split into a training and a held-out part; the examples come
    from the training part's disagreements with the judge's scores; the judge scores the held-out
    traces with the current prompt and with the examples, and agreement with people (raw, and
    Cohen's kappa with its 95 % interval) is reported for both.

    Nothing is written without --write. With it, the examples go to a file that judge.examples
    names, and the service's judge uses them from its next start.
    """
    from collector.feedback.align import (
        example_of,
        false_failures,
        missed_failures,
        pick_examples,
        split,
        without_examples,
    )
    from collector.feedback.labelled import consensus
    from collector.judge_setup import load_examples
    from evaluators.judge.examples import ExamplesFile, FewShot

    config, url = target(ctx, config_path, server, db)
    entry = _judge_entry(config, evaluator)
    window = window_since(since)
    with judge_errors():
        configured = load_examples(config.judge)  # the current prompt's: measured "before"
    current = configured.get(evaluator)
    labels, traces = read_labelled(config, url, window, service, evaluator)
    decided, ties = consensus(labels)
    stored = [labelled for labelled in decided if labelled.trace_id in traces]
    # The current prompt was shown its examples' traces: measured on them it would look better than
    # it is, so they are neither held out nor picked again.
    pool, already = without_examples(stored, current.trace_ids if current else frozenset())
    if not pool:
        raise click.ClickException(
            f"no labelled trace of {evaluator} in the last {since} ({len(labels)} label(s), {ties} tie(s), "
            f"{len(decided) - len(stored)} trace(s) no longer stored, {already} already example(s) in "
            "judge.examples): label some in the dashboard or POST /api/annotations"
        )
    parts = split(pool, holdout, seed)
    picked = pick_examples(parts.train, count, seed)
    if not picked:
        # Verdicts on a deterministic score (or a judge's rule, without a call) correct no model.
        not_judged = sum(1 for c in parts.train if c.judge_status is None)
        raise click.ClickException(
            f"no disagreement between the judge and people among the {len(parts.train)} training "
            f"trace(s) ({not_judged} labelled on a score the judge model did not give): no example "
            "to learn from"
        )
    if not parts.held_out:
        raise click.ClickException(
            f"nothing held out of {len(pool)} labelled trace(s): label more, or raise --holdout"
        )
    shots = FewShot.of([example_of(labelled, traces[labelled.trace_id]) for labelled in picked])
    held = [traces[labelled.trace_id] for labelled in parts.held_out]
    before, after = _measure_both(
        config, entry, configured, shots, held, parts.held_out, judge_model, base_url
    )

    report: dict[str, Any] = {
        "evaluator": evaluator,
        "window": {"start": window.start.isoformat(), "end": window.end.isoformat()},
        "labels": len(labels),
        "ties": ties,
        "gone": len(decided) - len(stored),
        "already_examples": already,
        "train": len(parts.train),
        "held_out": len(parts.held_out),
        "held_out_traces": [labelled.trace_id for labelled in parts.held_out],
        "disagreements": {
            "missed_failures": len(missed_failures(parts.train)),
            "false_failures": len(false_failures(parts.train)),
            # Training traces whose verdicts were all given on a deterministic evaluator's score of
            # the same name: no judge's verdict to disagree with.
            "not_judged": sum(labelled.judge_status is None for labelled in parts.train),
        },
        "examples": [
            {
                "trace_id": labelled.trace_id,
                "verdict": labelled.verdict,
                "judge_verdict": labelled.judge_status,
                "reason": example.reason,
            }
            for labelled, example in zip(picked, shots.examples, strict=True)
        ],
        "before": before.as_dict(),
        "after": after.as_dict(),
        "pre_run_checks": 1,
        "written": None,
    }
    if write:
        provenance = {
            "made_by": "ragpulse align",
            "made_at": datetime.now(UTC).isoformat(timespec="seconds"),
            **{
                k: report[k]
                for k in ("window", "labels", "already_examples", "train", "held_out", "before", "after")
            },
            "since": since,
            "service": service,
            "holdout": holdout,
            "seed": seed,
        }
        examples = ExamplesFile(evaluator=evaluator, examples=list(shots.examples), provenance=provenance)
        report["written"] = _write(ctx, config_path, config, examples, examples_file)
    if as_json:
        sys.stdout.write(orjson.dumps(report).decode() + "\n")
        return
    _print(report)


def _judge_entry(config: Config, name: str) -> dict[str, Any]:
    """The service's `evaluators:` entry of `name` (its mode and options), as a judge variant."""
    from evaluators.registry import DEFAULT_ENTRIES, JUDGE_NAMES

    if name not in JUDGE_NAMES:
        raise click.BadParameter(
            f"{name} has no judge variant; judge evaluators: {', '.join(JUDGE_NAMES)}", param_hint="EVALUATOR"
        )
    entries = config.evaluator_entries()
    listed = [dict(e) for e in (DEFAULT_ENTRIES if entries is None else entries) if e.get("name") == name]
    entry = listed[0] if listed else {"name": name}
    if entry.get("judge") is False:
        raise click.ClickException(f"evaluators: {name} is configured with judge: false; it asks no judge")
    return {**entry, "judge": True}


def _measure_both(
    config: Config,
    entry: dict[str, Any],
    configured: dict[str, FewShot],
    shots: FewShot,
    traces: Sequence[RagTrace],
    held_out: Sequence[Any],
    judge_model: str | None,
    base_url: str | None,
) -> tuple[Measure, Measure]:
    """The judge's agreement on the held-out traces with the current prompt (the examples of
    `judge.examples`, `configured`, as loaded) and with `shots` instead. Every evaluation asks the
    model (no cache), as in `ragpulse calibrate`."""
    from collector.feedback.align import measure
    from collector.judge_setup import close_judge, open_judge

    overrides: dict[str, Any] = {"cache_size": 0}
    if base_url:
        overrides["base_url"] = base_url
    clients: list[JudgeClient] = []
    try:
        with judge_errors():
            current = open_judge(
                config.judge, model=judge_model, persistent_cache=False, examples=configured, **overrides
            )
            clients.append(current)
            examples = {**current.examples, entry["name"]: shots}
            aligned = open_judge(
                config.judge,
                model=judge_model,
                persistent_cache=False,
                check=False,  # the same endpoint and model: checked once, just above
                examples=examples,
                **overrides,
            )
            clients.append(aligned)
        before = measure(_scores(entry, current, traces), held_out)
        after = measure(_scores(entry, aligned, traces), held_out)
    finally:
        for client in clients:
            close_judge(client)
    return before, after


def _scores(entry: dict[str, Any], client: JudgeClient, traces: Sequence[RagTrace]) -> list[Score]:
    from evaluators.parallel import map_in_order
    from evaluators.registry import build_evaluator

    try:
        evaluate = build_evaluator(entry, client)
    except ValueError as exc:
        raise click.ClickException(f"evaluators: {entry['name']}: {exc}") from None
    return map_in_order(evaluate, traces, client.settings.max_concurrency, name="align")


def _write(
    ctx: click.Context, config_path: str | None, config: Config, examples: Any, examples_file: Path | None
) -> dict[str, Any]:
    """Write the examples file and point `judge.examples.<evaluator>` at it (module docstring of
    `collector.config_edit`: the config's lines are inserted, not rewritten, where its layout allows)."""
    from collector.config import DEFAULT_CONFIG_FILE
    from collector.config_edit import set_examples_key, write_atomically
    from evaluators.judge.examples import examples_yaml

    name = examples.evaluator
    config_file = Path(config_path or ctx.obj.get("config_path") or DEFAULT_CONFIG_FILE)
    configured = config.judge.examples.get(name)
    if examples_file is not None:
        path = examples_file
    elif configured is not None:
        path = Path(configured)
    else:
        path = config_file.parent / EXAMPLES_DIRECTORY / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, examples_yaml(examples))
    value = configured if configured is not None and Path(configured) == path else str(path.resolve())
    edit = set_examples_key(config_file, name, value)
    return {"examples_file": str(path), "config": str(edit.path), "config_edit": edit.how}


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _print(report: dict[str, Any]) -> None:
    click.echo(
        f"{report['evaluator']}: {report['labels']} label(s), {report['ties']} tie(s) left out, "
        f"{report['gone']} trace(s) no longer stored, {report['already_examples']} already example(s) "
        f"in judge.examples; {report['train']} trace(s) to learn from "
        f"({report['disagreements']['missed_failures']} missed failure(s), "
        f"{report['disagreements']['false_failures']} false failure(s), "
        f"{report['disagreements']['not_judged']} labelled on a deterministic score), "
        f"{report['held_out']} held out"
    )
    for example in report["examples"]:
        reason = f": {example['reason']}" if example["reason"] else ""
        click.echo(
            f"  example {example['trace_id']}: people {example['verdict']}, "
            f"judge {example['judge_verdict']}{reason}"
        )
    rows = []
    for when in ("before", "after"):
        m = report[when]
        interval = "-" if m["kappa_low"] is None else f"{m['kappa_low']:.2f} to {m['kappa_high']:.2f}"
        rows.append(
            [
                when,
                m["prompt_version"] or "-",
                str(m["n"]),
                _number(m["agreement"]),
                _number(m["kappa"]),
                interval,
                "{pass_pass}/{pass_fail}/{fail_pass}/{fail_fail}".format(**m["confusion"]),
                str(m["no_verdict"]),
                str(m["judge_calls"]),
            ]
        )
    headers = ["prompt", "version", "n", "agree", "kappa", "95% CI", "pp/pf/fp/ff", "no verdict", "calls"]
    print_table(headers, rows, width=130)
    click.echo(
        f"judge calls: {report['before']['judge_calls']} before, {report['after']['judge_calls']} after, "
        f"and {report['pre_run_checks']} pre-run check"
    )
    written = report["written"]
    if written is None:
        click.echo("nothing written (pass --write to make the service's judge use these examples)")
        return
    click.echo(f"wrote {len(report['examples'])} example(s) to {written['examples_file']}")
    edit = written["config_edit"]
    key = f"judge.examples.{report['evaluator']}"
    if edit == "unchanged":
        click.echo(f"{written['config']} already sets {key} to it: config unchanged")
    elif edit == "inserted":
        click.echo(f"set {key} in {written['config']} (lines added, comments kept)")
    elif edit == "created":
        click.echo(f"created {written['config']} with {key}")
    else:
        click.echo(
            f"rewrote {written['config']} to set {key}: its layout could not be edited in place, so its "
            "comments and formatting were NOT kept"
        )
    version = report["after"]["prompt_version"]
    click.echo(f"the judge reads its examples at start: restart ragpulse serve to score with {version}")
