"""conversation_resolved: did the conversation give the user what they came for? A judge score of a
whole session (not of one trace), given once the session has ended (docs/sessions.md).

The judge reads the conversation's turns (the last `MAX_TURNS`, each text cut at `MAX_TURN_CHARS`,
neutralised and fenced like any untrusted text) and lists the user's needs across them (a follow-up
that refines a request is the same need), each met or not, with a reason: claim by claim, as the
other judge scores. Value: the share of needs met; default `min` 1.0 (every need met). No turn with
both a question and an answer: `skipped`. A judge failure: `error`, never a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from .judge.asking import Asker, with_judge
from .judge.fence import fence_inputs
from .metric import pass_line
from .scores import Score, ScoreItem
from .textutil import blank

if TYPE_CHECKING:
    from .judge.client import JudgeClient

NAME = "conversation_resolved"
DEFAULT_MIN = 1.0
# The latest turns the judge reads of a long conversation (its prompt stays bounded).
MAX_TURNS = 20
CONVERSATION_RESOLVED_VERSION = "conversation_resolved/1"

CONVERSATION_RESOLVED_PROMPT = """\
Rate whether the conversation gave the user what they came for. The input's "conversation" holds \
its turns, oldest first: the user's question and the assistant's answer.
1. needs: what the user asked for across the conversation, one per distinct request (a follow-up that \
refines or repeats a request is the same need).
2. met: the answers gave the user what that need asked for; false when they refused, evaded, answered \
something else, or the user had to ask again without getting it.
3. reason: at most 15 words.\
"""

Conversation = Sequence[tuple[str | None, str | None]]


class Need(BaseModel):
    model_config = ConfigDict(extra="forbid")

    need: str = Field(min_length=1)
    met: bool
    reason: str = ""


class ConversationVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    needs: list[Need]


def _needs_found(verdict: ConversationVerdict) -> str | None:
    return None if verdict.needs else "the judge found no need in the conversation"


def make_conversation_resolved(
    client: JudgeClient, min: float | None = None
) -> Callable[[Conversation], Score]:
    """The judge's `conversation_resolved` of a conversation (its turns in order: question, answer)."""
    threshold = pass_line(NAME, min, DEFAULT_MIN)
    judge = Asker(client, NAME, threshold)

    def evaluate(conversation: Conversation) -> Score:
        turns = [(q, a) for q, a in conversation if not blank(q) or not blank(a)][-MAX_TURNS:]
        if not any(not blank(q) and not blank(a) for q, a in turns):
            return Score.skip(
                NAME,
                "no_turns",
                "no turn of the conversation has a question and an answer",
                threshold=threshold,
            )
        fenced = fence_inputs(conversation=turns)
        messages = [
            {"role": "system", "content": f"{CONVERSATION_RESOLVED_PROMPT}\n\n{fenced.fence.rules()}"},
            {"role": "user", "content": fenced.message("conversation")},
        ]
        asked = judge.ask(
            messages,
            ConversationVerdict,
            CONVERSATION_RESOLVED_VERSION,
            fenced,
            _needs_found,
            earlier_turns=False,
        )
        if isinstance(asked, Score):
            return asked
        verdict, fields = asked
        items = [
            ScoreItem(text=n.need, ok=n.met, evidence=n.reason or ("met" if n.met else "not met"))
            for n in verdict.needs
        ]
        met = sum(n.met for n in verdict.needs)
        shown = f"the last {len(turns)} turns" if len(conversation) > len(turns) else f"{len(turns)} turn(s)"
        text = f"{met} of {len(verdict.needs)} needs of the user met per the judge ({shown} read)"
        score = Score.judged(NAME, met / len(verdict.needs), threshold, explanation=text, items=items)
        return with_judge(score, fields)

    return evaluate
