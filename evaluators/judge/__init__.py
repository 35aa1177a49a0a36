"""The LLM judge: its settings (`settings`), a fail-closed OpenAI-compatible client (`client`, with an
in-memory verdict cache and room for a persistent one: `VerdictStore`, which ragpulse keeps in
DuckDB, `collector/store/verdicts.py`), fencing / clipping of untrusted text (`fence`), the verdict
schema sent (`wire_schema`), and what the metrics' judge variants share (`asking`: their messages,
the call, the checks of verdicts). Each metric's own prompt, verdict schema and scoring are in its
module (`evaluators/metrics/`); they build their prompts with `fence_inputs` and call
`JudgeClient.judge`.

Names are imported on first use, so reading the `judge:` settings (every command's config) does not
load the `openai` package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "JudgeCheckError": "client",
    "JudgeClient": "client",
    "JudgeResult": "client",
    "VerdictStore": "client",
    "strict_json_schema": "wire_schema",
    "MAX_DOCUMENT_CHARS": "fence",
    "MAX_TOTAL_CHARS": "fence",
    "ClipReport": "fence",
    "Fence": "fence",
    "FencedInputs": "fence",
    "clip_documents": "fence",
    "fence_inputs": "fence",
    "make_fence": "fence",
    "neutralize": "fence",
    "JudgeSettings": "settings",
}

if TYPE_CHECKING:
    from evaluators.judge.client import (
        JudgeCheckError,
        JudgeClient,
        JudgeResult,
        VerdictStore,
    )
    from evaluators.judge.fence import (
        MAX_DOCUMENT_CHARS,
        MAX_TOTAL_CHARS,
        ClipReport,
        Fence,
        FencedInputs,
        clip_documents,
        fence_inputs,
        make_fence,
        neutralize,
    )
    from evaluators.judge.settings import JudgeSettings
    from evaluators.judge.wire_schema import strict_json_schema


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "MAX_DOCUMENT_CHARS",
    "MAX_TOTAL_CHARS",
    "ClipReport",
    "Fence",
    "FencedInputs",
    "JudgeCheckError",
    "JudgeClient",
    "JudgeResult",
    "JudgeSettings",
    "VerdictStore",
    "clip_documents",
    "fence_inputs",
    "make_fence",
    "neutralize",
    "strict_json_schema",
]
