#!/usr/bin/env python3
"""Judge cost benchmark: judge calls and prompt size per evaluated trace, for each judge evaluator.

The case is the one RAGAS 0.4.3 is measured on by bench/ragas_cost.py: three refund questions,
four retrieved store-policy documents of 301 characters in all (the first sentence of four
documents of collector/shop_assistant/knowledge_base.yaml), a two-sentence answer and an expected
answer. The judge is a local OpenAI-protocol server (tests/support/openai_stub.py) that answers a valid
verdict for whatever it is asked, so the real client sends the real prompts. What is counted:

- calls: chat requests the server received per trace;
- prompt characters: every message's content plus the JSON schema sent in `response_format`, as
  the client sends it (compact JSON), per trace;
- prompt tokens: the same texts counted with tiktoken's o200k_base (bench/tokens.py, which says how
  to get the vocabulary offline), as bench/ragas_cost.py counts RAGAS's; characters / 4 when no
  tokenizer is available. The server reports this figure in its `usage`, so it is also what the
  scores record;
- completion tokens: of the verdict the server wrote (the same count): a real model's reasons will
  differ.

Beside each, RAGAS's measured cost for the same metric and ours as a share of its prompt tokens.

    TIKTOKEN_CACHE_DIR=... .venv/bin/python bench/judge_cost.py
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tokens  # noqa: E402  bench/tokens.py: the same token count as bench/ragas_cost.py

from evaluators.judge import JudgeClient, JudgeSettings  # noqa: E402
from evaluators.registry import build_evaluator  # noqa: E402
from semconv.models import Document, RagTrace, Step  # noqa: E402
from tests.support.openai_stub import ChatReply, OpenAIStub, RecordedRequest, passing_verdict  # noqa: E402

# RAGAS 0.4.3 on this same case, measured by bench/ragas_cost.py (legacy evaluate() with
# langchain-openai's ChatOpenAI, the lighter of its two set-ups): chat calls, prompt characters and
# o200k_base prompt tokens per sample. answer_relevancy also makes 2 embedding calls and asks for
# n=3 completions; answer_correctness 2 embedding calls.
RAGAS = {
    "faithfulness": {"calls": 2, "prompt_chars": 5687, "prompt_tokens": 1234},
    "context_precision": {"calls": 4, "prompt_chars": 16457, "prompt_tokens": 3602},
    "context_recall": {"calls": 1, "prompt_chars": 4148, "prompt_tokens": 910},
    "answer_relevance": {"calls": 1, "prompt_chars": 1405, "prompt_tokens": 354},
    "answer_correctness": {"calls": 3, "prompt_chars": 8779, "prompt_tokens": 1869},
}
QUESTIONS = [  # (question, answer, expected answer)
    (
        "How many days after delivery can I ask for a refund?",
        "You can ask for a refund within 30 days of delivery. Items must be unused.",
        "Within 30 days of delivery, for unused items.",
    ),
    (
        "How are refunds paid?",
        "Refunds go back to the original payment method. It takes 5 to 7 business days.",
        "To the original payment method, within 5 to 7 business days.",
    ),
    (
        "Can I get a refund on a final-sale item?",
        "No, final-sale items cannot be refunded. They have a red tag.",
        "No. Final-sale items cannot be refunded.",
    ),
]
DOCUMENT_IDS = ["refund-window", "refund-method", "returns-damaged", "return-shipping"]


def documents() -> list[Document]:
    kb = yaml.safe_load((ROOT / "collector/shop_assistant/knowledge_base.yaml").read_text())
    by_id = {d["id"]: " ".join(d["content"].split()) for d in kb["indexes"]["store-policies"]}
    return [
        Document(rank=rank, id=doc_id, content=by_id[doc_id].split(". ")[0] + ".")
        for rank, doc_id in enumerate(DOCUMENT_IDS, start=1)
    ]


def trace(question: str, answer: str, expected: str, docs: list[Document]) -> RagTrace:
    steps = [
        Step(span_id="r", kind="retrieval", documents=docs, query=question),
        Step(span_id="l", kind="llm", position=1, output=answer),
    ]
    return RagTrace(trace_id="t", question=question, answer=answer, expected_answer=expected, steps=steps)


def prompt_texts(request: RecordedRequest) -> list[str]:
    """What the server tokenizes: every message's content and the schema in `response_format`."""
    body = request.json
    texts = [m.get("content") or "" for m in body["messages"]]
    if "response_format" in body:
        texts.append(json.dumps(body["response_format"], separators=(",", ":")))  # as httpx sends it
    return texts


def prompt_chars(request: RecordedRequest) -> int:
    return sum(map(len, prompt_texts(request)))


def prompt_tokens(request: RecordedRequest) -> int:
    """o200k_base tokens (bench/tokens.py); chars / 4 when no tokenizer is available."""
    counted = tokens.count_all(prompt_texts(request))
    return math.ceil(prompt_chars(request) / 4) if counted is None else counted


def respond(request: RecordedRequest) -> ChatReply:
    messages = request.json["messages"]
    content = json.dumps(passing_verdict(messages[0]["content"], messages[-1]["content"]))
    return ChatReply(
        content=content,
        prompt_tokens=prompt_tokens(request),
        completion_tokens=tokens.count(content) or math.ceil(len(content) / 4),
    )


EVALUATORS = [
    ("faithfulness", {"name": "faithfulness", "mode": "claims"}),
    ("faithfulness (answer mode)", {"name": "faithfulness", "mode": "answer"}),
    ("context_relevance", {"name": "context_relevance"}),
    ("context_precision", {"name": "context_precision"}),
    ("context_recall", {"name": "context_recall"}),
    ("answer_relevance", {"name": "answer_relevance"}),
    ("answer_correctness", {"name": "answer_correctness"}),
    ("answer_correctness (precision)", {"name": "answer_correctness", "mode": "precision"}),
]


def versus_ragas(label: str, row: dict[str, Any]) -> str:
    """RAGAS's measured cost for the same metric, and ours as a share of its prompt tokens (of its
    characters when no tokenizer is available). context_relevance is set beside RAGAS's
    per-document context precision, the nearest RAGAS metric."""
    name = label.split(" ")[0]
    theirs = RAGAS.get("context_precision" if name == "context_relevance" else name)
    if theirs is None:
        return "-"
    if tokens.available():
        share = row["prompt_tokens"] / theirs["prompt_tokens"]
        return f"{theirs['calls']} calls, {theirs['prompt_tokens']:,} tokens ({share:.0%})"
    share = row["prompt_chars"] / theirs["prompt_chars"]
    return f"{theirs['calls']} calls, {theirs['prompt_chars']:,} chars ({share:.0%})"


def main() -> None:
    docs = documents()
    context_chars = sum(len(d.content or "") for d in docs)
    print(f"case: {len(QUESTIONS)} questions, {len(docs)} documents, {context_chars} characters of context")
    rows: list[dict[str, Any]] = []
    with OpenAIStub(responder=respond) as stub:
        for label, entry in EVALUATORS:
            client = JudgeClient(
                JudgeSettings(model="bench", base_url=stub.base_url, api_key="x", cache_size=0)
            )  # type: ignore[arg-type]
            evaluate = build_evaluator(entry, judge=client)
            stub.requests.clear()
            scores = [evaluate(trace(q, a, g, docs)) for q, a, g in QUESTIONS]
            assert all(s.status == "pass" for s in scores), [s.explanation for s in scores]
            n = len(QUESTIONS)
            rows.append(
                {
                    "evaluator": label,
                    "calls": len(stub.requests) / n,
                    "prompt_chars": sum(prompt_chars(r) for r in stub.requests) / n,
                    "prompt_tokens": sum(s.judge_input_tokens or 0 for s in scores) / n,
                    "completion_tokens": sum(s.judge_output_tokens or 0 for s in scores) / n,
                }
            )
            client.close()
    header = (
        f"{'evaluator':32} {'calls/trace':>11} {'prompt chars':>12} {'prompt tok':>11} {'~compl tok':>10}"
    )
    print(f"{header}   RAGAS per sample (ours as a share)")
    for row in rows:
        figures = f"{row['calls']:>11.1f} {row['prompt_chars']:>12,.0f} {row['prompt_tokens']:>11,.0f}"
        versus = versus_ragas(row["evaluator"], row)
        print(f"{row['evaluator']:32} {figures} {row['completion_tokens']:>10,.0f}   {versus}")


if __name__ == "__main__":
    main()
