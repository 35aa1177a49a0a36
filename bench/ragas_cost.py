#!/usr/bin/env python3
"""RAGAS cost benchmark: what RAGAS 0.4.3's legacy `evaluate()` sends to the LLM per sample.

The case is the one bench/judge_cost.py measures our judge on: three refund questions, their
answers and expected answers, and the same four retrieved documents in the same order. It is
read from bench/data/ragas_case.json, which was written by running, with the project's venv,

    .venv/bin/python -c 'import json, sys; sys.path.insert(0, "bench"); import judge_cost as j;
    docs = [d.content for d in j.documents()]; print(json.dumps({"samples": [{"user_input": q,
    "response": a, "reference": g, "retrieved_contexts": docs} for q, a, g in j.QUESTIONS]}))'

(plus a "source" and "retrieved_context_ids" entry), so this script imports nothing of ragpulse
and runs in a venv that has RAGAS only.

The LLM is a local OpenAI-protocol server on a loopback port (started here, in a thread) that
records every request to /v1/chat/completions and /v1/embeddings and answers each RAGAS prompt
with a valid output for its pydantic model (read from the JSON schema and the input that RAGAS
writes into the prompt), so that RAGAS never goes into its output-fixing prompt or a retry. It
honours `n` (one choice per completion asked for) and returns a `usage` (characters / 4).
Embeddings are 8 floats derived from the text. Each metric is run with `evaluate()` alone on the
3-sample dataset, through two LLM set-ups:

- `langchain`: `evaluate(llm=ChatOpenAI(...), embeddings=OpenAIEmbeddings(...))`, both from
  langchain-openai pointed at the server (evaluate() wraps them in LangchainLLMWrapper and
  LangchainEmbeddingsWrapper). OpenAIEmbeddings gets `check_embedding_ctx_length=False` (it
  would otherwise fetch a tiktoken vocabulary from the internet): strings are sent, not tokens.
- `default`: `evaluate()` with no llm and no embeddings, with OPENAI_BASE_URL set to the server:
  RAGAS then builds `llm_factory("gpt-4o-mini", client=OpenAI())` (Instructor, JSON mode: a
  system message with the schema and `response_format`) and its own OpenAI embeddings on the same
  client. A metric that fails there is reported as failed and run again with langchain-openai's
  embeddings, the row marked `(lc emb)`.

Requests are attributed to a sample by the question, response or statements that RAGAS writes
into them. Per sample it prints: chat requests, embedding requests, prompt characters (the
content of every message of every chat request, Instructor's system message included), of which
Instructor's system message, schema characters (`response_format` / `tools` as JSON, when sent),
completion characters (of what the server answered), and calls that would be retries or fixes
(output-fixing prompts, re-asks carrying an assistant message, repeated identical requests),
which must be 0. A run counts only if the metric returned a number for every sample.

Prompt tokens are counted with bench/tokens.py (tiktoken, o200k_base; its docstring says how to
get the vocabulary offline), the same count bench/judge_cost.py makes of our prompts.

Create the venv and run (from the repository root; no network but PyPI is needed):

    python3 -m venv /tmp/ragas-venv
    /tmp/ragas-venv/bin/pip install ragas==0.4.3 "langchain-community<0.4.2"
    /tmp/ragas-venv/bin/python bench/ragas_cost.py

ragas 0.4.3 brings langchain-openai, openai and instructor with it; it does not bound
langchain-community, whose 0.4.2 no longer has `chat_models.vertexai`, which ragas imports.
The script exits 1 if a measured run had a NaN score, a retry or an unattributed request.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import re
import struct
import sys
import threading
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from pathlib import Path
from typing import Any

import tokens  # bench/tokens.py: the same token count as bench/judge_cost.py

os.environ.setdefault("OPENAI_API_KEY", "dummy")
os.environ["RAGAS_DO_NOT_TRACK"] = "true"

CASE = json.loads((Path(__file__).resolve().parent / "data" / "ragas_case.json").read_text())
SAMPLES: list[dict[str, Any]] = CASE["samples"]
DIMENSIONS = 8
SCHEMA_MARK = "as specified in JSON Schema:\n"
INPUT_MARK = "\ninput: "
FIX_MARK = "The output string did not satisfy the constraints given in the prompt."


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def decode_after(text: str, mark: str, last: bool = False) -> Any:
    start = text.rfind(mark) if last else text.find(mark)
    if start < 0:
        return None
    try:
        return json.JSONDecoder().raw_decode(text, start + len(mark))[0]
    except json.JSONDecodeError:
        return None


def sample_of(data: dict[str, Any]) -> int | None:
    """Index of the sample a RAGAS prompt input belongs to."""
    for i, s in enumerate(SAMPLES):
        if data.get("question") == s["user_input"] or data.get("response") == s["response"]:
            return i
        statements = data.get("statements") or []
        if statements and all(st in sentences(s["response"]) for st in statements):
            return i
    return None


def sample_of_texts(texts: list[str]) -> int | None:
    for i, s in enumerate(SAMPLES):
        if any(t in (s["user_input"], s["response"], s["reference"]) for t in texts):
            return i
    return None


def answer(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """A valid output for the RAGAS prompt whose output model is `kind`, given its input."""
    if kind == "StatementGeneratorOutput":
        return {"statements": sentences(data["answer"])}
    if kind == "NLIStatementOutput":
        return {
            "statements": [
                {"statement": s, "reason": "The context states this.", "verdict": 1}
                for s in data["statements"]
            ]
        }
    if kind == "Verification":
        return {"reason": "The context was useful in arriving at the given answer.", "verdict": 1}
    if kind == "ContextRecallClassifications":
        return {
            "classifications": [
                {"statement": s, "reason": "The context states this.", "attributed": 1}
                for s in sentences(data["answer"])
            ]
        }
    if kind == "ResponseRelevanceOutput":
        index = sample_of(data)
        question = SAMPLES[index]["user_input"] if index is not None else "What does the answer say?"
        return {"question": question, "noncommittal": 0}
    if kind == "ClassificationWithReason":
        return {
            "TP": [{"statement": s, "reason": "Supported by the ground truth."} for s in data["answer"]],
            "FP": [],
            "FN": [],
        }
    raise ValueError(f"no answer for prompt kind {kind}")


def embedding(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [0.1 + b / 255 for b in digest[:DIMENSIONS]]


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.chats: list[dict[str, Any]] = []
        self.embeddings: list[dict[str, Any]] = []
        self.other: list[str] = []

    def clear(self) -> None:
        with self.lock:
            self.chats.clear()
            self.embeddings.clear()
            self.other.clear()


RECORDER = Recorder()


def chat_reply(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    messages = body.get("messages") or []
    contents = [m.get("content") or "" for m in messages]
    contents = [c if isinstance(c, str) else json.dumps(c) for c in contents]
    prompt = next((c for c in reversed(contents) if SCHEMA_MARK in c), contents[-1] if contents else "")
    schema = decode_after(prompt, SCHEMA_MARK) or {}
    data = decode_after(prompt, INPUT_MARK, last=True) or {}
    kind = schema.get("title", "unknown")
    if FIX_MARK in prompt:
        kind = "fix_output"
    n = int(body.get("n") or 1)
    try:
        content = json.dumps(answer(kind, data))
    except (KeyError, ValueError, TypeError):
        content = "{}"
    system = sum(len(c) for m, c in zip(messages, contents, strict=True) if m.get("role") == "system")
    schemas = [json.dumps(body[k], separators=(",", ":")) for k in ("response_format", "tools") if k in body]
    schema_chars = sum(map(len, schemas))
    record = {
        "kind": kind,
        "sample": sample_of(data),
        "n": n,
        "prompt_chars": sum(len(c) for c in contents),
        "prompt_tokens": tokens.count_all([*contents, *schemas]),  # content + schema
        "system_chars": system,
        "schema_chars": schema_chars,
        "completion_chars": n * len(content),
        "assistant_turns": sum(m.get("role") == "assistant" for m in messages),
        "key": json.dumps(messages, sort_keys=True),
    }
    reply = {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "bench"),
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": None,
            }
            for i in range(n)
        ],
        "usage": {
            "prompt_tokens": math.ceil(record["prompt_chars"] / 4),
            "completion_tokens": math.ceil(record["completion_chars"] / 4),
            "total_tokens": math.ceil(record["prompt_chars"] / 4) + math.ceil(record["completion_chars"] / 4),
        },
    }
    return reply, record


def embeddings_reply(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    texts = [t if isinstance(t, str) else json.dumps(t) for t in texts]
    items = []
    for i, text in enumerate(texts):
        vector = embedding(text)
        if body.get("encoding_format") == "base64":
            packed: Any = base64.b64encode(struct.pack(f"<{DIMENSIONS}f", *vector)).decode()
        else:
            packed = vector
        items.append({"object": "embedding", "index": i, "embedding": packed})
    reply = {
        "object": "list",
        "data": items,
        "model": body.get("model", "bench"),
        "usage": {"prompt_tokens": sum(len(t) for t in texts) // 4, "total_tokens": 0},
    }
    return reply, {"sample": sample_of_texts(texts), "texts": len(texts), "chars": sum(map(len, texts))}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path.endswith("/chat/completions"):
            reply, record = chat_reply(body)
            with RECORDER.lock:
                RECORDER.chats.append(record)
        elif self.path.endswith("/embeddings"):
            reply, record = embeddings_reply(body)
            with RECORDER.lock:
                RECORDER.embeddings.append(record)
        else:
            with RECORDER.lock:
                RECORDER.other.append(self.path)
            self.send_error(404)
            return
        payload = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def metrics() -> list[tuple[str, Any]]:
    from ragas.metrics import (
        AnswerCorrectness,
        Faithfulness,
        LLMContextPrecisionWithReference,
        LLMContextRecall,
        ResponseRelevancy,
    )

    return [
        ("faithfulness", Faithfulness),
        ("context_precision", LLMContextPrecisionWithReference),
        ("context_recall", LLMContextRecall),
        ("answer_relevancy", ResponseRelevancy),
        ("answer_correctness", AnswerCorrectness),
    ]


def langchain_models(base_url: str) -> tuple[Any, Any]:
    from langchain_openai import ChatOpenAI, OpenAIEmbeddings

    llm = ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="dummy")  # type: ignore[arg-type]
    embeddings = OpenAIEmbeddings(
        model="text-embedding-3-small",
        base_url=base_url,
        api_key="dummy",  # type: ignore[arg-type]
        check_embedding_ctx_length=False,
    )
    return llm, embeddings


def measure(name: str, metric: Any, llm: Any, embeddings: Any) -> dict[str, Any]:
    """Run evaluate() with `metric` alone on the case and count what the server received."""
    from ragas import EvaluationDataset, evaluate

    RECORDER.clear()
    row: dict[str, Any] = {"metric": name}
    try:
        result = evaluate(
            EvaluationDataset.from_list(SAMPLES),
            metrics=[metric],
            llm=llm,
            embeddings=embeddings,
            show_progress=False,
            raise_exceptions=True,
        )
    except Exception as error:  # a failure of RAGAS itself is a result to report
        return {**row, "error": f"{type(error).__name__}: {error}"}
    scores = [s[metric.name] for s in result.scores]
    chats, embeds = list(RECORDER.chats), list(RECORDER.embeddings)
    keys = [c["key"] for c in chats]
    retries = sum(c["kind"] in ("fix_output", "unknown") or c["assistant_turns"] > 0 for c in chats)
    n = len(SAMPLES)
    return {
        **row,
        "scores": scores,
        "valid": all(isinstance(s, float) and not math.isnan(s) for s in scores),
        "calls": len(chats) / n,
        "n": sorted({c["n"] for c in chats}),
        "embed_calls": len(embeds) / n,
        "prompt_chars": sum(c["prompt_chars"] for c in chats) / n,
        "prompt_tokens": None if not tokens.available() else sum(c["prompt_tokens"] for c in chats) / n,
        "system_chars": sum(c["system_chars"] for c in chats) / n,
        "schema_chars": sum(c["schema_chars"] for c in chats) / n,
        "completion_chars": sum(c["completion_chars"] for c in chats) / n,
        "kinds": sorted({c["kind"] for c in chats}),
        "retries": retries + len(keys) - len(set(keys)),
        "unattributed": sum(c["sample"] is None for c in chats) + sum(e["sample"] is None for e in embeds),
        "other_paths": list(RECORDER.other),
        "per_sample": [
            (
                sum(c["sample"] == i for c in chats),
                sum(e["sample"] == i for e in embeds),
                sum(c["prompt_chars"] for c in chats if c["sample"] == i),
            )
            for i in range(n)
        ],
    }


def run(setup: str, base_url: str) -> list[dict[str, Any]]:
    """Every metric under one set-up. Under `default`, a metric that fails with RAGAS's own
    embeddings is run again with langchain-openai's (the LLM is still RAGAS's default)."""
    llm, embeddings = langchain_models(base_url)
    rows = []
    for name, metric_class in metrics():
        if setup == "langchain":
            rows.append(measure(name, metric_class(), llm, embeddings))
            continue
        row = measure(name, metric_class(), None, None)
        rows.append(row)
        if "error" in row and hasattr(metric_class(), "embeddings"):
            rows.append(measure(f"{name} (lc emb)", metric_class(), None, embeddings))
    return rows


def tokens_column(value: float | None) -> str:
    """Prompt tokens (bench/tokens.py, o200k_base, schema included), or '-' without a tokenizer."""
    return f"{value:>7,.0f}" if value is not None else f"{'-':>7}"


def report(setup: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n== {setup}: per sample (mean of {len(SAMPLES)} samples) ==")
    header = (
        f"{'metric':28} {'chat':>5} {'n':>5} {'embed':>5} {'prompt chars':>12} {'of which sys':>12}"
        f" {'schema':>6} {'tokens':>7} {'compl chars':>11} {'retries':>7}  scores"
    )
    print(header)
    for r in rows:
        if "error" in r:
            print(f"{r['metric']:28} FAILED: {r['error'][:150]}")
            continue
        n = ",".join(map(str, r["n"]))
        scores = " ".join(f"{s:.3f}" for s in r["scores"])
        print(
            f"{r['metric']:28} {r['calls']:>5.1f} {n:>5} {r['embed_calls']:>5.1f} {r['prompt_chars']:>12,.0f}"
            f" {r['system_chars']:>12,.0f} {r['schema_chars']:>6,.0f} {tokens_column(r['prompt_tokens'])}"
            f" {r['completion_chars']:>11,.0f}"
            f" {r['retries']:>7}  {scores}{'' if r['valid'] else '  (NOT VALID: NaN score)'}"
        )
    print("per sample (chat calls, embedding calls, prompt chars):")
    for r in (r for r in rows if "error" not in r):
        detail = "; ".join(f"{c} / {e} / {p:,}" for c, e, p in r["per_sample"])
        extra = f"  unattributed requests: {r['unattributed']}" if r["unattributed"] else ""
        extra += f"  other paths: {r['other_paths']}" if r["other_paths"] else ""
        print(f"  {r['metric']:28} {detail}   prompts: {', '.join(r['kinds'])}{extra}")


def main() -> int:
    warnings.filterwarnings("ignore")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    os.environ["OPENAI_BASE_URL"] = base_url
    versions = ", ".join(f"{p} {version(p)}" for p in ("ragas", "langchain-openai", "openai", "instructor"))
    context_chars = sum(len(c) for c in SAMPLES[0]["retrieved_contexts"])
    print(f"{versions}; case: {len(SAMPLES)} samples, {context_chars} characters of context")
    ok = True
    try:
        for setup in ("langchain", "default"):
            rows = run(setup, base_url)
            report(setup, rows)
            measured = [r for r in rows if "error" not in r]
            ok = ok and all(r["valid"] and r["retries"] == 0 and not r["unattributed"] for r in measured)
            ok = ok and (setup == "default" or len(measured) == len(rows))
    finally:
        server.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
