"""The pure parts of `ragpulse align`: the stratified seeded split, picking examples among the
disagreements, measuring agreement on the held-out labels; and setting `judge.examples` in a config
file without losing its comments (collector/config_edit.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from collector.config_edit import insert_examples_key, set_examples_key
from collector.feedback.agreement_stats import Confusion, cohen_kappa
from collector.feedback.align import measure, pick_examples, split
from collector.feedback.labelled import Consensus, Label
from evaluators.scores import Score


def labelled(trace_id: str, verdict: str, judge: str, comment: str | None = None) -> Consensus:
    label = Label(trace_id, "faithfulness", "ana", verdict, comment=comment, score_status=judge)  # type: ignore[arg-type]
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
