"""The judge client: structured verdicts from any OpenAI-compatible endpoint, failing closed.

`JudgeClient(settings).judge(messages, Schema)` sends one chat completion asking for JSON that
matches the pydantic model `Schema` and returns a `JudgeResult` with either `parsed` (a validated
`Schema` instance) or `error` (a reason code in `error_kind` and a sentence in `error`) — never both,
never a made-up verdict.

Design choices (docs/scores.md, "The judge", describes the resulting behaviour):

- **Synchronous `openai.OpenAI` plus threads, not `AsyncOpenAI`.** Scoring runs in the assembler
  thread, in worker processes and in the `ragpulse eval` CLI; a sync client works in all of them
  without owning an event loop (an `AsyncOpenAI` client and an `asyncio.Semaphore` are bound to the
  loop they first run on, which breaks the moment two callers use different loops). The sync client's
  httpx pool is thread-safe, the concurrency limit is a `threading.BoundedSemaphore`, `judge_many`
  fans out on a thread pool of `max_concurrency`, and async callers can use `asyncio.to_thread`.
  With at most `max_concurrency` (default 16) calls in flight, threads cost nothing that matters.
- **Our own retries** (the `openai` client's are switched off) so that the attempt count, the wait
  and the cap are ours and recorded: retried are timeouts, connection errors, 408/409/429 and 5xx,
  at most `max_retries` times, waiting `Retry-After` / `retry-after-ms` when the server sends one
  (capped at `backoff_max`), else exponential backoff with jitter.
- **Bad output** (malformed JSON, JSON violating the schema, an empty reply, output truncated by
  `finish_reason: length`) is re-sampled at most `output_retries` times (default 1: one fresh try,
  as a glitch is possible but a systematic failure should not cost many calls), then it is an error.
  **A refusal** (`message.refusal`, `finish_reason: content_filter`) is final at once: asking again
  gets the same answer. Other 4xx errors (auth, bad model name) are final at once too.
- **Structured output**: `response_format` `json_schema` (strict) derived from the pydantic model;
  when the server rejects it (a 400 mentioning `response_format` / `json_schema`), the client switches
  to JSON mode (`{"type": "json_object"}`) with the schema spelled out in a system message, and
  remembers that for the rest of its life. Either way the reply is parsed with `json.loads` and
  validated with pydantic: data only, never evaluated.
- **Caller's check**: `judge(..., check=fn)` runs `fn(parsed)` on a verdict that matched the schema;
  a reason string rejects it (`error_kind` `bad_verdict`). The check runs before the verdict is cached
  and again on every cache hit, so a verdict the caller cannot use is never cached, and one cached
  before (by a caller without the check, or an older version) is a miss: the judge is asked again.
  It is not re-sampled within the call: the output budget is for replies that do not parse, and a
  judge that systematically returns unusable verdicts then costs one call per evaluation.
- **Cache**: a verdict is reused when model, temperature, prompt version, messages and schema are
  the same (sha256). The per-call fence token is replaced by a placeholder before hashing
  (`fence_token=`), or no fenced prompt would ever hit. Only successes (that pass the check) are
  cached, so a transient failure is tried again next time. `VerdictStore` makes it persistent (e.g. a
  DuckDB table).
- **Tokens** are summed from `usage` over every attempt that returned one (they were all paid for);
  a cache hit costs 0. `latency_ms` is the wall time of the whole `judge()` call, waits included.
- **Timeout** is httpx's per-operation timeout (connect, read, write): a server silent for longer than
  `timeout` fails the attempt. A server that trickles bytes slowly is not cut off at exactly `timeout`.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import os
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar
from urllib.parse import urlparse

import openai
from pydantic import BaseModel, ConfigDict, ValidationError

from ..parallel import map_in_order
from .examples import FewShot
from .settings import JudgeSettings
from .wire_schema import strict_json_schema

T = TypeVar("T", bound=BaseModel)

Message = Mapping[str, str]

FENCE_PLACEHOLDER = "FENCE"

# Reason codes in `JudgeResult.error_kind` (they become the error score's `label`).
ErrorKind = Literal[
    "timeout",
    "connection",
    "http_error",
    "retries_exhausted",
    "malformed_json",
    "schema_violation",
    "truncated",
    "refusal",
    "empty_reply",
    "bad_response",
    "bad_verdict",  # the caller's check rejected a verdict that matched the schema
]

_RETRYABLE_STATUS = {408, 409, 429}

# A caller's check of a parsed verdict: None when usable, else why not (see `JudgeClient.judge`).
VerdictCheck = Callable[[T], str | None]


@dataclass
class JudgeResult(Generic[T]):
    """One judge call's outcome: `parsed` xor `error`."""

    parsed: T | None
    error: str | None
    error_kind: ErrorKind | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    attempts: int = 0
    raw: str | None = None  # the last reply's content (or error body), for the explanation and debugging
    cached: bool = False
    response_format: str | None = None  # json_schema | json_object, as used by the last attempt
    response_model: str | None = None  # the model name the server answered with

    @property
    def ok(self) -> bool:
        return self.parsed is not None and self.error is None


class VerdictStore(Protocol):
    """A persistent verdict cache: JSON-able dicts by sha256 key. Must be thread-safe."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: dict[str, Any]) -> None: ...


class JudgeCheckError(RuntimeError):
    """The pre-run check failed: the judge cannot be trusted to answer (message says why)."""


class _Ping(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ok: bool


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _retry_after(response: Any) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms`, `Retry-After` seconds or HTTP date)."""
    if response is None:
        return None
    headers = response.headers
    try:
        if "retry-after-ms" in headers:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None  # an unreadable header: fall back to our own backoff


def _strip_code_fence(text: str) -> str:
    # JSON-mode servers sometimes wrap the object in ```json ... ```; unwrapping is still data only.
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```"):
        stripped = stripped[3:-3]
        if stripped.lower().startswith("json"):
            stripped = stripped[4:]
    return stripped.strip()


class _Attempt(Exception):
    """Internal: one attempt failed with `kind`; `retry` says which budget may retry it."""

    def __init__(self, kind: ErrorKind, message: str, retry: Literal["transport", "output", "no"]) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry = retry
        self.wait: float | None = None
        self.rate_limited = False  # a 429: the server's request rate or token budget is spent


class JudgeClient:
    """A fail-closed judge on an OpenAI-compatible chat-completions endpoint (see module docstring)."""

    def __init__(
        self,
        settings: JudgeSettings,
        *,
        store: VerdictStore | None = None,
        sleep: Callable[[float], None] = time.sleep,
        examples: Mapping[str, FewShot] | None = None,
    ) -> None:
        if not settings.model:
            raise ValueError("judge.model is not set: the judge needs a model name")
        self.settings = settings
        self.model: str = settings.model
        self.store = store
        # Score name -> few-shot examples its calls carry (`judge.examples`, evaluators/judge/examples.py).
        self.examples: dict[str, FewShot] = dict(examples or {})
        self._sleep = sleep
        api_key = (
            settings.api_key.get_secret_value() if settings.api_key else os.environ.get("OPENAI_API_KEY")
        )
        # The openai package refuses to start without a key; local servers ignore it, and a real
        # endpoint answers 401, which `check()` reports.
        self._client = openai.OpenAI(
            base_url=settings.base_url,
            api_key=api_key or "no-key",
            timeout=settings.timeout,
            max_retries=0,
        )
        self._semaphore = threading.BoundedSemaphore(settings.max_concurrency)
        self._json_schema_ok = settings.response_format != "json_object"
        self._cache: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._cache_lock = threading.Lock()
        # Told of every 429 with the seconds waited before the retry (0 when none follows): the
        # service counts them in /metrics (`ragpulse_judge_rate_limited`).
        self.on_rate_limited: Callable[[float], None] | None = None

    # -- identity recorded with each score ----------------------------------------------------------

    @property
    def base_url(self) -> str:
        return str(self._client.base_url)

    @property
    def provider(self) -> str:
        """`openai`, `azure`, or the endpoint's host:port (a vLLM / Ollama / llama.cpp server)."""
        parsed = urlparse(self.base_url)
        host = parsed.hostname or ""
        if host == "api.openai.com":
            return "openai"
        if host.endswith(".openai.azure.com") or host.endswith(".azure.com"):
            return "azure"
        return f"{host}:{parsed.port}" if parsed.port else host

    @property
    def config_hash(self) -> str:
        """sha256 (16 hex) of the settings that can change a verdict.

        Timeouts, retries, concurrency and the cache size change how verdicts are obtained, not what
        they are, so tuning them does not make old scores incomparable.
        """
        material = {
            "base_url": self.base_url.rstrip("/"),
            "model": self.model,
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
            "response_format": self.settings.response_format,
        }
        return hashlib.sha256(_canonical(material).encode()).hexdigest()[:16]

    @property
    def uses_json_schema(self) -> bool:
        """False once the server has rejected json_schema (or when JSON mode was configured)."""
        return self._json_schema_ok

    def score_fields(self, result: JudgeResult[Any], prompt_version: str) -> dict[str, Any]:
        """The judge fields of a `Score` (docs/scores.md, "Provenance") for `result`."""
        return {
            "provider": self.provider,
            "model": self.model,
            "temperature": self.settings.temperature,
            "prompt_version": prompt_version,
            "config_hash": self.config_hash,
            "judge_input_tokens": result.input_tokens,
            "judge_output_tokens": result.output_tokens,
            "latency_ms": result.latency_ms,
        }

    # -- cache --------------------------------------------------------------------------------------

    def cache_key(
        self,
        messages: Sequence[Message],
        schema: type[BaseModel],
        *,
        prompt_version: str,
        fence_token: str | None = None,
    ) -> str:
        """sha256 over model, temperature, prompt version, messages (fence token masked) and schema."""
        text = _canonical([dict(m) for m in messages])
        if fence_token:
            text = text.replace(fence_token, FENCE_PLACEHOLDER)
        material = {
            "model": self.model,
            "temperature": self.settings.temperature,
            "prompt_version": prompt_version,
            "messages": text,
            "schema": [schema.__name__, schema.model_json_schema()],
        }
        return hashlib.sha256(_canonical(material).encode()).hexdigest()

    def _cache_get(self, key: str) -> dict[str, Any] | None:
        with self._cache_lock:
            entry = self._cache.get(key)
            if entry is not None:
                self._cache.move_to_end(key)
                return entry
        if self.store is not None:
            return self.store.get(key)
        return None

    def _cache_drop(self, key: str) -> None:
        # Memory only: a store entry that fails the check stays a miss until a usable verdict
        # replaces it (the store protocol has no delete, and the replacement is an upsert).
        with self._cache_lock:
            self._cache.pop(key, None)

    def _cache_put(self, key: str, entry: dict[str, Any]) -> None:
        if self.settings.cache_size:
            with self._cache_lock:
                self._cache[key] = entry
                self._cache.move_to_end(key)
                while len(self._cache) > self.settings.cache_size:
                    self._cache.popitem(last=False)
        if self.store is not None:
            self.store.put(key, entry)

    # -- calls --------------------------------------------------------------------------------------

    def judge(
        self,
        messages: Sequence[Message],
        schema: type[T],
        *,
        prompt_version: str = "unversioned",
        fence_token: str | None = None,
        use_cache: bool = True,
        check: VerdictCheck[T] | None = None,
    ) -> JudgeResult[T]:
        """Ask for one `schema` verdict; never raises for judge failures (they come back in `error`).

        `check(parsed)` returns None for a usable verdict, else why it is not: then the result is an
        `error` `bad_verdict` and nothing is cached (see the module docstring)."""
        started = time.monotonic()
        key = self.cache_key(messages, schema, prompt_version=prompt_version, fence_token=fence_token)
        if use_cache:
            hit = self._from_cache(key, schema, started, check)
            if hit is not None:
                return hit

        result: JudgeResult[T] = JudgeResult(parsed=None, error=None)
        transport_left = self.settings.max_retries
        output_left = self.settings.output_retries
        backoff = self.settings.backoff_initial
        while True:
            result.attempts += 1
            try:
                result.parsed = self._attempt(messages, schema, result)
                result.error = result.error_kind = None
                break
            except _Attempt as failure:
                result.error, result.error_kind = str(failure), failure.kind
                if failure.retry == "transport" and transport_left > 0:
                    transport_left -= 1
                elif failure.retry == "output" and output_left > 0:
                    output_left -= 1
                    continue  # a re-sample, no wait: the server answered fine
                else:
                    if failure.rate_limited and self.on_rate_limited is not None:
                        self.on_rate_limited(0.0)  # no retry left: nothing waited
                    if failure.retry == "transport" and self.settings.max_retries > 0:
                        result.error = f"gave up after {result.attempts} attempts: {failure}"
                        result.error_kind = (
                            failure.kind if failure.kind in ("timeout", "connection") else "retries_exhausted"
                        )
                    break
                if failure.wait is not None:
                    wait = min(failure.wait, self.settings.backoff_max)
                else:
                    # "Equal jitter": at least half the backoff, so waits still grow; spread avoids herds.
                    wait = min(backoff, self.settings.backoff_max) * (0.5 + random.random() / 2)
                    backoff *= 2
                if failure.rate_limited and self.on_rate_limited is not None:
                    self.on_rate_limited(wait)
                self._sleep(wait)

        result.latency_ms = (time.monotonic() - started) * 1000
        problem = check(result.parsed) if result.parsed is not None and check is not None else None
        if problem is not None:
            # Rejected before caching: a cached verdict would give the same error on every later run
            # (and to every caller sharing the key) without asking the judge again.
            result.parsed, result.error, result.error_kind = None, problem, "bad_verdict"
        if result.parsed is not None:
            result.error = result.error_kind = None
            if use_cache:
                self._cache_put(
                    key,
                    {
                        "parsed": result.parsed.model_dump(mode="json"),
                        "raw": result.raw,
                        "response_model": result.response_model,
                    },
                )
        return result

    def judge_many(
        self,
        calls: Sequence[tuple[Sequence[Message], type[T]]],
        *,
        prompt_version: str = "unversioned",
    ) -> list[JudgeResult[T]]:
        """Run several `judge` calls at once (at most `max_concurrency` in flight), results in order."""
        return map_in_order(
            lambda call: self.judge(call[0], call[1], prompt_version=prompt_version),
            calls,
            self.settings.max_concurrency,
            name="judge",
        )

    def check(self) -> JudgeResult[_Ping]:
        """The pre-run check: one tiny structured request that must parse, else `JudgeCheckError`.

        It also settles json_schema support, so the first real verdicts do not pay for the fallback.
        """
        messages = [
            {"role": "system", "content": "You are a health check. Reply with a JSON object only."},
            {"role": "user", "content": 'Reply with the JSON object {"ok": true}.'},
        ]
        result = self.judge(messages, _Ping, prompt_version="check", use_cache=False)
        if result.parsed is None or not result.parsed.ok:
            reason = result.error or f"the judge answered {result.raw!r} instead of ok: true"
            raise JudgeCheckError(
                f"judge pre-run check failed ({self.provider}, model {self.model}, {self.base_url}): {reason}"
            )
        return result

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> JudgeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------------

    def _from_cache(
        self, key: str, schema: type[T], started: float, check: VerdictCheck[T] | None
    ) -> JudgeResult[T] | None:
        entry = self._cache_get(key)
        if entry is None:
            return None
        try:
            parsed = schema.model_validate(entry.get("parsed"))
        except ValidationError:
            return None  # a stale or corrupt store entry is a miss, never a verdict
        if check is not None and check(parsed) is not None:
            self._cache_drop(key)
            return None  # cached without the check (or before it existed): ask the judge again
        return JudgeResult(
            parsed=parsed,
            error=None,
            latency_ms=(time.monotonic() - started) * 1000,
            raw=entry.get("raw"),
            cached=True,
            response_model=entry.get("response_model"),
        )

    def _request(self, messages: Sequence[Message], schema: type[BaseModel]) -> tuple[list[Any], Any]:
        if self._json_schema_ok:
            response_format: Any = {
                "type": "json_schema",
                "json_schema": {
                    "name": schema.__name__,
                    "schema": strict_json_schema(schema),
                    "strict": True,
                },
            }
            return [dict(m) for m in messages], response_format
        # JSON mode gives no shape, so the schema is spelled out; OpenAI also insists the word "JSON"
        # appears in the messages when json_object is used.
        hint = (
            "Reply with a single JSON object (no prose, no code fence) that matches this JSON schema:\n"
            + json.dumps(schema.model_json_schema(), separators=(",", ":"))
        )
        return [*(dict(m) for m in messages), {"role": "system", "content": hint}], {"type": "json_object"}

    def _attempt(self, messages: Sequence[Message], schema: type[T], result: JudgeResult[T]) -> T:
        payload, response_format = self._request(messages, schema)
        result.response_format = response_format["type"]
        extra: dict[str, Any] = {}
        if self.settings.max_tokens is not None:
            extra["max_tokens"] = self.settings.max_tokens
        try:
            with self._semaphore:
                completion = self._client.chat.completions.create(
                    model=self.model,
                    messages=payload,
                    temperature=self.settings.temperature,
                    response_format=response_format,
                    **extra,
                )
        except openai.APITimeoutError as exc:
            raise _Attempt("timeout", f"no reply within {self.settings.timeout}s", "transport") from exc
        except openai.APIConnectionError as exc:
            raise _Attempt("connection", f"cannot reach the judge: {exc}", "transport") from exc
        except openai.APIStatusError as exc:
            result.raw = exc.response.text
            message = f"HTTP {exc.status_code}: {exc.message}"
            lowered = str(exc.message).lower()
            if (
                exc.status_code == 400
                and self._json_schema_ok
                and self.settings.response_format == "auto"
                and ("response_format" in lowered or "json_schema" in lowered)
            ):
                # Remembered for the life of the client: every later call goes straight to JSON mode.
                self._json_schema_ok = False
                result.attempts += 1  # attempts count HTTP requests, the rejected probe included
                return self._attempt(messages, schema, result)
            if exc.status_code in _RETRYABLE_STATUS or exc.status_code >= 500:
                failure = _Attempt("http_error", message, "transport")
                failure.wait = _retry_after(exc.response)
                failure.rate_limited = exc.status_code == 429
                raise failure from exc
            raise _Attempt("http_error", message, "no") from exc

        # The openai package builds responses without validating them, so a server answering 200 with
        # an odd body gives odd attribute types here: read every field defensively.
        try:
            usage = completion.usage
            if usage is not None:
                result.input_tokens += int(usage.prompt_tokens or 0)
                result.output_tokens += int(usage.completion_tokens or 0)
            result.response_model = completion.model
            if not completion.choices:
                raise _Attempt("empty_reply", "the judge returned no choices", "output")
            choice = completion.choices[0]
            content = choice.message.content
            refusal = getattr(choice.message, "refusal", None)
            finish_reason = choice.finish_reason
        except (AttributeError, TypeError, ValueError, IndexError, KeyError) as exc:
            raise _Attempt("bad_response", f"unreadable chat completion: {exc!r}", "output") from exc
        if content is not None and not isinstance(content, str):
            raise _Attempt("bad_response", "the reply content is not a string", "output")
        result.raw = content
        if refusal or finish_reason == "content_filter":
            raise _Attempt("refusal", f"the judge refused: {refusal or 'content filter'}", "no")
        if finish_reason == "length":
            raise _Attempt("truncated", "the judge's reply was cut off (finish_reason length)", "output")
        if not content or not content.strip():
            raise _Attempt("empty_reply", "the judge's reply was empty", "output")
        try:
            data = json.loads(_strip_code_fence(content))
        except ValueError as exc:
            raise _Attempt("malformed_json", f"the judge's reply is not JSON: {exc}", "output") from exc
        if not isinstance(data, dict):
            raise _Attempt("schema_violation", "the judge's reply is not a JSON object", "output")
        try:
            return schema.model_validate(data)
        except ValidationError as exc:
            errors = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}"
                for err in exc.errors()[:5]
            )
            raise _Attempt(
                "schema_violation", f"the judge's reply violates {schema.__name__}: {errors}", "output"
            ) from exc
