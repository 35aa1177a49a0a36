"""A local OpenAI-protocol HTTP server for tests: scripted chat replies, deterministic embeddings.

    with OpenAIStub() as stub:
        stub.reply("Refunds within 30 days.", prompt_tokens=812, completion_tokens=64)
        client = openai.OpenAI(base_url=stub.base_url, api_key="test")
        client.chat.completions.create(model="gpt-4o-mini", messages=[...])
        assert stub.requests[0].json["model"] == "gpt-4o-mini"

Faults for judge tests: `delay` (slow replies, timeouts), `status` with `headers` (429 + Retry-After,
500), `finish_reason="length"` (truncated), `refusal`, and any malformed `content`. `max_in_flight`
records the most chat requests answered at once.

Replies come from a FIFO queue (`reply()`), else from `responder(request)` when one is set; with
neither, the server answers 500 so that a test that forgot to script a reply fails loudly instead of
receiving an invented answer. Every request is recorded (`requests`), replies included.

It speaks `POST /v1/chat/completions` (plain JSON, and server-sent events when `"stream": true`,
with a final usage chunk when `stream_options.include_usage` is set), `POST /v1/responses` (the
Responses API, plain JSON only: the same scripted replies, with `content` as an output message,
`tool_calls` as `function_call` items and `output_items` put before them, for hosted tools' items
such as a `file_search_call`) and `POST /v1/embeddings`.
It uses only the standard library so that it starts in milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ChatReply:
    """One scripted model answer, to chat.completions or responses (or an error when `status` is not 200)."""

    content: str | None = ""
    prompt_tokens: int = 10
    completion_tokens: int = 5
    # None: echo the requested model; the real API answers with a dated snapshot name, set it to mimic that.
    model: str | None = None
    finish_reason: str = "stop"
    tool_calls: list[dict[str, Any]] | None = None
    status: int = 200
    error_message: str = "scripted error"
    response_id: str | None = None
    # A raw JSON body to send as is (overrides everything above but `status`).
    raw: dict[str, Any] | None = None
    # Seconds to wait before answering (a slow model, or one that outlasts the client's timeout).
    delay: float = 0.0
    # Extra response headers, e.g. {"Retry-After": "1"} on a 429.
    headers: dict[str, str] = field(default_factory=dict)
    # `message.refusal` (the structured-output refusal field); content is usually None with it.
    refusal: str | None = None
    # Responses API only: output items sent as they are before the reply's function calls and message
    # (a hosted tool's call, e.g. {"type": "file_search_call", "queries": [...], "results": [...]}).
    output_items: list[dict[str, Any]] | None = None


@dataclass
class RecordedRequest:
    """A request the stub received, and what it answered."""

    method: str
    path: str
    headers: dict[str, str]
    json: Any
    reply: ChatReply | None = None
    received_at: float = field(default_factory=time.time)


Responder = Callable[[RecordedRequest], "ChatReply | str"]


def fake_embedding(text: str, dimensions: int = 8) -> list[float]:
    """A deterministic unit-ish vector for `text` (same text, same vector)."""
    digest = hashlib.sha256(text.encode()).digest()
    return [round((digest[i % len(digest)] - 127.5) / 127.5, 6) for i in range(dimensions)]


class OpenAIStub:
    """The server; a context manager that starts it on a free loopback port and stops it."""

    def __init__(self, responder: Responder | None = None, embedding_dimensions: int = 8) -> None:
        self.responder = responder
        self.embedding_dimensions = embedding_dimensions
        self.requests: list[RecordedRequest] = []
        self._queue: deque[ChatReply] = deque()
        self._lock = threading.Lock()
        self._counter = 0
        self._server: ThreadingHTTPServer | None = None
        # Model requests (chat or responses) being answered right now, and the most seen at once
        # (concurrency-limit tests).
        self.in_flight = 0
        self.max_in_flight = 0
        self._thread: threading.Thread | None = None

    # -- scripting -------------------------------------------------------------------------------------

    def reply(self, content: str | ChatReply | None = "", **fields: Any) -> ChatReply:
        """Queue the next chat reply: a text (with ChatReply fields as keywords) or a ChatReply."""
        item = content if isinstance(content, ChatReply) else ChatReply(content=content, **fields)
        with self._lock:
            self._queue.append(item)
        return item

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def responses_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.split("?", 1)[0].endswith("/responses")]

    @property
    def pending(self) -> int:
        """Scripted replies not consumed yet."""
        with self._lock:
            return len(self._queue)

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> OpenAIStub:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return  # keep test output quiet

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                request = RecordedRequest(
                    "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                with stub._lock:
                    stub.requests.append(request)
                path = self.path.split("?", 1)[0]
                if path.endswith(("/chat/completions", "/responses")):
                    with stub._lock:
                        stub.in_flight += 1
                        stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                    try:
                        if path.endswith("/responses"):
                            stub._responses(self, request)
                        else:
                            stub._chat(self, request)
                    except (BrokenPipeError, ConnectionResetError):
                        pass  # the client gave up (a timeout test): nothing to answer
                    finally:
                        with stub._lock:
                            stub.in_flight -= 1
                elif path.endswith("/embeddings"):
                    stub._embeddings(self, request)
                else:
                    stub._send_json(
                        self, 404, {"error": {"message": f"no route {path}", "type": "not_found"}}
                    )

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # A short poll interval: stop() waits up to one interval, and the default 0.5 s adds up over tests.
        server = self._server
        self._thread = threading.Thread(
            target=lambda: server.serve_forever(poll_interval=0.05), name="openai-stub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> OpenAIStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "stub not started"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """The `base_url` for an OpenAI client (includes `/v1`)."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- handlers --------------------------------------------------------------------------------------

    def _next_reply(self, request: RecordedRequest) -> ChatReply | None:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.responder is not None:
            answer = self.responder(request)
            return answer if isinstance(answer, ChatReply) else ChatReply(content=answer)
        return None

    def _scripted(self, handler: BaseHTTPRequestHandler, request: RecordedRequest) -> ChatReply | None:
        """The reply to a model request after its delay, or None once an error has been answered (no
        scripted reply, or a scripted error status)."""
        reply = self._next_reply(request)
        request.reply = reply
        if reply is not None and reply.delay > 0:
            time.sleep(reply.delay)
        if reply is None:
            self._send_json(
                handler, 500, {"error": {"message": "OpenAIStub: no scripted reply", "type": "stub"}}
            )
            return None
        if reply.status != 200:
            self._send_json(
                handler,
                reply.status,
                {"error": {"message": reply.error_message, "type": "stub"}},
                reply.headers,
            )
            return None
        return reply

    def _chat(self, handler: BaseHTTPRequestHandler, request: RecordedRequest) -> None:
        reply = self._scripted(handler, request)
        if reply is None:
            return
        body = request.json if isinstance(request.json, dict) else {}
        model = reply.model or str(body.get("model") or "stub-model")
        with self._lock:
            self._counter += 1
            response_id = reply.response_id or f"chatcmpl-stub{self._counter}"
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._stream(handler, reply, model, response_id, include_usage)
            return
        if reply.raw is not None:
            self._send_json(handler, 200, reply.raw, reply.headers)
            return
        message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": reply.refusal}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        self._send_json(
            handler,
            200,
            {
                "id": response_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}
                ],
                "usage": self._usage(reply),
                "system_fingerprint": "fp_stub",
            },
            reply.headers,
        )

    def _responses(self, handler: BaseHTTPRequestHandler, request: RecordedRequest) -> None:
        """`POST /v1/responses` (non-streaming): the reply as a Response object. Its output is
        `output_items`, then one `function_call` per tool call, then the assistant message (when
        `content` or `refusal` is set); `finish_reason="length"` makes it `incomplete`."""
        body = request.json if isinstance(request.json, dict) else {}
        if body.get("stream"):
            message = "OpenAIStub: streamed responses are not supported"
            self._send_json(handler, 400, {"error": {"message": message, "type": "stub"}})
            return
        reply = self._scripted(handler, request)
        if reply is None:
            return
        if reply.raw is not None:
            self._send_json(handler, 200, reply.raw, reply.headers)
            return
        model = reply.model or str(body.get("model") or "stub-model")
        with self._lock:
            self._counter += 1
            counter = self._counter
        response_id = reply.response_id or f"resp_stub{counter}"
        output: list[dict[str, Any]] = list(reply.output_items or [])
        for call in reply.tool_calls or []:
            function = call.get("function", {})
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_stub{counter}_{len(output)}",
                    "call_id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments", "{}"),
                    "status": "completed",
                }
            )
        parts: list[dict[str, Any]] = []
        if reply.content is not None:
            parts.append({"type": "output_text", "text": reply.content, "annotations": [], "logprobs": []})
        if reply.refusal is not None:
            parts.append({"type": "refusal", "refusal": reply.refusal})
        if parts:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_stub{counter}",
                    "role": "assistant",
                    "status": "completed",
                    "content": parts,
                }
            )
        truncated = reply.finish_reason == "length"
        self._send_json(
            handler,
            200,
            {
                "id": response_id,
                "object": "response",
                "created_at": int(time.time()),
                "status": "incomplete" if truncated else "completed",
                "error": None,
                "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
                "instructions": body.get("instructions"),
                "model": model,
                "output": output,
                "parallel_tool_calls": body.get("parallel_tool_calls", True),
                "tool_choice": body.get("tool_choice", "auto"),
                "tools": body.get("tools", []),
                "temperature": body.get("temperature", 1.0),
                "top_p": body.get("top_p", 1.0),
                "metadata": body.get("metadata") or {},
                "text": body.get("text") or {"format": {"type": "text"}},
                "truncation": body.get("truncation") or "disabled",
                "usage": {
                    "input_tokens": reply.prompt_tokens,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": reply.completion_tokens,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                },
            },
            reply.headers,
        )

    @staticmethod
    def _usage(reply: ChatReply) -> dict[str, int]:
        return {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        }

    def _stream(
        self,
        handler: BaseHTTPRequestHandler,
        reply: ChatReply,
        model: str,
        response_id: str,
        include_usage: bool,
    ) -> None:
        def chunk(delta: dict[str, Any], finish: str | None, usage: dict[str, int] | None = None) -> bytes:
            data: dict[str, Any] = {
                "id": response_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            if usage is not None:
                data["usage"] = usage
            return f"data: {json.dumps(data)}\n\n".encode()

        content = reply.content or ""
        # Three pieces, so that a consumer really has to join deltas.
        step = max(1, len(content) // 3)
        pieces = [content[i : i + step] for i in range(0, len(content), step)] or [""]
        parts = [chunk({"role": "assistant", "content": ""}, None)]
        parts += [chunk({"content": piece}, None) for piece in pieces]
        parts.append(chunk({}, reply.finish_reason))
        if include_usage:
            parts.append(chunk({}, None, self._usage(reply)))
        parts.append(b"data: [DONE]\n\n")
        payload = b"".join(parts)
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def _embeddings(self, handler: BaseHTTPRequestHandler, request: RecordedRequest) -> None:
        body = request.json if isinstance(request.json, dict) else {}
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        # Token-id inputs (lists of ints) are embedded by their repr; the vector only has to be stable.
        texts = [t if isinstance(t, str) else json.dumps(t) for t in texts]
        dims = int(body.get("dimensions") or self.embedding_dimensions)
        tokens = sum(max(1, len(t.split())) for t in texts)
        self._send_json(
            handler,
            200,
            {
                "object": "list",
                "data": [
                    {"object": "embedding", "index": i, "embedding": fake_embedding(t, dims)}
                    for i, t in enumerate(texts)
                ],
                "model": str(body.get("model") or "stub-embedding"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    @staticmethod
    def _send_json(
        handler: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)


_FENCED_INPUT = re.compile(r"<data-(\d+)>\n(.*)\n</data-\1>", re.DOTALL)


def fenced_input(user: str) -> tuple[str, dict[str, Any]]:
    """(the fence token, the inputs) of a ragpulse judge prompt's user message: one JSON object
    inside one fence (evaluators/judge/fence.py). Fails when the message has no such block."""
    found = _FENCED_INPUT.search(user)
    if found is None:
        raise AssertionError(f"no fenced JSON input in {user!r}")
    return found[1], json.loads(found[2])


def passing_verdict(system: str, user: str) -> dict[str, Any]:
    """A valid, passing verdict for any ragpulse judge prompt (told apart by the system prompt's
    wording): two claims or statements, each supported by the first document with its first
    sentence as the quote; every document relevant and useful; the question addressed. Used by
    `bench/judge_cost.py` and as an always-pass judge in calibration tests."""
    if "health check" in system:
        return {"ok": True}
    if "gave the user what they came for" in system:  # conversation_resolved
        return {"needs": [{"need": "what was asked", "met": True, "reason": "answered"}]}
    docs = fenced_input(user)[1].get("documents", [])
    ranks = [doc.get("rank") for doc in docs]
    if "is relevant to the question" in system:
        return {"documents": [{"rank": i, "relevant": True, "reason": "on topic"} for i in ranks]}
    if "useful for arriving" in system:
        return {"documents": [{"rank": i, "useful": True, "reason": "states the answer"} for i in ranks]}
    if "addresses the question" in system:
        part = {"part": "the question", "addressed": True, "reason": "answers it"}
        return {"parts": [part], "noncommittal": False}
    if "Compare the answer with the reference" in system:
        claims = [{"claim": c, "verdict": "supported", "reason": "in the reference"} for c in ("one", "two")]
        if "present:" not in system:
            return {"answer_claims": claims}
        statements = [{"statement": c, "present": True, "reason": "in the answer"} for c in ("one", "two")]
        return {"answer_claims": claims, "reference_statements": statements}
    cited = str(docs[0].get("id", docs[0].get("rank")))
    quote = docs[0]["text"].split(".")[0]
    return {
        "claims": [
            {"claim": c, "verdict": "supported", "doc_id": cited, "quote": quote, "reason": "stated"}
            for c in ("claim one", "claim two")
        ]
    }


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 3}


def _covers(document: str, sentence: str) -> bool:
    words = _words(sentence)
    return bool(words) and len(words & _words(document)) >= 0.8 * len(words)


def lexical_verdict(system: str, user: str) -> dict[str, Any]:
    """A judge that reads: faithfulness claims are the answer's sentences, supported when one document
    holds 80 % of a sentence's words (quoting that document's first sentence), else unsupported. The
    example app's answers are extractive, so its invented sentences fail claim by claim, as with a
    real model. Other prompts (and the health check) pass."""
    if "claims" not in system or "reference" in system.lower():
        return passing_verdict(system, user)
    inputs = fenced_input(user)[1]
    if "answer" not in inputs:
        return passing_verdict(system, user)
    claims = []
    for sentence in re.split(r"(?<=[.!?])\s+", str(inputs["answer"]).strip()):
        if not sentence:
            continue
        support = next((d for d in inputs.get("documents", []) if _covers(d["text"], sentence)), None)
        claims.append(
            {
                "claim": sentence,
                "verdict": "supported",
                "doc_id": str(support.get("id") or support.get("rank")),
                "quote": support["text"].split(".")[0],
                "reason": "stated in the document",
            }
            if support
            else {
                "claim": sentence,
                "verdict": "unsupported",
                "doc_id": None,
                "quote": None,
                "reason": "no document says this",
            }
        )
    return {"claims": claims}


def always_pass(request: RecordedRequest) -> str:
    """A responder (`OpenAIStub(responder=always_pass)`): a valid, passing verdict to every prompt."""
    messages = request.json["messages"]
    return json.dumps(passing_verdict(messages[0]["content"], messages[-1]["content"]))
