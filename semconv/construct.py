"""Pydantic records built directly from trusted values: what `model_construct` builds, faster.

`model_construct(**values)` skips validation, but still walks every field of the model looking for
aliases and defaults on each call; for `Document`, built a few times per span, that walk cost as
much as reading the document. `builder(Model, fields)` returns a function taking exactly `fields`
(every field of the model, in its order) positionally, which sets the instance's four slots
(`__dict__`, `__pydantic_fields_set__`, `__pydantic_extra__`, `__pydantic_private__`) as
`model_construct` does. It checks itself once against `model_construct`, and is
`model_construct` itself when the two differ (a pydantic that lays models out otherwise).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

new_instance = object.__new__
_set = object.__setattr__


def _slot_setter(name: str) -> Callable[[Any, Any], None]:
    """The setter of one of BaseModel's instance slots: what `object.__setattr__(obj, name, value)`
    ends up calling, without the attribute lookup (each user checks itself against pydantic)."""
    setter = getattr(BaseModel.__dict__.get(name), "__set__", None)
    if setter is None:
        return lambda obj, value: _set(obj, name, value)
    return cast(Callable[[Any, Any], None], setter)


# The four slots `model_construct` sets on a new instance (also used by evaluators/scores.py).
set_dict = _slot_setter("__dict__")
set_fields_set = _slot_setter("__pydantic_fields_set__")
set_extra = _slot_setter("__pydantic_extra__")
set_private = _slot_setter("__pydantic_private__")


def builder(model: type[M], fields: tuple[str, ...], sample: tuple[Any, ...]) -> Callable[..., M]:
    """`f(*values)` building `model.model_construct(**dict(zip(fields, values)))`.

    `fields` must be every field of `model`, in its order; `sample` is one set of values to
    compare both ways with. The model must have no extra fields, no private attributes and no
    `model_post_init`; otherwise (or when the comparison fails) `model_construct` is returned."""

    every_field = set(fields)

    def direct(*values: Any) -> M:
        record = new_instance(model)
        set_dict(record, dict(zip(fields, values, strict=True)))
        set_fields_set(record, every_field.copy())  # a copy: pydantic adds to it on assignment
        set_extra(record, None)
        set_private(record, None)
        return record

    def constructed(*values: Any) -> M:
        return model.model_construct(**dict(zip(fields, values, strict=True)))

    if (
        tuple(model.model_fields) != fields
        or model.__private_attributes__
        or model.__pydantic_post_init__
        or model.model_config.get("extra") == "allow"
    ):
        return constructed
    try:
        same = same_record(direct(*sample), constructed(*sample))
    except Exception:  # a pydantic whose models differ: construct them its way
        same = False
    return direct if same else constructed


def same_record(built: BaseModel, constructed: BaseModel) -> bool:
    """Whether a record built directly is indistinguishable from pydantic's own (the self-checks)."""
    return (
        type(built) is type(constructed)
        and list(built.__dict__) == list(constructed.__dict__)
        and built == constructed
        and built.model_fields_set == constructed.model_fields_set
        and built.__pydantic_extra__ == constructed.__pydantic_extra__
        and built.__pydantic_private__ == constructed.__pydantic_private__
        and repr(built) == repr(constructed)
        and built.model_dump_json() == constructed.model_dump_json()
    )
