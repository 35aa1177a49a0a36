"""A small RAG app over HTTP, for the probe tests: a threaded `http.server` on a loopback port,
instrumented with the OpenTelemetry SDK (BatchSpanProcessor, OTLP/gRPC exporter to the test's
ragpulse), answering questions from a five-document knowledge base.

`POST /api/ask` with `{"question": ...}` answers `{"answer": ...}`. It takes the incoming trace
context and baggage with the W3C propagators (`traceparent`, `baggage`), as any instrumented server
does, and copies the baggage onto its server span (what a baggage span processor does). Its spans
are ragpulse's own convention (`semconv.emit`): a server span with the question and answer, a
retrieval with its ranked documents, an LLM call.

`mode` switches its behaviour at run time:
- `healthy`: retrieves the documents whose keywords the question names;
- `degraded`: retrieves the wrong ones (the least related);
- `drop_context`: ignores the incoming traceparent and baggage: a new trace, whose root still has
  `rag.question`;
- `no_traces`: answers, but exports nothing.

`POST /api/fail` always answers 500. Every request's path, headers and body are kept in `requests`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from opentelemetry import baggage, context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from semconv import emit

Mode = Literal["healthy", "degraded", "drop_context", "no_traces"]


@dataclass(frozen=True)
class Document:
    id: str
    keywords: tuple[str, ...]
    content: str


KNOWLEDGE_BASE = (
    Document("returns-policy", ("return", "refund"), "Items can be returned within 30 days for a refund."),
    Document("shipping-times", ("shipping", "deliver"), "Standard shipping takes 3 to 5 business days."),
    Document("warranty", ("warranty", "defect"), "Electronics carry a two-year warranty against defects."),
    Document("gift-cards", ("gift card", "voucher"), "Gift cards never expire and work online and in store."),
    Document("store-hours", ("open", "hours"), "Our stores are open from 9 am to 8 pm, Monday to Saturday."),
)
TOP_K = 2
# The propagators an instrumented server uses (OpenTelemetry's default: W3C trace context + baggage).
PROPAGATOR = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])


def retrieve(question: str, mode: Mode) -> list[Document]:
    """The TOP_K documents for a question: the most related (by keywords named), or in `degraded`
    mode the least related."""
    text = question.lower()

    def related(doc: Document) -> int:
        return sum(keyword in text for keyword in doc.keywords)

    ranked = sorted(KNOWLEDGE_BASE, key=lambda d: (-related(d), d.id))
    return list(reversed(ranked))[:TOP_K] if mode == "degraded" else ranked[:TOP_K]


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any


class ProbeApp:
    """The app on a loopback port; `with ProbeApp(endpoint) as app:` serves until the block ends."""

    def __init__(self, otlp_endpoint: str, service_name: str = "shop-bot", mode: Mode = "healthy") -> None:
        self.mode: Mode = mode
        self.requests: list[Received] = []
        self._provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        exporter = OTLPSpanExporter(endpoint=otlp_endpoint, insecure=True, timeout=10)
        self._provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
        self._tracer = self._provider.get_tracer("probe-test-app")
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="probe-app", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"{self.base_url}/api/ask"

    def __enter__(self) -> ProbeApp:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._provider.shutdown()

    def answer(self, question: str, headers: Mapping[str, str]) -> str:
        """Answer one question, with spans as the mode says."""
        mode = self.mode
        documents = retrieve(question, mode)
        answer = documents[0].content
        if mode == "no_traces":
            return answer
        incoming = context.Context() if mode == "drop_context" else PROPAGATOR.extract(dict(headers))
        attributes = {str(k): str(v) for k, v in baggage.get_all(incoming).items()}
        token = context.attach(incoming)
        try:
            tracer = self._tracer
            with emit.request(tracer, question, name="POST /api/ask", attributes=attributes) as request:
                with emit.retrieval(tracer, question, data_source="kb", top_k=TOP_K) as step:
                    step.documents(
                        [
                            {"id": d.id, "score": round(1.0 - 0.1 * rank, 2), "content": d.content}
                            for rank, d in enumerate(documents)
                        ]
                    )
                with emit.chat(tracer, model="shop-llm", provider="test") as chat:
                    chat.messages([{"role": "user", "content": question}], system="Answer from the context.")
                    chat.output(answer, input_tokens=60, output_tokens=12)
                request.answer(answer)
        finally:
            context.detach(token)
        return answer

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        app = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                headers = {k.lower(): v for k, v in self.headers.items()}
                app.requests.append(Received(self.path, headers, body))
                if self.path.startswith("/api/fail"):
                    self._reply(500, {"error": "the model is down"})
                    return
                question = body.get("question") if isinstance(body, dict) else None
                if not isinstance(question, str) or not self.path.startswith("/api/ask"):
                    self._reply(400, {"error": "POST /api/ask with {question}"})
                    return
                self._reply(200, {"answer": app.answer(question, headers)})

            def _reply(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler
