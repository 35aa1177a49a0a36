"""Shared pieces of the judge tests: client settings against the OpenAI-protocol stub, a small
verdict schema and the messages that ask for it."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from evaluators.judge import JudgeClient, JudgeSettings
from tests.support.openai_stub import OpenAIStub, RecordedRequest, fenced_input

GOOD = json.dumps({"verdict": "yes", "reason": "the refund policy states 30 days"})


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    verdict: Literal["yes", "no"]
    reason: str


def settings(stub: OpenAIStub, **overrides: Any) -> JudgeSettings:
    """Fast-failing settings for the stub: short timeout and backoff, a few retries."""
    values: dict[str, Any] = {
        "base_url": stub.base_url,
        "model": "judge-model",
        "api_key": "test",
        "timeout": 1.0,
        "max_retries": 2,
        "backoff_initial": 0.01,
        "backoff_max": 0.2,
        **overrides,
    }
    return JudgeSettings.model_validate(values)


def evaluator_client(stub: OpenAIStub) -> JudgeClient:
    """The client the judge-evaluator tests use: one retry, so a fault costs two scripted replies."""
    return JudgeClient(settings(stub, max_retries=1, backoff_max=0.05))


def messages(question: str = "How long do refunds take?") -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You judge answers. Reply in JSON."},
        {"role": "user", "content": question},
    ]


def fence_token(system: str) -> str:
    """This call's fence token, as the system prompt's fence rules name it."""
    found = re.search(r"<data-(\d{20})>", system)
    assert found, system
    return found[1]


def judge_inputs(request: RecordedRequest) -> dict[str, Any]:
    """The inputs a judge call carried: the fenced JSON object of its user message, checked to be
    fenced with this call's token as its system prompt names it."""
    system, user = (m["content"] for m in request.json["messages"][:2])
    token, inputs = fenced_input(user)
    assert token == fence_token(system)
    return inputs


def seen_texts(request: RecordedRequest) -> dict[str, list[str]]:
    """kind -> texts the judge received: "question", "answer", "reference" (one each, when sent)
    and "document" (every document's text, in rank order)."""
    found: dict[str, list[str]] = {}
    for key, value in judge_inputs(request).items():
        if key == "documents":
            found["document"] = [doc["text"] for doc in value]
        else:
            found[key] = [value]
    return found
