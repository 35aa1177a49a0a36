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

    .venv/bin/python bench/judge_cost.py
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluators.judge import JudgeClient, JudgeSettings  # noqa: E402
from evaluators.registry import build_evaluator  # noqa: E402
from semconv.models import Document, RagTrace, Step  # noqa: E402
from tests.openai_stub import ChatReply, OpenAIStub, RecordedRequest  # noqa: E402

RAGAS = {  # measured with RAGAS 0.4.3 on the same kind of case (issue 4)
    "faithfulness": {"calls": 2, "prompt_chars": 5700},
    "context_precision": {"calls": 4, "prompt_chars": 16500},
}
QUESTIONS = [
    (
        "How many days after delivery can I ask for a refund?",
        "You can ask for a refund within 30 days of delivery. Items must be unused.",
    ),
    (
        "How are refunds paid?",
        "Refunds go back to the original payment method. It takes 5 to 7 business days.",
    ),
    (
        "Can I get a refund on a final-sale item?",
        "No, final-sale items cannot be refunded. They have a red tag.",
    ),
]
DOCUMENT_IDS = ["refund-window", "refund-method", "returns-damaged", "return-shipping"]
_BLOCK = re.compile(r'<data-(\w+) kind="document"([^>]*)>\n(.*?)\n</data-\1>', re.DOTALL)


def documents() -> list[Document]:
    kb = yaml.safe_load((ROOT / "examples/shop_assistant/knowledge_base.yaml").read_text())
    by_id = {d["id"]: " ".join(d["content"].split()) for d in kb["indexes"]["store-policies"]}
    return [
        Document(rank=rank, id=doc_id, content=by_id[doc_id].split(". ")[0] + ".")
        for rank, doc_id in enumerate(DOCUMENT_IDS, start=1)
    ]


def trace(question: str, answer: str, docs: list[Document]) -> RagTrace:
    steps = [
        Step(span_id="r", kind="retrieval", documents=docs, query=question),
        Step(span_id="l", kind="llm", position=1, output=answer),
    ]
    return RagTrace(trace_id="t", question=question, answer=answer, steps=steps)


def prompt_chars(request: RecordedRequest) -> int:
    body = request.json
    chars = sum(len(m.get("content") or "") for m in body["messages"])
    if "response_format" in body:
        chars += len(json.dumps(body["response_format"]))
    return chars


def respond(request: RecordedRequest) -> ChatReply:
    """A valid verdict for any judge prompt: every claim supported by the first document, every
    document relevant."""
    system = request.json["messages"][0]["content"]
    user = request.json["messages"][-1]["content"]
    docs = _BLOCK.findall(user)
    if "relevant to a user's QUESTION" in system:
        content = json.dumps(
            {
                "documents": [
                    {"rank": i + 1, "relevant": True, "reason": "about refunds"} for i in range(len(docs))
                ]
            }
        )
    else:
        attrs, text = docs[0][1], docs[0][2]
        doc_id = re.search(r'id="([^"]*)"', attrs).group(1)  # type: ignore[union-attr]
        claims = [
            {
                "claim": s,
                "verdict": "supported",
                "doc_id": doc_id,
                "quote": text.split(".")[0],
                "reason": "stated in the document",
            }
            for s in ("claim one", "claim two")
        ]
        content = json.dumps({"claims": claims})
    return ChatReply(
        content=content,
        prompt_tokens=math.ceil(prompt_chars(request) / 4),
        completion_tokens=math.ceil(len(content) / 4),
    )


def main() -> None:
    docs = documents()
    context_chars = sum(len(d.content or "") for d in docs)
    print(f"case: {len(QUESTIONS)} questions, {len(docs)} documents, {context_chars} characters of context")
    evaluators = [
        ("faithfulness", {"name": "faithfulness", "mode": "claims"}),
        ("faithfulness (answer mode)", {"name": "faithfulness", "mode": "answer"}),
        ("context_relevance", {"name": "context_relevance"}),
    ]
    rows: list[dict[str, Any]] = []
    with OpenAIStub(responder=respond) as stub:
        for label, entry in evaluators:
            client = JudgeClient(
                JudgeSettings(model="bench", base_url=stub.base_url, api_key="x", cache_size=0)
            )  # type: ignore[arg-type]
            evaluate = build_evaluator(entry, judge=client)
            stub.requests.clear()
            scores = [evaluate(trace(q, a, docs)) for q, a in QUESTIONS]
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
        f"{'evaluator':28} {'calls/trace':>11} {'prompt chars':>12} {'~prompt tok':>11} {'~compl tok':>10}"
    )
    print(f"{header}   RAGAS (calls, chars)")
    for row in rows:
        name = row["evaluator"].split(" ")[0]
        ragas = RAGAS.get(name) or (RAGAS["context_precision"] if name == "context_relevance" else None)
        versus = (
            f"{ragas['calls']}, {ragas['prompt_chars']:,} ({row['prompt_chars'] / ragas['prompt_chars']:.0%})"
            if ragas
            else "-"
        )
        figures = f"{row['calls']:>11.1f} {row['prompt_chars']:>12,.0f} {row['prompt_tokens']:>11,.0f}"
        print(f"{row['evaluator']:28} {figures} {row['completion_tokens']:>10,.0f}   {versus}")


if __name__ == "__main__":
    main()
