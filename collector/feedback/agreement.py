"""Agreement of ragpulse's evaluators with people, per evaluator, model and prompt version.

What `GET /api/agreement`, `ragpulse agreement` and the dashboard show: for each score name and each
evaluator (`judge`, `deterministic`), judge model and prompt version that scored it (a deterministic
evaluator has neither, nor a judge score decided without a call), over the people's verdicts
(`annotations`) given in a window:

- `n`, raw `agreement`, Cohen's `kappa` with its 95 % interval (`kappa_low`, `kappa_high`) and the
  `confusion` counts, judge first (`pass_fail`: the evaluator said pass, the person fail);
- `n_values`, `spearman` and `mae` over the verdicts that gave a value on both sides;
- `n_other`: verdicts left out of the estimate (from the contested queue or given on traces opened
  by hand, unless `sample` is `all`; or on scores that were errors or skipped).

The estimate counts only the random queue's verdicts by default: those were drawn uniformly from the
evaluator's scores, so their agreement is the evaluator's; traces people chose to open are not.

`feedback_report` (`GET /api/agreement?feedback=thumbs`, `ragpulse agreement --feedback thumbs`)
asks the other question, whether a score matters to users: for each score, the AUC of its values
against the pass/fail feedback of that name on the same traces, with DeLong's 95 % interval
(`agreement_stats.delong_auc` says which way it points).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from collector.feedback.agreement_stats import Confusion, delong_from_sums, kappa_figures
from collector.schema.windows import Window
from collector.store.reads import Query
from collector.store.reads.feedback import confusion_sql, feedback_auc_sql, values_sql

Sample = Literal["random", "all"]
SAMPLES: tuple[Sample, ...] = ("random", "all")
_KEY = ("name", "score_evaluator", "judge_model", "prompt_version")


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
        values = numbers.get(key, {})
        n_values = int(values.get("n_values") or 0)
        evaluators.append(
            {
                "name": row["name"],
                "evaluator": row["score_evaluator"],
                "model": row["judge_model"],
                "prompt_version": row["prompt_version"],
                **kappa_figures(confusion),
                "n_values": n_values,
                "spearman": _number(values.get("spearman")) if n_values >= 3 else None,
                "mae": _number(values.get("mae")),
                "n_other": int(row["n_other"]),
                "last_verdict_at": row["last_verdict_at"],
            }
        )
    return {
        "window": {"start": window.start.isoformat(), "end": window.end.isoformat()},
        "sample": sample,
        "evaluators": evaluators,
    }


def feedback_report(query: Query, window: Window, service: str | None, feedback_name: str) -> dict[str, Any]:
    """`{"window": ..., "feedback": NAME, "scores": [{"name", "n_positive", "n_negative", "auc",
    "auc_low", "auc_high"}]}`: each score against the feedback `feedback_name` given in the window
    (`feedback_pairs_sql` says what is paired), the highest AUC first, undefined ones last."""
    scores = []
    for row in query(feedback_auc_sql(window, service, feedback_name)):
        auc = delong_from_sums(
            *(int(row[k]) for k in ("n_positive", "n_negative", "sum_a", "sum_a2", "sum_b", "sum_b2"))
        )
        scores.append(
            {
                "name": row["name"],
                "n_positive": auc.n_positive,
                "n_negative": auc.n_negative,
                "auc": auc.auc,
                "auc_low": auc.low,
                "auc_high": auc.high,
            }
        )
    scores.sort(key=lambda s: (s["auc"] is None, -(s["auc"] or 0.0), s["name"]))
    return {
        "window": {"start": window.start.isoformat(), "end": window.end.isoformat()},
        "feedback": feedback_name,
        "scores": scores,
    }


def _number(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return None if math.isnan(number) else number


# Float noise only: a κ of exactly the threshold holds.
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class AgreementGate:
    """`ragpulse check --min-agreement faithfulness=0.6`: the evaluator's κ with people at least 0.6."""

    score: str
    threshold: float

    @classmethod
    def parse(cls, text: str) -> AgreementGate:
        """`NAME=VALUE`, the value a κ between -1 and 1."""
        name, sep, raw = text.rpartition("=")
        if not sep or not name.strip():
            raise ValueError(f"expected NAME=VALUE, got {text!r}")
        try:
            threshold = float(raw)
        except ValueError:
            raise ValueError(f"not a number in {text!r}") from None
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"a kappa is between -1 and 1, got {text!r}")
        return cls(name.strip(), threshold)


def check_agreement(
    report: dict[str, Any], gates: list[AgreementGate], min_samples: int
) -> list[dict[str, Any]]:
    """Each gate against the evaluator as it judges now: of the score's groups (judge model and
    prompt version), the one people gave a verdict on last. `pass` when its κ meets the threshold,
    `fail` when not, `insufficient` with fewer than `min_samples` verdicts in the sample or an
    undefined κ (every verdict the same on both sides)."""
    results = []
    for gate in gates:
        groups = [e for e in report["evaluators"] if e["name"] == gate.score]
        current = max(groups, key=lambda e: e["last_verdict_at"] or "", default=None)
        found: dict[str, Any] = {"gate": f"{gate.score} kappa >= {gate.threshold:g}", "score": gate.score}
        if current is None or current["n"] < min_samples or current["kappa"] is None:
            n = 0 if current is None else current["n"]
            status, reason = "insufficient", f"{n} verdict(s) in the sample, {min_samples} needed"
            if current is not None and current["kappa"] is None and n >= min_samples:
                reason = "kappa is undefined: every verdict the same on both sides"
        else:
            status = "pass" if current["kappa"] >= gate.threshold - _TOLERANCE else "fail"
            reason = None
        if current is not None:
            found |= {
                k: current[k] for k in ("model", "prompt_version", "n", "kappa", "kappa_low", "kappa_high")
            }
        results.append(found | {"status": status, "reason": reason})
    return results
