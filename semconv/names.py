"""Attribute names of the ragpulse convention (OpenTelemetry GenAI plus a few `rag.*` keys)."""

from __future__ import annotations

# OpenTelemetry GenAI (v1.37+; retrieval since v1.40)
OPERATION_NAME = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
DATA_SOURCE_ID = "gen_ai.data_source.id"
RETRIEVAL_QUERY_TEXT = "gen_ai.retrieval.query.text"
RETRIEVAL_DOCUMENTS = "gen_ai.retrieval.documents"
RETRIEVAL_TOP_K = "gen_ai.retrieval.top_k"

# Operation names `semconv.emit` writes (`rerank` is our extension; there is no standard one).
OP_RETRIEVAL = "retrieval"
OP_CHAT = "chat"
OP_RERANK = "rerank"

# ragpulse's own keys
RAG_STEP = "rag.step"
RAG_QUESTION = "rag.question"
RAG_ANSWER = "rag.answer"
RAG_EXPECTED_DOCUMENTS = "rag.expected.documents"
RAG_EXPECTED_ANSWER = "rag.expected.answer"
RAG_CASE_ID = "rag.case.id"
# Set by ragpulse's probes on their own client span (the trace's root): the probe and its run.
RAG_PROBE = "rag.probe"
RAG_PROBE_RUN = "rag.probe.run"
