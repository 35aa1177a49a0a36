"""What `ragpulse datasets export --labels` and `ragpulse align` share: people's labels in a window
and the stored traces they were given on, read from the database file or through a running server,
and the export itself."""

from __future__ import annotations

from pathlib import Path

import click
import yaml

from collector.cli.common import sql_runner
from collector.config import Config
from collector.feedback.labelled import Label, calibration_set, calibration_yaml_data
from collector.feedback.stored_traces import LabelReadError, read_labels, read_traces
from collector.schema.windows import Window, parse_duration, utc_now
from collector.store import StoreError
from semconv import RagTrace


def window_since(since: str) -> Window:
    """The window of labels given in the last `since` (a duration: 1h, 7d, 30d)."""
    try:
        return Window.ending(utc_now(), parse_duration(since))
    except (ValueError, OverflowError) as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None


def read_labelled(
    config: Config, url: str | None, window: Window, service: str | None, name: str | None = None
) -> tuple[list[Label], dict[str, RagTrace]]:
    """The labels given in the window (of score `name`) and their traces as the judge sees them
    (the config's `mapping:` and `redaction.apply_to: [judge]`, applied to the labels' comments
    too), through `url` or the store file."""
    max_rows = config.sql.max_rows
    redactor = config.redaction.redactor("judge")
    with sql_runner(config, url) as run:
        try:
            labels = read_labels(run, max_rows, window, service, name, redactor)
            traces = read_traces(
                run,
                max_rows,
                {label.trace_id for label in labels},
                config.mapping.options(),
                redactor,
                config.scoring.conversation_turns,
            )
        except LabelReadError as exc:
            raise StoreError(str(exc)) from None
    return labels, traces


def export_labels(config: Config, url: str | None, path: Path, since: str, service: str | None) -> str:
    """Write the labelled traces of the window to `path` as a calibration file; the summary line.
    Nothing is written when no case is left (a `ClickException` says why).

    A verdict on a trace that is a few-shot example of that score's judge (`judge.examples`, the
    files read as the judge reads them) is left out and counted, so that `ragpulse calibrate` never
    measures the configured judge on its own examples."""
    from collector.judge_setup import load_examples

    examples = {name: shots.trace_ids for name, shots in load_examples(config.judge).items()}
    labels, traces = read_labelled(config, url, window_since(since), service)
    calibration, counts = calibration_set(labels, traces, examples=examples)
    left_out = (
        f"left out: {counts.ties} tie(s), {counts.gone} trace(s) no longer stored, "
        f"{counts.no_answer} without an answer, {counts.examples} verdict(s) on judge examples"
    )
    if calibration is None:
        raise click.ClickException(
            f"no labelled trace to export ({counts.labels} label(s) in the last {since}; {left_out})"
        )
    text = yaml.safe_dump(calibration_yaml_data(calibration), sort_keys=False, allow_unicode=True, width=100)
    path.write_text(text, encoding="utf-8")
    verdicts = counts.verdicts
    return (
        f"wrote {counts.cases} case(s) with {verdicts['pass'] + verdicts['fail']} verdict(s) "
        f"({verdicts['pass']} pass, {verdicts['fail']} fail) from {counts.labels} label(s) to {path}; "
        f"{left_out}"
    )
