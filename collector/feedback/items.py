"""Feedback items as `POST /api/feedback` takes them, and the `feedback` rows they become.

An item says what someone thought of one answer: `{feedback_id?, trace_id | response_id, span_id?,
name, value?, label?, comment?, author?}`. It names its trace by id, or by the `gen_ai.response.id`
of an LLM call in it (what an app that only sees the model's reply can give). Unknown fields and
bad values are refused with the field's path (`[2].trace_id: ...`), and nothing of the request is
stored then. Pure logic.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Annotated, Any, Self

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError, model_validator

from collector.feedback.verdicts import value_of, verdict
from collector.schema.tables import FEEDBACK

MAX_ITEMS = 10_000  # items in one request
HUMAN = "human"
EXTERNAL = "external"

_Hex32 = Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{32}$", to_lower=True)]
_Hex16 = Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{16}$", to_lower=True)]
_Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
_Short = Annotated[str, StringConstraints(max_length=200)]


class FeedbackError(ValueError):
    """A request the API refuses (400), with what is wrong and where."""


class FeedbackItem(BaseModel):
    """One piece of feedback on one trace."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    feedback_id: _Name | None = None
    trace_id: _Hex32 | None = None
    response_id: _Name | None = None
    span_id: _Hex16 | None = None
    name: _Name
    value: float | None = None
    label: _Short | None = None
    comment: Annotated[str, StringConstraints(max_length=10_000)] | None = None
    author: _Short | None = None

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if self.trace_id is None and self.response_id is None:
            raise ValueError("give trace_id or response_id: the trace the feedback is about")
        if self.value is None and not self.label:
            raise ValueError("give value or label: what the feedback says")
        return self


def parse_feedback(payload: Any) -> list[FeedbackItem]:
    """The items of a request body (one object or a list of them); FeedbackError names the first
    field at fault, as `[index].field` in a list."""
    many = isinstance(payload, list)
    raw = payload if many else [payload]
    if not raw:
        raise FeedbackError("no feedback: the body is an empty list")
    if len(raw) > MAX_ITEMS:
        raise FeedbackError(f"at most {MAX_ITEMS} items in one request; this one has {len(raw)}")
    items = []
    for index, entry in enumerate(raw):
        where = f"[{index}]" if many else ""
        if not isinstance(entry, dict):
            raise FeedbackError(f"{where or 'body'}: each item is a JSON object")
        try:
            items.append(FeedbackItem.model_validate(entry))
        except ValidationError as exc:
            raise FeedbackError(first_error(exc, where)) from None
    return items


def first_error(exc: ValidationError, where: str) -> str:
    """The first validation error as `where.field: message` (`where`: the item's place in a list)."""
    error = exc.errors(include_url=False)[0]
    path = ".".join(str(part) for part in error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown field"
    field = f"{where}.{path}" if path and where else (path or where)
    return f"{field}: {message}" if field else message


def feedback_table(
    items: Sequence[FeedbackItem], now_us: int, evaluator: str = HUMAN, source: str | None = None
) -> pa.Table:
    """The `feedback` rows of these items (a new id for those without), their status read from the
    label or the value (`verdicts.py`). `source`: who sent items that name no author."""
    statuses = [verdict(i.value, i.label) for i in items]
    columns: dict[str, list[Any]] = {
        "feedback_id": [i.feedback_id or uuid.uuid4().hex for i in items],
        "trace_id": [i.trace_id for i in items],
        "response_id": [i.response_id for i in items],
        "span_id": [i.span_id for i in items],
        "name": [i.name for i in items],
        "value": [value_of(i.value, s) for i, s in zip(items, statuses, strict=True)],
        "label": [i.label for i in items],
        "status": statuses,
        "comment": [i.comment for i in items],
        "author": [i.author or source for i in items],
        "evaluator": [evaluator] * len(items),
        "created_at": [now_us] * len(items),
        "received_at": [now_us] * len(items),
    }
    return FEEDBACK.arrow_table(columns, len(items))


def last_of_each_id(table: pa.Table) -> pa.Table:
    """The rows of a `feedback` table, the last one of each `feedback_id` (a request that repeats an
    id keeps its last item, as a later request would replace it)."""
    ids = table["feedback_id"].to_pylist()
    last = {feedback_id: index for index, feedback_id in enumerate(ids)}
    if len(last) == len(ids):
        return table
    return table.take(sorted(last.values()))
