"""The LLM judge: a fail-closed OpenAI-compatible client (`client`), fencing / clipping of untrusted text
(`fence`) and a persistent verdict cache in DuckDB (`store`). Judge evaluators build their prompts with
`fence_inputs` and call `JudgeClient.judge`."""

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
from evaluators.judge.store import DuckDBVerdictStore, VerdictStoreError

__all__ = [
    "MAX_DOCUMENT_CHARS",
    "MAX_TOTAL_CHARS",
    "ClipReport",
    "DuckDBVerdictStore",
    "Fence",
    "FencedInputs",
    "JudgeCheckError",
    "JudgeClient",
    "JudgeResult",
    "JudgeSettings",
    "VerdictStore",
    "VerdictStoreError",
    "clip_documents",
    "fence_inputs",
    "make_fence",
    "neutralize",
    "strict_json_schema",
]
