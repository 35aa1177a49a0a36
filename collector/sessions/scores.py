"""Session-level scores (pure): what a conversation that ended is given, from its turns in order.

- `session.turns`: how many turns it had; informational (value null: a score's value is 0..1; the
  count is its label, and `sessions.turns`), always `pass`.
- `session.failed_turns`: the share of its turns with no failing score of ragpulse's evaluators
  (1: none failed); `fail` when any turn failed; an item per failed turn with its failing scores.
- `session.repeated_question`: the share of its turns that do not repeat an earlier question of
  the session (1: none repeated); `fail` when the user asked nearly the same thing again, which
  users do when an answer failed them. Nearly the same: the same words (case, punctuation and
  spacing aside), or at least `REPEAT_OVERLAP` of their content words shared (Jaccard), each with at
  least `MIN_REPEAT_WORDS` content words.

They are stored in `scores` with `level = 'session'`, on the root span of the session's last turn,
in the minute of that turn's start (so they count in aggregates, gates and alerts there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import orjson

from evaluators import textutil
from evaluators.scores import Score

TURNS, FAILED_TURNS, REPEATED_QUESTION = "session.turns", "session.failed_turns", "session.repeated_question"
SESSION_SCORE_NAMES = (TURNS, FAILED_TURNS, REPEATED_QUESTION)
REPEAT_OVERLAP = 0.8
MIN_REPEAT_WORDS = 2
_QUESTION_CHARS = 200  # a question shown in an item


@dataclass(frozen=True)
class Turn:
    """One turn of a session as its session scores read it."""

    trace_id: str
    root_span_id: str | None
    start_time: datetime
    end_time: datetime | None
    question: str | None
    revision: int  # its assembly count
    failing: tuple[str, ...]  # the names of its failing scores of ragpulse's evaluators
    answer: str | None = None


@dataclass(frozen=True)
class Session:
    session_id: str
    service_name: str
    turns: tuple[Turn, ...]  # in order

    @property
    def last_activity(self) -> datetime:
        """As `sessions.last_activity` computes it: the latest end of its turns (else start)."""
        return max(t.end_time or t.start_time for t in self.turns)


def _words(question: str | None) -> frozenset[str]:
    return frozenset(textutil.content_word_list(question or ""))


def _said(question: str | None) -> tuple[str, ...]:
    return tuple(textutil.unicode_words(question or ""))


def repeats(turns: Sequence[Turn]) -> list[tuple[int, int]]:
    """(turn, the earlier turn it repeats), 1-based, for each turn whose question nearly repeats an
    earlier one of the session (the closest earlier match)."""
    found = []
    seen: list[tuple[tuple[str, ...], frozenset[str]]] = []
    for number, turn in enumerate(turns, start=1):
        said, words = _said(turn.question), _words(turn.question)
        for earlier in range(len(seen) - 1, -1, -1):
            other_said, other = seen[earlier]
            enough = len(words) >= MIN_REPEAT_WORDS and len(other) >= MIN_REPEAT_WORDS
            if (said and said == other_said) or (
                enough and len(words & other) / len(words | other) >= REPEAT_OVERLAP
            ):
                found.append((number, earlier + 1))
                break
        seen.append((said, words))
    return found


def _clip(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= _QUESTION_CHARS else text[:_QUESTION_CHARS] + "…"


def session_score_rows(session: Session, now: datetime) -> list[dict[str, object]]:
    """The session's three scores as `scores` rows (the columns `SCORES` has, less the slices)."""
    turns = session.turns
    last = turns[-1]
    count = len(turns)
    failed = [(n, t) for n, t in enumerate(turns, start=1) if t.failing]
    repeated = repeats(turns)
    failed_items = [
        {"text": f"turn {n}: {_clip(t.question)}", "ok": False, "evidence": "failed: " + ", ".join(t.failing)}
        for n, t in failed
    ]
    repeated_items = [
        {
            "text": f"turn {n}: {_clip(turns[n - 1].question)}",
            "ok": False,
            "evidence": f"repeats turn {earlier}",
        }
        for n, earlier in repeated
    ]
    rows = [
        _row(session, TURNS, None, "pass", None, str(count), f"{count} turn(s)", []),
        _row(
            session,
            FAILED_TURNS,
            1 - len(failed) / count,
            "fail" if failed else "pass",
            1.0,
            f"{len(failed)}/{count} failed",
            f"{len(failed)} of {count} turns had a failing score",
            failed_items,
        ),
        _row(
            session,
            REPEATED_QUESTION,
            1 - len(repeated) / count,
            "fail" if repeated else "pass",
            1.0,
            f"{len(repeated)} repeated",
            f"{len(repeated)} of {count} turns nearly repeat an earlier question",
            repeated_items,
        ),
    ]
    for row in rows:
        row.update(
            trace_id=last.trace_id,
            span_id=last.root_span_id or "",
            service_name=session.service_name,
            bucket=last.start_time.replace(second=0, microsecond=0),
            created_at=now,
            evaluator="deterministic",
            revision=last.revision,
            level="session",
        )
    return rows


def judge_row(session: Session, score: Score, now: datetime) -> dict[str, object]:
    """A judge's session-level score (`conversation_resolved`) as a `scores` row, placed as the
    deterministic ones are (`session_score_rows`)."""
    last = session.turns[-1]
    items = [{"text": i.text, "ok": i.ok, "evidence": i.evidence} for i in score.items]
    return {
        "name": score.name,
        "value": score.value,
        "status": score.status,
        "threshold": score.threshold,
        "label": score.label,
        "explanation": f"session {session.session_id}: {score.explanation}",
        "items": orjson.dumps(items).decode(),
        "judge_provider": score.provider,
        "judge_model": score.model,
        "judge_temperature": score.temperature,
        "prompt_version": score.prompt_version,
        "config_hash": score.config_hash,
        "judge_input_tokens": score.judge_input_tokens,
        "judge_output_tokens": score.judge_output_tokens,
        "latency_ms": score.latency_ms,
        "evaluator_version": score.judge_version,
        "trace_id": last.trace_id,
        "span_id": last.root_span_id or "",
        "service_name": session.service_name,
        "bucket": last.start_time.replace(second=0, microsecond=0),
        "created_at": now,
        "evaluator": "judge",
        "revision": last.revision,
        "level": "session",
    }


def _row(
    session: Session,
    name: str,
    value: float | None,
    status: str,
    threshold: float | None,
    label: str,
    explanation: str,
    items: list[dict[str, object]],
) -> dict[str, object]:
    return {
        "name": name,
        "value": value,
        "status": status,
        "threshold": threshold,
        "label": label,
        "explanation": f"session {session.session_id}: {explanation}",
        "items": orjson.dumps(items).decode(),
    }
