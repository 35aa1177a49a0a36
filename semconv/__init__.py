"""The small RAG semantic convention: names, models, and the mappers from other conventions to steps.

Two halves. The emitting half, `semconv.names` and `semconv.emit`, needs only `opentelemetry-api`: an
app that instruments by hand imports it without the server (the `ragpulse-emit` distribution in
emit/ ships just those modules). The reading half, the models (pydantic) and the mapping, is
imported on first use of a name below (PEP 562), so `from semconv import emit` loads none of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from semconv.mapping import map_trace
    from semconv.models import (
        RAG_STEP_KINDS,
        STEP_KINDS,
        Document,
        EventRecord,
        RagTrace,
        SpanRecord,
        Step,
        StepKind,
    )

# Each name the package exports, and the module that defines it.
_LAZY = {
    "map_trace": "semconv.mapping",
    "RAG_STEP_KINDS": "semconv.models",
    "STEP_KINDS": "semconv.models",
    "Document": "semconv.models",
    "EventRecord": "semconv.models",
    "RagTrace": "semconv.models",
    "SpanRecord": "semconv.models",
    "Step": "semconv.models",
    "StepKind": "semconv.models",
}

__all__ = [
    "RAG_STEP_KINDS",
    "STEP_KINDS",
    "Document",
    "EventRecord",
    "RagTrace",
    "SpanRecord",
    "Step",
    "StepKind",
    "map_trace",
]


def __getattr__(name: str) -> Any:
    # Raising AttributeError for any other name lets `from semconv import names` import the submodule.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once imported, a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
