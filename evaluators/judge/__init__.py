"""The LLM judge: a fail-closed OpenAI-compatible client (`client`) and fencing / clipping of untrusted text
(`fence`). Judge evaluators build their prompts with `fence_inputs` and call `JudgeClient.judge`."""

from evaluators.judge.client import (
    JudgeCheckError,
    JudgeClient,
    JudgeResult,
    JudgeSettings,
    VerdictStore,
    strict_json_schema,
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
