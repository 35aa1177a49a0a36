"""The example shop assistant: deterministic retrieval and answers, the three modes, both conventions
mapped alike, and its command line against a real collector."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collector.datasets import read_cases
from collector.otlp.batch import decode_request
from collector.schema.span_records import span_records
from collector.service import BackgroundService
from collector.shop_assistant import CASES_FILE, Case, ShopAssistant, load_cases
from collector.shop_assistant.knowledge import POLICY_INDEX, WRONG_INDEX, load_indexes
from collector.shop_assistant.llm import NOT_FOUND, ComposerLLM
from collector.shop_assistant.retriever import Bm25Retriever
from collector.shop_assistant.text import sentences
from semconv import RagTrace, map_trace
from tests.support.helpers import (
    REPO,
    doc_tuples,
    fast_assembler,
    free_port,
    make_config,
    one_step,
    sql,
    wait_for,
)

CASES = load_cases()
INDEXES = load_indexes()


def _assistant(mode: str, convention: str = "ragpulse") -> tuple[ShopAssistant, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = ShopAssistant(provider.get_tracer("test"), mode=mode, convention=convention, latency=0, labels=True)
    return app, exporter


def _mapped(exporter: InMemorySpanExporter) -> RagTrace:
    batch = decode_request(encode_spans(exporter.get_finished_spans()))
    records = span_records(batch.spans, batch.events)
    assert len({r.trace_id for r in records}) == 1
    return map_trace(records)


def test_knowledge_base_and_cases_are_consistent() -> None:
    policy_ids = [d.id for d in INDEXES[POLICY_INDEX]]
    blog_ids = [d.id for d in INDEXES[WRONG_INDEX]]
    assert 12 <= len(policy_ids) <= 16 and len(set(policy_ids)) == len(policy_ids)
    assert not set(policy_ids) & set(blog_ids)
    assert 9 <= len(CASES) <= 12 and len({c.id for c in CASES}) == len(CASES)
    for case in CASES:
        assert case.expected_documents and set(case.expected_documents) <= set(policy_ids), case.id
        assert case.expected_answer, case.id
    # The same file loads as golden cases for `ragpulse datasets load`.
    golden = read_cases(CASES_FILE)
    assert [(c.id, c.question, c.expected_documents) for c in golden] == [
        (c.id, c.question, list(c.expected_documents)) for c in CASES
    ]


def test_retriever_is_deterministic_and_ranked() -> None:
    first = Bm25Retriever(POLICY_INDEX, INDEXES[POLICY_INDEX])
    second = Bm25Retriever(POLICY_INDEX, list(INDEXES[POLICY_INDEX]))
    for case in CASES:
        hits = first.search(case.question, top_k=3)
        assert [(h.document.id, h.score) for h in hits] == [
            (h.document.id, h.score) for h in second.search(case.question, top_k=3)
        ]
        scores = [h.score for h in hits]
        assert len(hits) == 3 and scores == sorted(scores, reverse=True) and scores[0] > 0
    # Nothing matches: every score is 0 and the order is the index order (no hash dependence).
    none = first.search("zzz qqq", top_k=4)
    assert [h.score for h in none] == [0.0] * 4
    assert [h.document.id for h in none] == [d.id for d in INDEXES[POLICY_INDEX][:4]]


def test_composer_is_deterministic_and_counts_whitespace_tokens() -> None:
    retriever = Bm25Retriever(POLICY_INDEX, INDEXES[POLICY_INDEX])
    llm = ComposerLLM()
    for case in CASES:
        hits = retriever.search(case.question)
        first, again = llm.complete(case.question, hits), ComposerLLM().complete(case.question, hits)
        assert first == again
        assert first.output_tokens == len(first.text.split())
        assert first.input_tokens == len(first.system.split()) + len(first.user.split())
        assert case.question in first.user and hits[0].document.content in first.user
    assert llm.complete("zzz qqq", retriever.search("zzz qqq")).text == NOT_FOUND


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_healthy_retrieves_expected_documents_and_answers_from_them(case: Case) -> None:
    app, _ = _assistant("healthy")
    answer = app.answer(case.question, case)
    assert answer.index == POLICY_INDEX
    assert set(case.expected_documents) <= set(answer.document_ids)
    context = " ".join(h.document.content for h in answer.hits)
    assert answer.text != NOT_FOUND
    for sentence in sentences(answer.text):
        assert sentence in context, sentence


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_degraded_misses_every_expected_document(case: Case) -> None:
    app, _ = _assistant("degraded")
    answer = app.answer(case.question, case)
    assert answer.index == WRONG_INDEX
    assert len(answer.hits) == 3
    assert not set(case.expected_documents) & set(answer.document_ids)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hallucinate_adds_a_sentence_no_retrieved_document_supports(case: Case) -> None:
    healthy, _ = _assistant("healthy")
    app, _ = _assistant("hallucinate")
    grounded = healthy.answer(case.question, case)
    answer = app.answer(case.question, case)
    # Retrieval is unchanged; the answer is the grounded one plus an invented claim.
    assert answer.document_ids == grounded.document_ids
    assert answer.text.startswith(grounded.text)
    contents = [h.document.content for h in answer.hits]
    unsupported = [s for s in sentences(answer.text) if not any(s in c for c in contents)]
    assert unsupported == [answer.completion.fabricated]


def test_both_conventions_map_to_the_same_rag_trace() -> None:
    case = next(c for c in CASES if len(c.expected_documents) > 1)
    mapped = {}
    for convention in ("ragpulse", "openinference"):
        app, exporter = _assistant("hallucinate", convention)
        app.answer(case.question, case)
        mapped[convention] = _mapped(exporter)
    ours, oi = mapped["ragpulse"], mapped["openinference"]
    assert (ours.convention, oi.convention) == ("ragpulse", "openinference")
    for trace in (ours, oi):
        assert trace.question == case.question
        assert trace.case_id == case.id
        assert trace.expected_documents == list(case.expected_documents)
        assert trace.expected_answer == case.expected_answer
        assert [s.kind for s in trace.steps if s.kind != "chain"] == ["retrieval", "llm"]
    assert ours.answer == oi.answer and ours.answer
    assert (ours.input_tokens, ours.output_tokens) == (oi.input_tokens, oi.output_tokens)
    assert ours.input_tokens and ours.output_tokens

    ours_docs = doc_tuples(one_step(ours, "retrieval"))
    assert ours_docs == doc_tuples(one_step(oi, "retrieval")) and len(ours_docs) == 3
    (llm_ours,) = ours.steps_of("llm")
    (llm_oi,) = oi.steps_of("llm")
    assert (
        (llm_ours.model, llm_ours.provider)
        == (llm_oi.model, llm_oi.provider)
        == (
            "shop-composer-1",
            "ragpulse-examples",
        )
    )
    (retrieval_ours,) = ours.steps_of("retrieval")
    (retrieval_oi,) = oi.steps_of("retrieval")
    assert retrieval_ours.query == retrieval_oi.query == case.question


def test_root_span_carries_mode_and_case_id() -> None:
    for convention in ("ragpulse", "openinference"):
        app, exporter = _assistant("degraded", convention)
        answer = app.answer(CASES[0].question, CASES[0])
        (root,) = [s for s in exporter.get_finished_spans() if s.parent is None]
        assert root.attributes is not None
        assert root.attributes["app.mode"] == "degraded"
        assert root.attributes["rag.case.id"] == CASES[0].id
        assert format(root.context.trace_id, "032x") == answer.trace_id


def test_unknown_mode_and_convention_are_refused() -> None:
    provider = TracerProvider()
    with pytest.raises(ValueError, match="unknown mode"):
        ShopAssistant(provider.get_tracer("t"), mode="broken")
    with pytest.raises(ValueError, match="unknown convention"):
        ShopAssistant(provider.get_tracer("t"), convention="zipkin")


def _module_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "collector.shop_assistant", "--latency", "0", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_cli_sends_one_trace_per_question(tmp_path: Path, protocol: str) -> None:
    config = make_config(tmp_path, assembler=fast_assembler())
    with BackgroundService(config) as svc:
        port = svc.grpc_port if protocol == "grpc" else svc.http_port
        done = _module_cli(
            "--endpoint", f"127.0.0.1:{port}", "--protocol", protocol, "--mode", "hallucinate",
            "--convention", "openinference",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"{len(CASES)} trace(s), mode=hallucinate, convention=openinference" in done.stdout
        assert f"{3 * len(CASES)} span(s) acknowledged" in done.stdout
        wait_for(
            lambda: sql(svc, "SELECT count(*) AS n FROM traces")[0]["n"],
            lambda n: n >= len(CASES),
            timeout=20,
            interval=0.1,
            what=f"{len(CASES)} assembled traces",
        )
        rows = sql(
            svc,
            "SELECT t.convention, t.case_id, s.attributes->>'app.mode' AS mode FROM traces t "
            "JOIN spans s ON s.span_id = t.root_span_id ORDER BY t.case_id",
        )
    assert sorted(r["case_id"] for r in rows) == sorted(c.id for c in CASES)
    assert {(r["convention"], r["mode"]) for r in rows} == {("openinference", "hallucinate")}


def test_cli_exits_non_zero_when_nothing_listens() -> None:
    port = free_port()
    done = _module_cli("--endpoint", f"127.0.0.1:{port}", "--timeout", "1", "--protocol", "http/protobuf")
    assert done.returncode == 1
    assert "0 span(s) acknowledged" in done.stdout
