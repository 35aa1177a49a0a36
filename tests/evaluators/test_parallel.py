"""`evaluators.parallel.map_in_order`, and suites scoring their cases at once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from evaluators.parallel import map_in_order
from evaluators.scores import Score
from evaluators.suite import Suite, run_suite


def test_results_keep_the_order_of_the_items() -> None:
    gate = threading.Barrier(4, timeout=10)  # all four at once, or the barrier breaks

    def slow_square(n: int) -> int:
        gate.wait()
        return n * n

    assert map_in_order(slow_square, [3, 1, 4, 2], workers=4) == [9, 1, 16, 4]


def test_one_worker_runs_in_the_calling_thread() -> None:
    caller = threading.get_ident()
    assert map_in_order(lambda _: threading.get_ident(), [1, 2, 3], workers=1) == [caller] * 3


def test_the_first_failure_in_item_order_is_raised() -> None:
    def check(n: int) -> int:
        if n % 2:
            raise ValueError(f"odd {n}")
        return n

    with pytest.raises(ValueError, match="odd 1"):
        map_in_order(check, [0, 1, 2, 3], workers=4)


def test_a_suite_scores_its_cases_at_once_and_reports_them_in_order(tmp_path: Path) -> None:
    names = [f"case-{i}" for i in range(3)]
    suite = Suite.model_validate(
        {
            "name": "s",
            "cases": [
                {"name": n, "question": "q?", "answer": f"answer {n}", "contexts": [{"text": "t"}]}
                for n in names
            ],
        }
    )
    gate = threading.Barrier(3, timeout=10)

    def build(entries: Any) -> list[Any]:
        def evaluate(trace: Any) -> Score:
            gate.wait()  # every case in flight at once, as with a judge that takes its time
            return Score.judged("e", 1.0, 0.5, explanation=trace.answer)

        return [evaluate]

    results = run_suite(suite, build, workers=3)
    assert [r.name for r in results] == names
    assert [r.scores[0].explanation for r in results] == [f"answer {n}" for n in names]
