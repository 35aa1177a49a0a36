"""A person's verdict on a score ragpulse gave: `POST /api/annotations`, and the row it becomes.

`{trace_id, name, human_status: pass | fail, human_value?, claims?: [{index, ok}], comment?,
author?, queue?}` judges the score `name` of the trace as it is now (its status, value, judge model
and prompt version are copied into the row). One verdict per trace, score and author: a reviewer who
changes their mind replaces their first verdict. `queue` says where the reviewer took the trace
from: `random` (the sample agreement is estimated on), `contested`, or none (a trace opened by
hand). Pure logic.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

import orjson
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from collector.feedback.items import FeedbackError, first_error
from collector.schema.tables import ANNOTATIONS

_Hex32 = Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{32}$", to_lower=True)]
_Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
ANONYMOUS = "anonymous"  # the author of a verdict that names none


class ClaimVerdict(BaseModel):
    """A person's verdict on one claim (or document) of the score, by its position in `items`."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=0)
    ok: bool


class AnnotationItem(BaseModel):
    """One verdict on one score of one trace."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    trace_id: _Hex32
    name: _Name
    human_status: Literal["pass", "fail"]
    human_value: float | None = None
    claims: list[ClaimVerdict] | None = Field(None, max_length=1000)
    comment: Annotated[str, StringConstraints(max_length=10_000)] | None = None
    author: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)] | None = (
        None
    )
    queue: Literal["random", "contested"] | None = None


def parse_annotation(payload: Any) -> AnnotationItem:
    """The verdict of a request body; FeedbackError names the field at fault."""
    if not isinstance(payload, dict):
        raise FeedbackError("the body is one JSON object")
    try:
        return AnnotationItem.model_validate(payload)
    except ValidationError as exc:
        raise FeedbackError(first_error(exc, "")) from None


def annotation_table(item: AnnotationItem, now_us: int) -> pa.Table:
    """The `annotations` row of a verdict, without the copy of its score (the store adds it)."""
    claims = None if item.claims is None else orjson.dumps([c.model_dump() for c in item.claims]).decode()
    columns: dict[str, list[Any]] = {
        "annotation_id": [uuid.uuid4().hex],
        "trace_id": [item.trace_id],
        "name": [item.name],
        "author": [item.author or ANONYMOUS],
        "human_status": [item.human_status],
        "human_value": [item.human_value],
        "claims": [claims],
        "comment": [item.comment],
        "queue": [item.queue],
        "created_at": [now_us],
    }
    return ANNOTATIONS.arrow_table(columns, 1)
