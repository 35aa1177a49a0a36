"""Agreement of ragpulse's evaluators with people, per evaluator, model and prompt version.

What `GET /api/agreement`, `ragpulse agreement` and the dashboard show: for each score name and each
judge model and prompt version that scored it (a deterministic evaluator has neither), over the
people's verdicts (`annotations`) given in a window:

- `n`, raw `agreement`, Cohen's `kappa` with its 95 % interval (`kappa_low`, `kappa_high`) and the
  `confusion` counts, judge first (`pass_fail`: the evaluator said pass, the person fail);
- `n_values`, `spearman` and `mae` over the verdicts that gave a value on both sides;
- `n_other`: verdicts left out of the estimate (from the contested queue or given on traces opened
  by hand, unless `sample` is `all`; or on scores that were errors or skipped).

The estimate counts only the random queue's verdicts by default: those were drawn uniformly from the
evaluator's scores, so their agreement is the evaluator's; traces people chose to open are not.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from collector.feedback.agreement_stats import Confusion, cohen_kappa
from collector.schema.windows import Window
from collector.store.reads import Query
from collector.store.reads.feedback import confusion_sql, values_sql

Sample = Literal["random", "all"]
SAMPLES: tuple[Sample, ...] = ("random", "all")
_KEY = ("name", "judge_model", "prompt_version")


def agreement_report(
    query: Query, window: Window, service: str | None = None, sample: Sample = "random"
) -> dict[str, Any]:
    """`{"window": ..., "sample": ..., "evaluators": [...]}` (module docstring), evaluators by name."""
    numbers = {tuple(row[k] for k in _KEY): row for row in query(values_sql(window, service, sample))}
    evaluators = []
    for row in query(confusion_sql(window, service, sample)):
        key = tuple(row[k] for k in _KEY)
        confusion = Confusion(
            int(row["pass_pass"]), int(row["pass_fail"]), int(row["fail_pass"]), int(row["fail_fail"])
        )
        kappa = cohen_kappa(confusion)
        values = numbers.get(key, {})
        n_values = int(values.get("n_values") or 0)
        evaluators.append(
            {
                "name": row["name"],
                "model": row["judge_model"],
                "prompt_version": row["prompt_version"],
                "n": kappa.n,
                "agreement": kappa.agreement,
                "kappa": kappa.kappa,
                "kappa_low": kappa.low,
                "kappa_high": kappa.high,
                "confusion": {
                    "pass_pass": confusion.pass_pass,
                    "pass_fail": confusion.pass_fail,
                    "fail_pass": confusion.fail_pass,
                    "fail_fail": confusion.fail_fail,
                },
                "n_values": n_values,
                "spearman": _number(values.get("spearman")) if n_values >= 3 else None,
                "mae": _number(values.get("mae")),
                "n_other": int(row["n_other"]),
            }
        )
    return {
        "window": {"start": window.start.isoformat(), "end": window.end.isoformat()},
        "sample": sample,
        "evaluators": evaluators,
    }


def _number(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return None if math.isnan(number) else number
