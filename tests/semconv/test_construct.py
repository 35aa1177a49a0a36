"""`semconv.construct.builder`: records built directly equal what `model_construct` builds."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from semconv import documents as documents_module
from semconv.construct import builder
from semconv.models import Document

FIELDS = ("rank", "id", "content", "score", "distance", "metadata")


@pytest.mark.parametrize(
    "values",
    [
        (1, "a", "text", 0.5, None, None),
        (3, None, None, None, 0.25, {"source": "kb", "page": 2}),
        (7, "7", "", -1.0, 2.0, {}),
    ],
)
def test_a_built_document_equals_the_constructed_one(values: tuple[Any, ...]) -> None:
    built = documents_module._document(*values)
    constructed = Document.model_construct(**dict(zip(FIELDS, values, strict=True)))
    assert documents_module._document.__name__ == "direct"  # the fast path is in use
    assert type(built) is Document
    assert list(built.__dict__) == list(constructed.__dict__) == list(FIELDS)
    assert built == constructed
    assert built.model_fields_set == constructed.model_fields_set
    assert built.__pydantic_extra__ is None and built.__pydantic_private__ is None
    assert repr(built) == repr(constructed)
    assert built.model_dump_json() == constructed.model_dump_json()
    other = documents_module._document(*values)
    other.id = "changed"  # each record has its own fields and fields set
    assert built.id == constructed.id


def test_a_model_it_cannot_build_is_constructed_as_before() -> None:
    class Extra(BaseModel):
        model_config = ConfigDict(extra="allow")
        a: int = 0

    class Plain(BaseModel):
        a: int = 0
        b: str = ""

    assert builder(Extra, ("a",), (1,)).__name__ == "constructed"
    assert builder(Plain, ("b", "a"), ("x", 1)).__name__ == "constructed"  # not the model's order
    assert builder(Plain, ("a",), (1,)).__name__ == "constructed"  # not every field
    made = builder(Plain, ("a", "b"), (1, "x"))
    assert made.__name__ == "direct"
    assert made(2, "y") == Plain(a=2, b="y")
