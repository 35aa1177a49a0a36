"""The mapper fed with spans as real instrumentation libraries emit them.

Each test drives a real library in-process (LangChain with OpenInference, OpenLLMetry, LangSmith or
Langfuse tracing; the `openai` client with OpenInference, OpenLLMetry or the official OTel
instrumentation) against a local OpenAI-protocol server (`tests/support/openai_stub.py`). The spans go
through the same path as spans received over OTLP: `encode_spans` -> `decode_request` ->
`span_records` -> `map_trace`.

The LangChain pipeline is the same in every test: a four-document in-memory vector store searched
with a small keyword embedding (so the rank order is known: `returns-window` first, `refunds`
second, though they were added fourth and second), a system + user prompt, `ChatOpenAI` and a string
parser. What each library emits was checked against the installed versions (see pyproject.toml);
where a library drops something (OpenLLMetry drops `Document.id`) the test says so.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from langchain_core.documents import Document as LcDocument
from langchain_core.embeddings import Embeddings
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import SecretStr

from semconv import RagTrace, SpanRecord, Step
from tests.support.agentic import only_trace
from tests.support.helpers import doc_tuples, one_step, rag_step_kinds
from tests.support.openai_stub import OpenAIStub

# Fail a test whose library left an OTel context attached (tests/frameworks/conftest.py).
pytestmark = pytest.mark.usefixtures("no_leaked_context")

QUESTION = "What is the refund window?"
ANSWER = "You can get a refund within 30 days."
SYSTEM = "Answer only from the context."
# The real API answers with a dated snapshot of the requested model; the stub does the same.
MODEL = "gpt-4o-mini"
MODEL_SNAPSHOT = "gpt-4o-mini-2024-07-18"
PROMPT_TOKENS, COMPLETION_TOKENS = 812, 64

CORPUS = [
    LcDocument(id="shipping", page_content="Shipping takes 5 business days.", metadata={"source": "ship.md"}),
    LcDocument(
        id="refunds", page_content="Refunds are accepted for 30 days.", metadata={"source": "policy.md"}
    ),
    LcDocument(
        id="warranty", page_content="The warranty covers two years.", metadata={"source": "warranty.md"}
    ),
    LcDocument(
        id="returns-window",
        page_content="The return window closes 30 days after delivery; the refund goes to the card.",
        metadata={"source": "returns.md", "page": 2},
    ),
]
# What a top-2 search for QUESTION returns, best first (see KeywordEmbeddings).
TOP2 = [CORPUS[3], CORPUS[1]]


class KeywordEmbeddings(Embeddings):
    """A bag-of-words embedding over a fixed vocabulary: similarity is word overlap, so the ranking of
    CORPUS for QUESTION is known (returns-window shares 'refund' and 'window', refunds only 'refund')."""

    VOCABULARY = ("refund", "window", "shipping", "warranty", "day", "card")

    def _vector(self, text: str) -> list[float]:
        words = re.findall(r"[a-z]+", text.lower())
        counts = [float(sum(word.startswith(v) for word in words)) for v in self.VOCABULARY]
        # A constant component keeps every vector non-zero (cosine similarity needs a norm).
        return [*counts, 0.1]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


# -- plumbing -------------------------------------------------------------------------------------------


def root_of(records: list[SpanRecord]) -> SpanRecord:
    roots = [r for r in records if r.parent_span_id is None]
    assert len(roots) == 1
    return roots[0]


def span_named(records: list[SpanRecord], name: str) -> SpanRecord:
    matches = [r for r in records if r.name == name]
    assert len(matches) == 1, f"{len(matches)} spans named {name!r}"
    return matches[0]


def vector_store() -> InMemoryVectorStore:
    store = InMemoryVectorStore(KeywordEmbeddings())
    store.add_documents(CORPUS)
    return store


def rag_chain(base_url: str, retriever: Runnable[Any, Any] | None = None) -> Runnable[Any, str]:
    """The LCEL pipeline every LangChain test runs: retrieve top 2, stuff, ask ChatOpenAI, parse."""
    retriever = retriever or vector_store().as_retriever(search_kwargs={"k": 2})
    prompt = ChatPromptTemplate.from_messages(
        [("system", SYSTEM), ("user", "Context: {context}\nQuestion: {question}")]
    )
    # max_retries=0: a scripted error must reach the caller once, not be retried into the next reply.
    llm = ChatOpenAI(model=MODEL, base_url=base_url, api_key="test", temperature=0, max_retries=0)

    def stuff(documents: list[LcDocument]) -> str:
        return "\n".join(d.page_content for d in documents)

    return (
        {"context": retriever | stuff, "question": RunnablePassthrough()} | prompt | llm | StrOutputParser()
    )


def script_answer(stub: OpenAIStub) -> None:
    stub.reply(ANSWER, prompt_tokens=PROMPT_TOKENS, completion_tokens=COMPLETION_TOKENS, model=MODEL_SNAPSHOT)


def assert_langchain_llm_step(llm: Step) -> None:
    """The ChatOpenAI call, whichever library described it."""
    assert llm.output == ANSWER
    assert llm.input is not None and f"Question: {QUESTION}" in llm.input
    assert (llm.input_tokens, llm.output_tokens, llm.total_tokens) == (812, 64, 876)


def assert_no_framework_provider(trace: RagTrace) -> None:
    """`langchain` / `langgraph` on framework spans are not model providers."""
    assert {s.provider for s in trace.steps if s.provider is not None} <= {"openai"}


# -- OpenInference ---------------------------------------------------------------------------------------


@pytest.fixture
def oi_langchain(capture: tuple[TracerProvider, InMemorySpanExporter]) -> Iterator[InMemorySpanExporter]:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    provider, exporter = capture
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        instrumentor.uninstrument()


def test_openinference_langchain_rag(oi_langchain: InMemorySpanExporter, stub: OpenAIStub) -> None:
    script_answer(stub)
    chain = rag_chain(stub.base_url)
    assert chain.invoke(QUESTION) == ANSWER

    trace, records = only_trace(oi_langchain)
    root = root_of(records)
    assert trace.convention == "openinference"
    assert trace.root_span_id == root.span_id
    assert trace.span_count == len(records) == 9
    assert trace.status == "ok"
    # Root CHAIN input.value / output.value.
    assert (trace.question, trace.answer) == (QUESTION, ANSWER)
    assert rag_step_kinds(trace) == ["retrieval", "llm"]

    retrieval = one_step(trace, "retrieval")
    assert retrieval.name == "VectorStoreRetriever"
    assert retrieval.convention == "openinference"
    assert retrieval.query == QUESTION
    # openinference-instrumentation-langchain puts only content and metadata in retrieval.documents.*;
    # LangChain's Document.id is in output.value's documents[].id, and is the id source when set.
    # No scores: a LangChain retriever does not return them.
    assert doc_tuples(retrieval) == [
        (1, "returns-window", TOP2[0].page_content, None),
        (2, "refunds", TOP2[1].page_content, None),
    ]
    assert [d.metadata for d in retrieval.documents] == [
        {"source": "returns.md", "page": 2},
        {"source": "policy.md"},
    ]
    assert trace.retrieved_ids == ["returns-window", "refunds"]

    llm = one_step(trace, "llm")
    assert llm.name == "ChatOpenAI"
    assert llm.convention == "openinference"
    assert (llm.model, llm.provider) == (MODEL_SNAPSHOT, "openai")
    assert_langchain_llm_step(llm)
    # The PROMPT span (ChatPromptTemplate) is a chain step, not an llm one.
    assert span_named(records, "ChatPromptTemplate").span_id in {s.span_id for s in trace.steps_of("chain")}
    assert stub.chat_requests[0].json["model"] == MODEL


def test_openinference_langchain_llm_error_marks_trace_error(
    oi_langchain: InMemorySpanExporter, stub: OpenAIStub
) -> None:
    stub.reply(status=500, error_message="upstream overloaded")
    chain = rag_chain(stub.base_url)
    with pytest.raises(openai.InternalServerError):
        chain.invoke(QUESTION)

    trace, records = only_trace(oi_langchain)
    assert span_named(records, "ChatOpenAI").status_code == "ERROR"
    assert trace.status == "error"
    assert trace.question == QUESTION
    assert trace.answer is None
    llm = one_step(trace, "llm")
    assert llm.output is None
    assert (llm.input_tokens, llm.output_tokens) == (None, None)
    # The retrieval before the failure is still there, intact.
    assert [d.id for d in one_step(trace, "retrieval").documents] == ["returns-window", "refunds"]


@pytest.fixture
def oi_openai(capture: tuple[TracerProvider, InMemorySpanExporter]) -> Iterator[tuple[TracerProvider, Any]]:
    from openinference.instrumentation import TraceConfig
    from openinference.instrumentation.openai import OpenAIInstrumentor

    provider, _ = capture
    instrumentor = OpenAIInstrumentor()

    def instrument(config: TraceConfig | None = None) -> None:
        instrumentor.instrument(tracer_provider=provider, config=config or TraceConfig())

    try:
        yield provider, instrument
    finally:
        instrumentor.uninstrument()


def test_openinference_openai_embedding_and_streamed_chat_under_oitracer_chain(
    oi_openai: tuple[TracerProvider, Callable[..., None]],
    capture: tuple[TracerProvider, InMemorySpanExporter],
    stub: OpenAIStub,
) -> None:
    from openinference.instrumentation import OITracer, TraceConfig

    provider, instrument = oi_openai
    instrument()
    tracer = OITracer(provider.get_tracer("rag-app"), config=TraceConfig())
    stub.reply("30 days.", prompt_tokens=20, completion_tokens=3)
    client = openai.OpenAI(base_url=stub.base_url, api_key="test")
    with tracer.start_as_current_span("answer", openinference_span_kind="chain") as span:
        span.set_input(QUESTION)
        client.embeddings.create(model="text-embedding-3-small", input=[QUESTION])
        stream = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
            stream=True,
            stream_options={"include_usage": True},
        )
        answer = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        span.set_output(answer)
    assert answer == "30 days."

    trace, records = only_trace(capture[1])
    assert trace.convention == "openinference"
    assert (trace.question, trace.answer) == (QUESTION, "30 days.")
    assert rag_step_kinds(trace) == ["embedding", "llm"]

    embedding = one_step(trace, "embedding")
    assert embedding.name == "CreateEmbeddings"
    assert embedding.model == "text-embedding-3-small"
    # The stub counts one token per word: five for QUESTION.
    assert embedding.input_tokens == 5

    llm = one_step(trace, "llm")
    assert llm.name == "ChatCompletion"
    # Streamed: the instrumentor joins the deltas into llm.output_messages and reads the usage chunk.
    assert llm.output == "30 days."
    assert (llm.input_tokens, llm.output_tokens, llm.total_tokens) == (20, 3, 23)
    # No llm.provider on a custom base_url; llm.system is the fallback (docs/conventions.md, "Model and
    # provider").
    assert (llm.model, llm.provider) == (MODEL, "openai")
    assert llm.input is not None and QUESTION in llm.input
    assert len(records) == 3


def test_openinference_redacted_output_is_absent(
    oi_openai: tuple[TracerProvider, Callable[..., None]],
    capture: tuple[TracerProvider, InMemorySpanExporter],
    stub: OpenAIStub,
) -> None:
    from openinference.instrumentation import OITracer, TraceConfig

    provider, instrument = oi_openai
    # Hidden outputs: output.value becomes the literal "__REDACTED__", output messages are dropped.
    config = TraceConfig(hide_outputs=True, hide_output_messages=True)
    instrument(config)
    tracer = OITracer(provider.get_tracer("rag-app"), config=config)
    stub.reply("a confidential answer", prompt_tokens=12, completion_tokens=3, model=MODEL_SNAPSHOT)
    client = openai.OpenAI(base_url=stub.base_url, api_key="test")
    with tracer.start_as_current_span("answer", openinference_span_kind="chain") as span:
        span.set_input(QUESTION)
        reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}])
        span.set_output(reply.choices[0].message.content)

    trace, records = only_trace(capture[1])
    assert root_of(records).attributes["output.value"] == "__REDACTED__"
    assert trace.question == QUESTION
    assert trace.answer is None
    llm = one_step(trace, "llm")
    assert llm.output is None
    assert (llm.model, llm.input_tokens, llm.output_tokens) == (MODEL_SNAPSHOT, 12, 3)


# -- OpenTelemetry GenAI (official instrumentation and util) ----------------------------------------------


@pytest.fixture
def otel_openai(
    capture: tuple[TracerProvider, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch
) -> Iterator[TracerProvider]:
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    # Content is opt-in; SPAN_ONLY puts gen_ai.input/output.messages on the span.
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    provider, _ = capture
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield provider
    finally:
        instrumentor.uninstrument()


def test_genai_official_openai_with_util_genai_workflow_and_retrieval(
    otel_openai: TracerProvider, capture: tuple[TracerProvider, InMemorySpanExporter], stub: OpenAIStub
) -> None:
    from opentelemetry.util.genai.handler import TelemetryHandler

    handler = TelemetryHandler(tracer_provider=otel_openai)
    script_answer(stub)
    client = openai.OpenAI(base_url=stub.base_url, api_key="test")
    with handler.workflow("refund-bot"):
        client.embeddings.create(model="text-embedding-3-small", input=QUESTION)
        retrieval_call = handler.retrieval(data_source_id="kb-policies")
        with retrieval_call:
            retrieval_call.query_text = QUESTION
            retrieval_call.documents = [
                {"id": "returns-window", "score": 0.82, "content": TOP2[0].page_content},
                {"id": "refunds", "score": 0.5, "content": TOP2[1].page_content},
            ]
        client.chat.completions.create(
            model=MODEL,
            messages=[
                {"role": "system", "content": f"{SYSTEM}\nContext: {TOP2[0].page_content}"},
                {"role": "user", "content": QUESTION},
            ],
        )

    trace, records = only_trace(capture[1])
    assert span_named(records, "retrieval kb-policies").kind == "CLIENT"
    assert trace.convention == "genai"
    # No root input.value: the first user message of the first llm step, the answer of the last one.
    assert (trace.question, trace.answer) == (QUESTION, ANSWER)
    assert rag_step_kinds(trace) == ["embedding", "retrieval", "llm"]

    embedding = one_step(trace, "embedding")
    assert (embedding.model, embedding.provider, embedding.input_tokens) == (
        "text-embedding-3-small",
        "openai",
        5,
    )

    retrieval = one_step(trace, "retrieval")
    assert retrieval.convention == "genai"
    assert retrieval.query == QUESTION
    assert doc_tuples(retrieval) == [
        (1, "returns-window", TOP2[0].page_content, 0.82),
        (2, "refunds", TOP2[1].page_content, 0.5),
    ]

    llm = one_step(trace, "llm")
    assert llm.name == f"chat {MODEL}"
    assert llm.convention == "genai"
    # gen_ai.response.model beats gen_ai.request.model.
    assert (llm.model, llm.provider) == (MODEL_SNAPSHOT, "openai")
    assert llm.output == ANSWER
    # No total on the span: input + output.
    assert (llm.input_tokens, llm.output_tokens, llm.total_tokens) == (812, 64, 876)
    # The workflow span is a chain (invoke_workflow), and the trace root.
    assert trace.root_span_id == span_named(records, "invoke_workflow refund-bot").span_id


def test_genai_single_chat_span_is_root_and_llm(
    otel_openai: TracerProvider, capture: tuple[TracerProvider, InMemorySpanExporter], stub: OpenAIStub
) -> None:
    script_answer(stub)
    client = openai.OpenAI(base_url=stub.base_url, api_key="test")
    client.chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    )

    trace, records = only_trace(capture[1])
    assert len(records) == 1
    # A one-call app: the root keeps its llm type and is also the root for question/answer.
    assert trace.root_span_id == records[0].span_id
    assert [s.kind for s in trace.steps] == ["llm"]
    assert trace.convention == "genai"
    assert (trace.question, trace.answer) == (QUESTION, ANSWER)
    llm = trace.steps[0]
    assert (llm.model, llm.provider, llm.input_tokens, llm.output_tokens) == (
        MODEL_SNAPSHOT,
        "openai",
        812,
        64,
    )
    assert llm.input is not None and SYSTEM in llm.input and QUESTION in llm.input


# -- OpenLLMetry (Traceloop) -----------------------------------------------------------------------------


@pytest.fixture
def openllmetry_langchain(
    capture: tuple[TracerProvider, InMemorySpanExporter],
) -> Iterator[InMemorySpanExporter]:
    from langchain_core.callbacks import BaseCallbackManager
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.instrumentation.utils import unwrap

    provider, exporter = capture
    # Both on, as traceloop-sdk does: the LangChain LLM span suppresses the nested openai.chat span.
    # Without disable_trace_context_propagation, 0.62 wraps BaseChatOpenAI._generate with a wrapper that
    # attaches a context and never detaches it, and uninstrument() leaves that wrapper in place: the
    # current span of a later test (Langfuse's) would stay current for every test after it.
    langchain_instrumentor = LangchainInstrumentor(disable_trace_context_propagation=True)
    openai_instrumentor = OpenAIInstrumentor()
    langchain_instrumentor.instrument(tracer_provider=provider)
    openai_instrumentor.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        openai_instrumentor.uninstrument()
        langchain_instrumentor.uninstrument()
        # 0.62's uninstrument() calls unwrap("langchain_core.callbacks", "BaseCallbackManager.__init__"),
        # which resolves to nothing, so its callback handler would join every later CallbackManager
        # (and trace the next tests' chains on this closed provider). Unwrap it for real.
        unwrap(BaseCallbackManager, "__init__")


def test_openllmetry_langchain_rag(openllmetry_langchain: InMemorySpanExporter, stub: OpenAIStub) -> None:
    script_answer(stub)
    assert rag_chain(stub.base_url).invoke(QUESTION) == ANSWER

    trace, records = only_trace(openllmetry_langchain)
    assert root_of(records).name == "RunnableSequence.workflow"
    assert not [r for r in records if r.name == "openai.chat"], "the nested openai span should be suppressed"
    assert trace.convention == "openllmetry"
    assert trace.answer == ANSWER
    assert rag_step_kinds(trace) == ["retrieval", "llm"]

    retrieval = one_step(trace, "retrieval")
    assert retrieval.name == "vector_db_retrieve VectorStoreRetriever"
    assert retrieval.query == QUESTION
    # traceloop.entity.output keeps page_content and metadata only: Document.id is lost. The id falls
    # back to metadata `source` (docs/conventions.md, "Document ids"), the nearest thing to an id the
    # span still has.
    assert doc_tuples(retrieval) == [
        (1, "returns.md", TOP2[0].page_content, None),
        (2, "policy.md", TOP2[1].page_content, None),
    ]
    assert [d.metadata for d in retrieval.documents] == [
        {"source": "returns.md", "page": 2},
        {"source": "policy.md"},
    ]

    llm = one_step(trace, "llm")
    assert llm.name == "ChatOpenAI.chat"
    assert (llm.model, llm.provider) == (MODEL_SNAPSHOT, "openai")
    assert_langchain_llm_step(llm)
    # Every framework span says gen_ai.provider.name="langchain"; none of them gets a provider.
    assert all(
        r.attributes.get("gen_ai.provider.name") == "langchain"
        for r in records
        if r.name != "ChatOpenAI.chat"
    )
    assert_no_framework_provider(trace)
    # Last, so that the rest is checked even while this fails: the root's traceloop.entity.input is
    # {"inputs": "<question>", "tags": [], "metadata": {}, "kwargs": {"name": "RunnableSequence"}}
    # (LangChain callback shape); the question is `inputs`, not `kwargs.name`.
    assert trace.question == QUESTION


@pytest.fixture
def openinference_and_openllmetry_langchain(
    capture: tuple[TracerProvider, InMemorySpanExporter], openllmetry_langchain: InMemorySpanExporter
) -> Iterator[InMemorySpanExporter]:
    """Both libraries' LangChain instrumentations at once, as in an app moving from one to the other."""
    from openinference.instrumentation.langchain import LangChainInstrumentor

    provider, _ = capture
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield openllmetry_langchain
    finally:
        instrumentor.uninstrument()


def test_two_libraries_on_one_chain_are_one_retrieval_and_one_llm_step(
    openinference_and_openllmetry_langchain: InMemorySpanExporter, stub: OpenAIStub
) -> None:
    """Each library's handler reports every run, in its own subtree: parallel duplicate trees
    (docs/conventions.md, "Parallel duplicate trees"). Each call is one step, read from the richer
    span; tokens are counted once."""
    script_answer(stub)
    assert rag_chain(stub.base_url).invoke(QUESTION) == ANSWER

    trace, records = only_trace(openinference_and_openllmetry_langchain)
    scopes = {r.scope_name for r in records}
    assert scopes == {"openinference.instrumentation.langchain", "opentelemetry.instrumentation.langchain"}
    assert len([r for r in records if "Retriever" in r.name]) == 2  # the duplicate is really there
    assert rag_step_kinds(trace) == ["retrieval", "llm"]

    retrieval = one_step(trace, "retrieval")
    by_name = {r.name: r.span_id for r in records}
    assert set(retrieval.span_ids) == {
        by_name["VectorStoreRetriever"],
        by_name["vector_db_retrieve VectorStoreRetriever"],
    }
    # OpenInference's span keeps LangChain's Document.id; OpenLLMetry's loses it (see above).
    assert retrieval.convention == "openinference" and retrieval.span_id == by_name["VectorStoreRetriever"]
    assert trace.retrieved_ids == ["returns-window", "refunds"]

    llm = one_step(trace, "llm")
    assert set(llm.span_ids) == {by_name["ChatOpenAI"], by_name["ChatOpenAI.chat"]}
    assert_langchain_llm_step(llm)
    assert (trace.input_tokens, trace.output_tokens) == (PROMPT_TOKENS, COMPLETION_TOKENS)  # not twice
    assert (trace.question, trace.answer) == (QUESTION, ANSWER)


@pytest.fixture
def openllmetry_openai(capture: tuple[TracerProvider, InMemorySpanExporter]) -> Iterator[TracerProvider]:
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    provider, _ = capture
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield provider
    finally:
        instrumentor.uninstrument()


def test_openllmetry_openai_chat_and_embeddings(
    openllmetry_openai: TracerProvider, capture: tuple[TracerProvider, InMemorySpanExporter], stub: OpenAIStub
) -> None:
    script_answer(stub)
    client = openai.OpenAI(base_url=stub.base_url, api_key="test")
    # The app's own plain span groups the two calls into one trace.
    with openllmetry_openai.get_tracer("rag-app").start_as_current_span("handle_request"):
        client.embeddings.create(model="text-embedding-3-small", input=QUESTION)
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
        )

    trace, records = only_trace(capture[1])
    assert {r.name for r in records} == {"handle_request", "openai.embeddings", "openai.chat"}
    assert (trace.question, trace.answer) == (QUESTION, ANSWER)
    assert rag_step_kinds(trace) == ["embedding", "llm"]
    embedding = one_step(trace, "embedding")
    assert (embedding.model, embedding.input_tokens) == ("text-embedding-3-small", 5)
    llm = one_step(trace, "llm")
    assert (llm.model, llm.provider) == (MODEL_SNAPSHOT, "openai")
    assert llm.output == ANSWER
    # gen_ai.usage.total_tokens is set by OpenLLMetry ≥0.55.
    assert (llm.input_tokens, llm.output_tokens, llm.total_tokens) == (812, 64, 876)


# -- LangSmith OTel exporter -----------------------------------------------------------------------------


def test_langsmith_otel_langchain_rag(
    capture: tuple[TracerProvider, InMemorySpanExporter], stub: OpenAIStub
) -> None:
    import langsmith
    from langchain_core.tracers.langchain import LangChainTracer

    provider, exporter = capture
    # tracing_mode="otel": runs become OTel spans on our provider; nothing is sent to the (dead) api_url.
    client = langsmith.Client(
        api_key="test", api_url="http://127.0.0.1:9", tracing_mode="otel", otel_tracer_provider=provider
    )
    tracer = LangChainTracer(client=client, project_name="ragpulse-tests")
    script_answer(stub)
    assert rag_chain(stub.base_url).invoke(QUESTION, config={"callbacks": [tracer]}) == ANSWER
    tracer.wait_for_futures()
    client.flush()

    trace, records = only_trace(exporter)
    retriever_span = span_named(records, "VectorStoreRetriever")
    # The exporter's lookup turns run_type=retriever into gen_ai.operation.name=embeddings.
    assert retriever_span.attributes["gen_ai.operation.name"] == "embeddings"
    assert trace.convention == "langsmith"
    assert trace.answer == ANSWER
    # The root run's inputs are gen_ai.prompt='{"input": "<question>"}'.
    assert trace.question == QUESTION
    # langsmith.span.kind beats gen_ai.operation.name: a retrieval step, and no embedding step.
    assert rag_step_kinds(trace) == ["retrieval", "llm"]

    retrieval = one_step(trace, "retrieval")
    assert retrieval.convention == "langsmith"
    # gen_ai.prompt = {"query": ...}; gen_ai.completion = {"documents": [{"id", "page_content", "metadata"}]}.
    assert retrieval.query == QUESTION
    assert doc_tuples(retrieval) == [
        (1, "returns-window", TOP2[0].page_content, None),
        (2, "refunds", TOP2[1].page_content, None),
    ]
    assert [d.metadata for d in retrieval.documents] == [
        {"source": "returns.md", "page": 2},
        {"source": "policy.md"},
    ]

    llm = one_step(trace, "llm")
    assert llm.name == "ChatOpenAI"
    # LangSmith sends only the requested model, and gen_ai.system guessed from it.
    assert (llm.model, llm.provider) == (MODEL, "openai")
    assert_langchain_llm_step(llm)
    # Chain runs carry gen_ai.system="langchain".
    assert span_named(records, "StrOutputParser").attributes["gen_ai.system"] == "langchain"
    assert_no_framework_provider(trace)


# -- Langfuse ---------------------------------------------------------------------------------------------


@pytest.fixture
def langfuse_client(
    capture: tuple[TracerProvider, InMemorySpanExporter], request: pytest.FixtureRequest
) -> Iterator[tuple[Any, str]]:
    """A Langfuse client on our provider, and its public key (handlers and wrappers find it by key)."""
    from langfuse import Langfuse

    provider, _ = capture
    # Clients are cached per public key; one key per test keeps them apart. Langfuse's own exporter
    # goes to memory too, so nothing is sent anywhere.
    public_key = f"pk-lf-{request.node.name}"
    client = Langfuse(
        public_key=public_key,
        secret_key="sk-lf-test",
        base_url="http://127.0.0.1:9",
        tracer_provider=provider,
        span_exporter=InMemorySpanExporter(),
    )
    yield client, public_key
    client.flush()


def test_langfuse_langchain_callback_rag(
    langfuse_client: tuple[Any, str], capture: tuple[TracerProvider, InMemorySpanExporter], stub: OpenAIStub
) -> None:
    from langfuse.langchain import CallbackHandler

    langfuse, public_key = langfuse_client
    handler = CallbackHandler(public_key=public_key)
    script_answer(stub)
    assert rag_chain(stub.base_url).invoke(QUESTION, config={"callbacks": [handler]}) == ANSWER
    langfuse.flush()

    trace, records = only_trace(capture[1])
    assert trace.convention == "langfuse"
    # The SDK (v5) has no langfuse.trace.input/output; the root observation's input/output say it.
    assert root_of(records).attributes["langfuse.observation.input"] == QUESTION
    assert (trace.question, trace.answer) == (QUESTION, ANSWER)
    assert rag_step_kinds(trace) == ["retrieval", "llm"]

    retrieval = one_step(trace, "retrieval")
    assert retrieval.convention == "langfuse"
    assert retrieval.query == QUESTION
    # langfuse.observation.output is the JSON list of Documents, ids included.
    assert doc_tuples(retrieval) == [
        (1, "returns-window", TOP2[0].page_content, None),
        (2, "refunds", TOP2[1].page_content, None),
    ]
    assert [d.metadata for d in retrieval.documents] == [
        {"source": "returns.md", "page": 2},
        {"source": "policy.md"},
    ]

    llm = one_step(trace, "llm")
    assert llm.name == "ChatOpenAI"
    assert llm.model == MODEL_SNAPSHOT
    # output is '{"role": "assistant", "content": "..."}'; usage_details '{"input", "output", "total"}'.
    assert_langchain_llm_step(llm)


@pytest.fixture
def langfuse_openai() -> Iterator[Any]:
    """`langfuse.openai`, whose import wraps the `openai` client's methods process-wide (wrapt): the
    wrappers are taken off again afterwards, so later tests (the judge client's) call the real
    client."""
    import openai

    stream_iter, async_stream_aiter = openai.Stream.__iter__, openai.AsyncStream.__aiter__
    from langfuse import openai as langfuse_openai_module

    try:
        yield langfuse_openai_module
    finally:
        for resource in langfuse_openai_module.OPENAI_METHODS_V1:
            try:
                module = importlib.import_module(resource.module)
            except ImportError:  # definitions for other openai versions, never wrapped here
                continue
            owner = getattr(module, resource.object, None)
            wrapped = getattr(owner, resource.method, None)
            if owner is not None and hasattr(wrapped, "__wrapped__"):
                setattr(owner, resource.method, wrapped.__wrapped__)
        openai.Stream.__iter__ = stream_iter  # type: ignore[method-assign]
        openai.AsyncStream.__aiter__ = async_stream_aiter  # type: ignore[method-assign]


def test_langfuse_manual_observations_and_openai_wrapper(
    langfuse_client: tuple[Any, str],
    capture: tuple[TracerProvider, InMemorySpanExporter],
    stub: OpenAIStub,
    langfuse_openai: Any,
) -> None:
    LangfuseOpenAI = langfuse_openai.OpenAI

    langfuse, public_key = langfuse_client
    script_answer(stub)
    client = LangfuseOpenAI(base_url=stub.base_url, api_key="test")
    hits = [
        {"id": "returns-window", "score": 0.82, "content": TOP2[0].page_content},
        {"id": "refunds", "score": 0.5, "content": TOP2[1].page_content},
    ]
    with langfuse.start_as_current_observation(
        name="rag", as_type="span", input={"question": QUESTION}
    ) as root:
        with langfuse.start_as_current_observation(
            name="embed-query", as_type="embedding", model="text-embedding-3-small", input=QUESTION
        ) as embed:
            embed.update(usage_details={"input": 5})
        with langfuse.start_as_current_observation(name="search", as_type="retriever", input=QUESTION) as obs:
            obs.update(output=hits)
        reply = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
            # The wrapper's own keyword (not in openai's signatures): which Langfuse client records it.
            langfuse_public_key=public_key,  # type: ignore[call-overload]
        )
        root.update(output=reply.choices[0].message.content)
    langfuse.flush()

    trace, records = only_trace(capture[1])
    generation = span_named(records, "OpenAI-generation")
    assert '"prompt_tokens": 812' in generation.attributes["langfuse.observation.usage_details"]
    assert trace.convention == "langfuse"
    # Root observation input is {"question": ...}.
    assert (trace.question, trace.answer) == (QUESTION, ANSWER)
    assert rag_step_kinds(trace) == ["embedding", "retrieval", "llm"]
    embedding = one_step(trace, "embedding")
    assert (embedding.model, embedding.input_tokens) == ("text-embedding-3-small", 5)
    retrieval = one_step(trace, "retrieval")
    assert retrieval.query == QUESTION
    assert doc_tuples(retrieval) == [
        (1, "returns-window", TOP2[0].page_content, 0.82),
        (2, "refunds", TOP2[1].page_content, 0.5),
    ]
    llm = one_step(trace, "llm")
    assert llm.model == MODEL_SNAPSHOT
    assert llm.output == ANSWER
    # Last: usage_details here is {"prompt_tokens", "completion_tokens", "total_tokens"} (the raw OpenAI
    # usage; Langfuse's server normalises it), not Langfuse's own {"input", "output", "total"}.
    assert (llm.input_tokens, llm.output_tokens, llm.total_tokens) == (812, 64, 876)


def test_langfuse_evaluator_observation(
    langfuse_client: tuple[Any, str], capture: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    langfuse, _ = langfuse_client
    with langfuse.start_as_current_observation(name="rag", as_type="span", input=QUESTION) as root:
        with langfuse.start_as_current_observation(
            name="answer", as_type="generation", model=MODEL, input=[{"role": "user", "content": QUESTION}]
        ) as generation:
            generation.update(output=ANSWER, usage_details={"input": 9, "output": 8})
        with langfuse.start_as_current_observation(
            name="faithfulness", as_type="evaluator", model="gpt-4o", input=ANSWER
        ) as judge:
            judge.update(output={"score": 1.0}, usage_details={"input": 400, "output": 20})
        root.update(output=ANSWER)
    langfuse.flush()

    trace, records = only_trace(capture[1])
    assert span_named(records, "faithfulness").attributes["langfuse.observation.type"] == "evaluator"
    # The judge has a model and usage, but it is not the app's llm step.
    llm = one_step(trace, "llm")
    assert (llm.name, llm.model, llm.input_tokens, llm.output_tokens) == ("answer", MODEL, 9, 8)
    assert trace.answer == ANSWER
    # langfuse.observation.type="evaluator" is an evaluator step (Step.kind has it).
    assert [s.name for s in trace.steps_of("evaluator")] == ["faithfulness"]


def test_stub_scripts_replies_and_records_requests(stub: OpenAIStub) -> None:
    """The stub itself: queue order, responder fallback, loud failure when nothing is scripted."""
    client = openai.OpenAI(base_url=stub.base_url, api_key="test", max_retries=0)
    stub.reply("first", prompt_tokens=3, completion_tokens=1)
    stub.reply("second", model="gpt-x-snapshot")
    first = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    second = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}])
    assert (first.choices[0].message.content, first.usage and first.usage.total_tokens) == ("first", 4)
    assert (second.choices[0].message.content, second.model) == ("second", "gpt-x-snapshot")
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "c"}])
    stub.responder = lambda request: f"echo {request.json['messages'][-1]['content']}"
    echoed = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "d"}])
    assert echoed.choices[0].message.content == "echo d"
    assert [r.json["messages"][-1]["content"] for r in stub.chat_requests] == ["a", "b", "c", "d"]
    assert stub.chat_requests[2].reply is None
    assert stub.requests[0].headers["authorization"] == "Bearer test"
    vectors = client.embeddings.create(model="e", input=["x", "x", "y"]).data
    assert vectors[0].embedding == vectors[1].embedding != vectors[2].embedding


def test_stub_serves_langchain_openai_embeddings(stub: OpenAIStub) -> None:
    """OpenAIEmbeddings against the stub works (no tiktoken download with check_embedding_ctx_length off),
    so judge/embedding tests can build a vector store on it."""
    embeddings = OpenAIEmbeddings(
        model="text-embedding-3-small",
        openai_api_base=stub.base_url,
        openai_api_key=SecretStr("test"),
        check_embedding_ctx_length=False,
    )
    vectors = embeddings.embed_documents(["a b", "a b", "c"])
    assert vectors[0] == vectors[1] != vectors[2]
    assert len(vectors[0]) == stub.embedding_dimensions
    assert [r.json["input"] for r in stub.requests] == [["a b", "a b", "c"]]
