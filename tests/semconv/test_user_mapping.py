"""The user a trace served (docs/conventions.md, "Session and user"): each key semconv reads, the
first found winning, and no user when none is set."""

from __future__ import annotations

from typing import Any

import pytest

from semconv.mapping import USER_KEYS
from tests.support.traces import TraceBuilder


def _trace(attributes: dict[str, Any]) -> TraceBuilder:
    t = TraceBuilder()
    root = t.span("rag.request", {"input.value": "what is the refund window?", **attributes})
    t.span("chat", {"gen_ai.operation.name": "chat"}, parent=root)
    return t


@pytest.mark.parametrize(
    "key",
    ["user.id", "enduser.id", "langfuse.user.id", "traceloop.association.properties.user_id"],
)
def test_each_user_key_is_read(key: str) -> None:
    assert _trace({key: "user-7"}).map().user_id == "user-7"


def test_the_first_key_found_wins() -> None:
    every = {key: f"from {key}" for key in USER_KEYS}
    assert _trace(every).map().user_id == "from user.id"
    assert _trace({"langfuse.user.id": "lf", "enduser.id": "old"}).map().user_id == "old"


def test_no_user_key_no_user() -> None:
    trace = _trace({"session.id": "s-1"}).map()
    assert (trace.session_id, trace.user_id) == ("s-1", None)
