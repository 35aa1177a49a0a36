#!/usr/bin/env python3
"""Judge cost benchmark: judge calls and prompt size per evaluated trace, for each judge evaluator.

The case is the one RAGAS 0.4.3 was measured on (reference/metrics.md, issue 4): three refund
questions, four retrieved store-policy documents of about 344 characters in all (the first sentence
of four documents of examples/shop_assistant/knowledge_base.yaml), and a two-sentence answer.
The judge is a local OpenAI-protocol server (tests/openai_stub.py) that answers a valid verdict
for whatever it is asked, so the real client sends the real prompts. What is counted:

- calls: chat requests the server received per trace;
- prompt characters: every message's content plus the JSON schema sent in `response_format`
  (what a server tokenizes), per trace — directly comparable with RAGAS's measured characters;
- prompt tokens: characters / 4, which the server reports in its `usage` (no tokenizer can be
  downloaded here; characters are the exact figure, tokens an estimate);
- completion tokens: of the verdict the server wrote (its length / 4): a real model's reasons
  will differ.

Beside each, RAGAS's cost for the same metric: measured on this case for faithfulness and context
precision; for context recall, answer relevancy and answer correctness only RAGAS's static prompt
tokens (reference/metrics.md 6.4, payload excluded) are known, a lower bound of its real cost.

    .venv/bin/python bench/judge_cost.py
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

from evaluators.judge import JudgeClient, JudgeSettings  # noqa: E402
from evaluators.registry import build_evaluator  # noqa: E402
from semconv.models import Document, RagTrace, Step  # noqa: E402
from tests.openai_stub import ChatReply, OpenAIStub, RecordedRequest, passing_verdict  # noqa: E402

RAGAS = {  # measured with RAGAS 0.4.3 on the same kind of case (issue 4): calls, prompt characters
    "faithfulness": {"calls": 2, "prompt_chars": 5700},
    "context_precision": {"calls": 4, "prompt_chars": 16500},
}
# Not measured on this case: RAGAS's static prompt tokens per sample (reference/metrics.md 6.4:
# words x 1.3, payload excluded), a lower bound for the same metric.
RAGAS_STATIC_TOKENS = {
    "context_recall": {"calls": 1, "tokens": 660},
    "answer_relevance": {"calls": 3, "tokens": 3 * 242},  # + embeddings
    "answer_correctness": {"calls": 3, "tokens": 910 + 2 * 296},  # + embeddings
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
    kb = yaml.safe_load((ROOT / "examples/shop_assistant/knowledge_base.yaml").read_text())
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


def prompt_chars(request: RecordedRequest) -> int:
    body = request.json
    chars = sum(len(m.get("content") or "") for m in body["messages"])
    if "response_format" in body:
        chars += len(json.dumps(body["response_format"]))
    return chars


def respond(request: RecordedRequest) -> ChatReply:
    messages = request.json["messages"]
    content = json.dumps(passing_verdict(messages[0]["content"], messages[-1]["content"]))
    return ChatReply(
        content=content,
        prompt_tokens=math.ceil(prompt_chars(request) / 4),
        completion_tokens=math.ceil(len(content) / 4),
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
    """Our cost beside RAGAS's for the same metric (context_relevance beside RAGAS's per-document
    context precision, the nearest RAGAS metric)."""
    name = label.split(" ")[0]
    measured = RAGAS.get("context_precision" if name == "context_relevance" else name)
    if measured:
        share = row["prompt_chars"] / measured["prompt_chars"]
        return f"{measured['calls']} calls, {measured['prompt_chars']:,} chars measured ({share:.0%})"
    static = RAGAS_STATIC_TOKENS.get(name)
    if static:
        share = row["prompt_tokens"] / static["tokens"]
        return f"{static['calls']} calls, >= {static['tokens']:,} tok static prompt only ({share:.0%})"
    return "-"


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
        f"{'evaluator':32} {'calls/trace':>11} {'prompt chars':>12} {'~prompt tok':>11} {'~compl tok':>10}"
    )
    print(f"{header}   RAGAS per sample (ours as a share)")
    for row in rows:
        figures = f"{row['calls']:>11.1f} {row['prompt_chars']:>12,.0f} {row['prompt_tokens']:>11,.0f}"
        versus = versus_ragas(row["evaluator"], row)
        print(f"{row['evaluator']:32} {figures} {row['completion_tokens']:>10,.0f}   {versus}")


if __name__ == "__main__":
    main()
