"""The pure parts of `ragpulse align`: the stratified seeded split, picking examples among the
disagreements (with the judge's scores only), leaving out the traces that are already examples,
measuring agreement on the held-out labels; and setting `judge.examples` in a config file without
losing its comments, falling back to a rewrite, and replacing files whole
(collector/config_edit.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from collector import config_edit
from collector.config_edit import insert_examples_key, set_examples_key, with_examples_key, write_atomically
from collector.feedback.agreement_stats import Confusion, cohen_kappa
from collector.feedback.align import (
    false_failures,
    measure,
    missed_failures,
    pick_examples,
    split,
    without_examples,
)
from collector.feedback.labelled import Consensus, Label
from evaluators.scores import Score


def labelled(
    trace_id: str,
    verdict: str,
    judge: str,
    comment: str | None = None,
    evaluator: str = "judge",
    model: str | None = "judge-test",
) -> Consensus:
    label = Label(
        trace_id,
        "faithfulness",
        "ana",
        verdict,
        comment=comment,
        score_status=judge,
        score_evaluator=evaluator,
        judge_model=model if evaluator == "judge" else None,
    )  # type: ignore[arg-type]
    return Consensus(trace_id, "faithfulness", verdict, (label,))  # type: ignore[arg-type]


def population() -> list[Consensus]:
    return [labelled(f"p{i:02d}", "pass", "pass") for i in range(10)] + [
        labelled(f"f{i:02d}", "fail", "pass") for i in range(7)
    ]


def test_the_split_holds_out_a_share_of_each_verdict_and_depends_on_the_seed_only() -> None:
    parts = split(population(), 0.3, seed=1)
    held = [c.trace_id for c in parts.held_out]
    assert sum(t.startswith("p") for t in held) == 3 and sum(t.startswith("f") for t in held) == 2  # 2.1 -> 2
    assert sorted(held + [c.trace_id for c in parts.train]) == sorted(c.trace_id for c in population())
    again = split(list(reversed(population())), 0.3, seed=1)
    assert [c.trace_id for c in again.held_out] == held  # the input's order does not matter
    assert {tuple(c.trace_id for c in split(population(), 0.3, s).held_out) for s in range(5)} != {
        tuple(held)
    }
    with pytest.raises(ValueError, match="holdout"):
        split(population(), 1.5, 0)


def test_examples_alternate_the_two_kinds_of_disagreement_commented_first() -> None:
    train = [
        labelled("m1", "fail", "pass"),
        labelled("m2", "fail", "pass", "fee invented"),
        labelled("m3", "fail", "pass"),
        labelled("x1", "pass", "fail"),
        labelled("ok", "pass", "pass"),
        labelled("err", "fail", "error"),
    ]
    picked = [c.trace_id for c in pick_examples(train, 4, seed=3)]
    assert picked[:2] == ["m2", "x1"]  # a missed failure first, its commented one first, then the other kind
    assert sorted(picked[2:]) == ["m1", "m3"]  # the false failures ran out
    assert [c.trace_id for c in pick_examples(train, 1, seed=3)] == ["m2"]
    assert pick_examples([labelled("ok", "pass", "pass")], 4, 0) == []


def test_measure_counts_agreement_kappa_and_calls() -> None:
    held = [labelled("a", "pass", "pass"), labelled("b", "fail", "pass"), labelled("c", "fail", "pass")]
    judged = [
        Score.judged("faithfulness", 1.0, 1.0).model_copy(update={"prompt_version": "v+x"}),
        Score.judged("faithfulness", 0.0, 1.0).model_copy(update={"prompt_version": "v+x"}),
        Score.fail_error("faithfulness", "timeout", "slow").model_copy(update={"prompt_version": "v+x"}),
    ]
    result = measure(judged, held)
    assert result.confusion == Confusion(pass_pass=1, fail_fail=1)
    assert (result.no_verdict, result.calls, result.prompt_version) == (1, 3, "v+x")
    figures = result.as_dict()
    kappa = cohen_kappa(Confusion(pass_pass=1, fail_fail=1))
    assert (figures["n"], figures["agreement"], figures["kappa"]) == (2, 1.0, kappa.kappa)
    with pytest.raises(ValueError):
        measure(judged[:2], held)


COMMENTED = """\
# my service
store:
  path: rp.duckdb  # the file
judge:   # the judge
  model: gpt-4o-mini   # cheap
sampling: {judge_rate: 0.5}
"""


def test_the_key_is_inserted_and_every_comment_kept(tmp_path: Path) -> None:
    path = tmp_path / "ragpulse.yaml"
    path.write_text(COMMENTED)
    edit = set_examples_key(path, "faithfulness", "/x/faithfulness.yaml")
    assert edit.how == "inserted"
    text = path.read_text()
    for line in COMMENTED.splitlines():
        assert line in text
    data = yaml.safe_load(text)
    assert data["judge"] == {"model": "gpt-4o-mini", "examples": {"faithfulness": "/x/faithfulness.yaml"}}
    # A second evaluator joins the same mapping; the same value again changes nothing.
    assert set_examples_key(path, "context_relevance", "/x/cr.yaml").how == "inserted"
    assert yaml.safe_load(path.read_text())["judge"]["examples"] == {
        "faithfulness": "/x/faithfulness.yaml",
        "context_relevance": "/x/cr.yaml",
    }
    before = path.read_text()
    assert set_examples_key(path, "faithfulness", "/x/faithfulness.yaml").how == "unchanged"
    assert path.read_text() == before


def test_a_layout_the_edit_cannot_handle_is_rewritten_and_said_so(tmp_path: Path) -> None:
    path = tmp_path / "ragpulse.yaml"
    path.write_text("# flow style\njudge: {model: m}\n")
    assert insert_examples_key(path.read_text(), "faithfulness", "/f.yaml") is None
    assert set_examples_key(path, "faithfulness", "/f.yaml").how == "rewritten"
    assert yaml.safe_load(path.read_text()) == {
        "judge": {"model": "m", "examples": {"faithfulness": "/f.yaml"}}
    }
    # Replacing a path is a rewrite too.
    assert set_examples_key(path, "faithfulness", "/g.yaml").how == "rewritten"
    assert yaml.safe_load(path.read_text())["judge"]["examples"] == {"faithfulness": "/g.yaml"}
    missing = tmp_path / "new.yaml"
    assert set_examples_key(missing, "faithfulness", "/f.yaml").how == "created"
    assert yaml.safe_load(missing.read_text()) == {"judge": {"examples": {"faithfulness": "/f.yaml"}}}


def test_only_verdicts_on_the_judges_score_are_disagreements() -> None:
    # With judge_rate < 1 most faithfulness scores are the deterministic evaluator's, under the same
    # name: a verdict on one of those is no correction of the judge.
    train = [
        labelled("det-missed", "fail", "pass", "fee invented", evaluator="deterministic"),
        labelled("det-false", "pass", "fail", "fine", evaluator="deterministic"),
        labelled("judge-missed", "fail", "pass"),
        # A judge score decided by rule without a call (no documents): no model to correct.
        labelled("judge-rule", "fail", "pass", "no documents", model=None),
    ]
    assert [c.trace_id for c in missed_failures(train)] == ["judge-missed"]
    assert false_failures(train) == []
    assert [c.trace_id for c in pick_examples(train, 4, seed=0)] == ["judge-missed"]
    assert train[0].judge_status is None and train[2].judge_status == "pass"
    # Two verdicts on one trace, the later one on a deterministic copy: the judge's copy is the one
    # compared.
    on_judge = Label(
        "mixed", "faithfulness", "ana", "fail", score_status="pass", score_evaluator="judge",
        judge_model="judge-test", created_at="2026-01-01T00:00:01",
    )  # fmt: skip
    on_deterministic = Label(
        "mixed", "faithfulness", "bob", "fail", score_status="fail", score_evaluator="deterministic",
        created_at="2026-01-01T00:00:02",
    )  # fmt: skip
    mixed = Consensus("mixed", "faithfulness", "fail", (on_judge, on_deterministic))
    assert mixed.judge_status == "pass" and missed_failures([mixed]) == [mixed]


def test_traces_that_are_already_examples_are_left_out_of_the_pool() -> None:
    kept, dropped = without_examples(population(), {"p01", "f03", "gone"})
    assert dropped == 2
    assert {c.trace_id for c in kept} == {c.trace_id for c in population()} - {"p01", "f03"}
    parts = split(kept, 0.5, seed=0)
    assert not {"p01", "f03"} & {c.trace_id for c in parts.held_out + parts.train}
    assert without_examples(population(), frozenset()) == (population(), 0)


# Valid configs whose in-place edit does not read back as YAML (`examples` and `judge` in flow style
# on their own line): the edit must fall back to the rewrite, not end in a traceback.
NOT_EDITABLE_IN_PLACE = [
    (
        "judge:\n  model: m\n  examples:\n    {context_recall: /a.yaml}\n",
        {"judge": {"model": "m", "examples": {"context_recall": "/a.yaml", "faithfulness": "/f.yaml"}}},
    ),
    ("judge:\n  {model: m}\n", {"judge": {"model": "m", "examples": {"faithfulness": "/f.yaml"}}}),
]


@pytest.mark.parametrize(("text", "wanted"), NOT_EDITABLE_IN_PLACE)
def test_an_insertion_that_is_no_yaml_falls_back_to_the_rewrite(
    tmp_path: Path, text: str, wanted: dict[str, object]
) -> None:
    path = tmp_path / "ragpulse.yaml"
    path.write_text(text)
    edited = insert_examples_key(text, "faithfulness", "/f.yaml")
    assert edited is not None
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(edited)
    assert set_examples_key(path, "faithfulness", "/f.yaml").how == "rewritten"
    assert yaml.safe_load(path.read_text()) == wanted


def test_an_alias_of_judge_does_not_get_the_key(tmp_path: Path) -> None:
    text = "judge: &j\n  model: m\nother: *j\n"
    data = yaml.safe_load(text)
    assert with_examples_key(data, "faithfulness", "/f.yaml") == {
        "judge": {"model": "m", "examples": {"faithfulness": "/f.yaml"}},
        "other": {"model": "m"},
    }
    assert data == {"judge": {"model": "m"}, "other": {"model": "m"}}  # not changed
    path = tmp_path / "ragpulse.yaml"
    path.write_text(text)
    assert set_examples_key(path, "faithfulness", "/f.yaml").how == "rewritten"
    assert yaml.safe_load(path.read_text()) == {
        "judge": {"model": "m", "examples": {"faithfulness": "/f.yaml"}},
        "other": {"model": "m"},
    }


def test_files_are_replaced_whole_through_a_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "real.yaml"
    real.write_text(COMMENTED)
    real.chmod(0o640)
    link = tmp_path / "ragpulse.yaml"
    link.symlink_to(real)
    replaced: list[tuple[str, str]] = []
    original_replace = os.replace

    def recording_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        replaced.append((str(src), str(dst)))
        original_replace(src, dst)

    monkeypatch.setattr(config_edit.os, "replace", recording_replace)
    assert set_examples_key(link, "faithfulness", "/f.yaml").how == "inserted"
    [(source, destination)] = replaced
    assert Path(source).parent == tmp_path and destination == str(real)
    assert link.is_symlink() and (real.stat().st_mode & 0o777) == 0o640  # the link and the mode kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ragpulse.yaml", "real.yaml"]

    # A write that fails leaves the old file as it was, and no temporary file.
    before = real.read_text()

    def failing_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(config_edit.os, "replace", failing_replace)
    with pytest.raises(OSError, match="No space"):
        set_examples_key(link, "context_relevance", "/c.yaml")
    assert real.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ragpulse.yaml", "real.yaml"]
    with pytest.raises(OSError, match="No space"):
        write_atomically(tmp_path / "new.yaml", "x: 1\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ragpulse.yaml", "real.yaml"]
