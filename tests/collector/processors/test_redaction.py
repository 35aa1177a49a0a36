"""PII redaction (`redaction:`): the presets and patterns on their own (property tests: every generated
email, Luhn-valid card, IBAN, phone, IP address and API key becomes its placeholder; text without
any stays byte for byte), then end to end through a real service: nothing generated survives into
the store, the judge's requests (as the test judge server saw them) or what a downstream OTLP/gRPC
backend receives (forwarded spans and evaluation events)."""

from __future__ import annotations

import json
import secrets
import string
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.sdk.trace.id_generator import IdGenerator

from collector.config import ConfigError, load_config
from collector.processors.redaction import (
    PRESETS,
    NamedPattern,
    Redactor,
    card_valid,
    iban_valid,
    ip_valid,
    luhn_valid,
)
from collector.service import BackgroundService, Service
from evaluators.registry import JUDGE_NAMES
from tests.support.helpers import (
    DEFAULT_SCORE_NAMES,
    emit_rag_request,
    fast_assembler,
    logs_request,
    make_config,
    metric,
    post_otlp,
    sdk_tracer_provider,
    sql,
    wait_for,
)
from tests.support.openai_stub import OpenAIStub

# ------------------------------------------------------------------------------------- generators

DIGITS = string.digits
LOWER = string.ascii_lowercase


def _digits(n: int) -> st.SearchStrategy[str]:
    return st.text(DIGITS, min_size=n, max_size=n)


@st.composite
def emails(draw: st.DrawFn) -> str:
    local = draw(st.text(LOWER + DIGITS + "._%+-", min_size=1, max_size=12))
    labels = draw(st.lists(st.text(LOWER + DIGITS, min_size=1, max_size=10), min_size=1, max_size=3))
    tld = draw(st.text(LOWER, min_size=2, max_size=6))
    return f"{draw(st.sampled_from(LOWER))}{local}@{'.'.join(labels)}.{tld}"


def _luhn_complete(body: str) -> str:
    """`body` with the check digit that makes it Luhn-valid."""
    return next(body + d for d in DIGITS if luhn_valid(body + d))


@st.composite
def card_numbers(draw: st.DrawFn) -> str:
    length = draw(st.integers(13, 19))
    number = _luhn_complete(draw(st.sampled_from("3456")) + draw(_digits(length - 2)))
    separator = draw(st.sampled_from(["", " ", "-"]))
    if not separator:
        return number
    return separator.join(number[i : i + 4] for i in range(0, len(number), 4))


@st.composite
def ibans(draw: st.DrawFn) -> str:
    country = draw(st.text(string.ascii_uppercase, min_size=2, max_size=2))
    bban = draw(st.text(string.ascii_uppercase + DIGITS, min_size=11, max_size=30))
    numeric = int("".join(str(int(c, 36)) for c in bban + country + "00"))
    iban = f"{country}{98 - numeric % 97:02d}{bban}"
    assert iban_valid(iban)
    if draw(st.booleans()):
        return iban
    return " ".join(iban[i : i + 4] for i in range(0, len(iban), 4))


@st.composite
def phones(draw: st.DrawFn) -> str:
    """The formats docs/security.md lists."""
    form = draw(st.sampled_from(["international", "us-parens", "us-dashes", "trunk", "fr"]))
    if form == "international":
        groups = draw(st.lists(st.integers(2, 4).flatmap(_digits), min_size=2, max_size=3))
        sep = draw(st.sampled_from([" ", "-", "."]))
        area = draw(st.integers(1, 4).flatmap(_digits))
        return f"+{draw(st.integers(1, 999))} {area}{sep}{sep.join(groups)}"
    if form == "us-parens":
        return f"({draw(_digits(3))}) {draw(_digits(3))}-{draw(_digits(4))}"
    if form == "us-dashes":
        sep = draw(st.sampled_from(["-", "."]))
        return f"{draw(_digits(3))}{sep}{draw(_digits(3))}{sep}{draw(_digits(4))}"
    if form == "trunk":
        return f"0{draw(st.integers(2, 4).flatmap(_digits))} {draw(_digits(4))} {draw(_digits(4))}"
    return "0" + draw(st.sampled_from("123456789")) + "".join(f" {draw(_digits(2))}" for _ in range(4))


api_keys = st.one_of(
    st.text(string.ascii_letters + DIGITS, min_size=32, max_size=48).map(lambda s: "sk-proj-" + s),
    st.text(string.ascii_uppercase + DIGITS, min_size=16, max_size=16).map(lambda s: "AKIA" + s),
    st.text(string.ascii_letters + DIGITS, min_size=36, max_size=40).map(lambda s: "ghp_" + s),
    st.text(string.ascii_letters + DIGITS, min_size=24, max_size=32).map(lambda s: "sk_live_" + s),
)
# `::` alone (the unspecified address) is left as it is: it names no one.
ip_addresses = st.ip_addresses().map(str).filter(lambda address: address != "::")

PII = {
    "email": emails(),
    "credit_card": card_numbers(),
    "iban": ibans(),
    "phone": phones(),
    "ip_address": ip_addresses,
    "api_key": api_keys,
}
any_pii = st.sampled_from(sorted(PII)).flatmap(lambda kind: PII[kind].map(lambda value: (kind, value)))

# Prose around a value: lower-case words and punctuation, kept apart from the value by a space.
prose = st.text(LOWER + " ,.;!?'\"()", max_size=40)
_PRESETS = Redactor(PRESETS)


# ------------------------------------------------------------------------------------- the presets


@settings(max_examples=400, deadline=None)
@given(kind_value=any_pii, before=prose, after=prose)
# A phone whose number after the country code is a Luhn-valid card number (hypothesis found it).
@example(kind_value=("phone", "+1 475 00 1121 1121"), before="", after="")
# One whose number after the country code is an IPv4 address (hypothesis found it too).
@example(kind_value=("phone", "+1 0.10.10.10"), before="", after="")
def test_every_generated_value_becomes_its_placeholder(
    kind_value: tuple[str, str], before: str, after: str
) -> None:
    kind, value = kind_value
    redacted = _PRESETS.redact(f"{before} {value} {after}")
    assert value not in redacted
    assert _has_placeholder(kind, value, redacted, " ")
    assert redacted.startswith(before) and redacted.endswith(after)


def _has_placeholder(kind: str, value: str, text: str, around: str = "") -> bool:
    """Whether `text` has the placeholder of `value`, a value of `kind`. A number can be two things
    at once (`00000 0000 0000` is a phone and a Luhn-valid card; the number after a phone's country
    code can be a dotted quad): then it may have the other's placeholder."""

    def has(name: str) -> bool:
        return f"{around}[{name}]{around}" in text

    return (
        has(kind.upper())
        or (card_valid(value) and has("CREDIT_CARD"))
        or (kind == "phone" and ip_valid(value.partition(" ")[2]) and has("IP_ADDRESS"))
    )


@settings(max_examples=200, deadline=None)
@given(values=st.lists(any_pii, min_size=2, max_size=6), glue=st.lists(prose, min_size=7, max_size=7))
def test_several_values_in_one_text_are_all_redacted(values: list[tuple[str, str]], glue: list[str]) -> None:
    text = glue[0] + "".join(f" {value} {glue[i + 1]}" for i, (_, value) in enumerate(values))
    redacted = _PRESETS.redact(text)
    for _, value in values:
        assert value not in redacted


attribute_values = st.one_of(
    any_pii.map(lambda kind_value: kind_value[1]),
    prose,
    st.integers(),
    st.lists(st.one_of(any_pii.map(lambda kind_value: kind_value[1]), prose), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(
    maps=st.lists(
        st.dictionaries(st.sampled_from(["a", "b", "input.value", "c"]), attribute_values), max_size=8
    ),
    glue=prose,
)
def test_one_scan_over_an_export_redacts_as_value_by_value_would(
    maps: list[dict[str, Any]], glue: str
) -> None:
    """`redact_dicts` (the decoder's one scan over all of an export's strings, joined) flags every
    string that `redact` alone would change: the same result, value by value."""
    maps = [{key: f"{glue} {v} {glue}" if isinstance(v, str) else v for key, v in m.items()} for m in maps]
    expected = [{key: _PRESETS.redact_value(v) for key, v in m.items()} for m in maps]
    _PRESETS.redact_dicts(maps)
    assert maps == expected


words = st.text(LOWER, min_size=1, max_size=12)
benign_numbers = st.one_of(
    st.integers(0, 9999).map(str),  # quantities, years
    st.dates().map(lambda d: d.isoformat()),  # 2024-01-15
    st.times().map(lambda t: t.strftime("%H:%M:%S")),  # 10:30:00
    st.lists(st.integers(0, 99), min_size=3, max_size=3).map(lambda v: "v" + ".".join(map(str, v))),
    st.tuples(st.integers(0, 9999), st.integers(0, 99)).map(lambda v: f"${v[0]}.{v[1]:02d}"),  # prices
    st.integers(0, 100).map(lambda n: f"{n}%"),
)


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(st.tuples(words, benign_numbers), max_size=12), tail=prose)
def test_text_without_personal_data_is_unchanged(tokens: list[tuple[str, str]], tail: str) -> None:
    text = " ".join(f"{word} {number}" for word, number in tokens) + " " + tail
    assert _PRESETS.redact(text) is text or _PRESETS.redact(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("card 4111 1111 1111 1111 12 ok", "card [CREDIT_CARD] 12 ok"),  # the next digits are not part
        ("pay to GB82 WEST 1234 5698 7654 32 TODAY", "pay to [IBAN] TODAY"),
        ("4111 1111 1111 1112 is no card", "4111 1111 1111 1112 is no card"),  # Luhn fails
        ("GB83 WEST 1234 5698 7654 32", "GB83 WEST 1234 5698 7654 32"),  # check digits wrong
        ("Authorization: Bearer abcdefghijklmnopqrstuvwx", "Authorization: Bearer [API_KEY]"),
        ("meet at 10:30:00 on 2024-01-15", "meet at 10:30:00 on 2024-01-15"),
        ("write to bob@example.com or call +44 20 7946 0958", "write to [EMAIL] or call [PHONE]"),
        ("from 10.0.0.1 and fe80::1", "from [IP_ADDRESS] and [IP_ADDRESS]"),
    ],
)
def test_edges(text: str, expected: str) -> None:
    assert _PRESETS.redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "a:" * 20_000 + "g",  # a long run of hex digits and colons that is no address
        "a" * 40_000 + "@!",  # a long local part with no domain
        "eyJ" * 13_000 + ".eyJ",
        "x@y." * 10_000 + "!",
        "1." * 20_000,
    ],
)
def test_adversarial_text_takes_linear_time(text: str) -> None:
    """Span text is untrusted: no preset may backtrack its way into seconds (the decoder runs on the
    receivers' event loop). Measured well under 0.1 s each; the bound leaves room for a slow machine
    while a quadratic pattern (seconds at this size) fails it."""
    started = time.perf_counter()
    _PRESETS.redact(text)
    _PRESETS.redact_dicts([{"k": text}])
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("addr:2001:db8::1", "addr:[IP_ADDRESS]"),  # an address right after a word and a colon
        ("(8.8.8.8)", "([IP_ADDRESS])"),  # the `(` trigger also flags the digit presets
        ("key pk_live_abcdefghijklmnop1234", "key [API_KEY]"),
        ("mac 00:1a:2b:3c:4d:5e", "mac 00:1a:2b:3c:4d:5e"),
        ("a@b.c1", "a@b.c1"),  # no top-level domain of letters
    ],
)
def test_found_in_review(text: str, expected: str) -> None:
    assert _PRESETS.redact(text) == expected
    maps = [{"k": text}]
    _PRESETS.redact_dicts(maps)
    assert maps == [{"k": expected}]


def test_patterns_of_ones_own_run_first_and_name_the_placeholder() -> None:
    counted: list[str] = []
    redactor = Redactor(["email"], [NamedPattern("order_id", "ORD-[0-9]{8}")], on_match=counted.append)
    assert redactor.redact("order ORD-12345678 for a@b.io") == "order [ORDER_ID] for [EMAIL]"
    assert redactor.redact("ORD-1234") == "ORD-1234"
    assert counted == ["order_id", "email"]
    # In one export's scan too, and a match never joins two values.
    maps = [{"q": "ORD-1234", "r": "5678 and ORD-87654321"}, {"s": "mail a@b.io", "t": "ORD-"}]
    redactor.redact_dicts(maps)
    assert maps == [{"q": "ORD-1234", "r": "5678 and [ORDER_ID]"}, {"s": "mail [EMAIL]", "t": "ORD-"}]
    # A pattern that changes a string's length leaves the presets looking at the right strings,
    # and anchors mean the start and end of each string.
    long_ids = Redactor(["email"], [NamedPattern("order_id", r"ORD-\d{20}"), NamedPattern("pin", r"^\d{6}$")])
    maps = [{"a": "ORD-" + "1" * 20}, {"b": "bob@example.com"}, {"c": "z" * 50}, {"d": "123456"}]
    long_ids.redact_dicts(maps)
    assert maps == [{"a": "[ORDER_ID]"}, {"b": "[EMAIL]"}, {"c": "z" * 50}, {"d": "[PIN]"}]
    # Each pattern is compiled on its own: a leading inline flag applies to it alone.
    assert (
        Redactor([], [NamedPattern("order_id", r"(?i)ord-[0-9]{8}")]).redact("ord-12345678") == "[ORDER_ID]"
    )
    only_patterns = Redactor([], [NamedPattern("ticket", "T#[0-9]+")])
    assert only_patterns.redact("see T#42, mail a@b.io") == "see [TICKET], mail a@b.io"


@pytest.mark.parametrize(
    ("redaction", "message"),
    [
        ({"presets": ["email", "passport"]}, "redaction.presets.1: Input should be 'email'"),
        (
            {"patterns": [{"name": "x", "regex": "ORD-[0-9"}]},
            "redaction.patterns.0.regex: Value error, not a valid",
        ),
        (
            {"patterns": [{"name": "x", "regex": "a*"}]},
            "redaction.patterns.0.regex: Value error, the pattern can match an empty",
        ),
        (
            {"patterns": [{"name": "x", "regex": r"\b"}]},
            "redaction.patterns.0.regex: Value error, the pattern can",
        ),
        (
            {"patterns": [{"name": "Order Id", "regex": "x"}]},
            "redaction.patterns.0.name: String should match",
        ),
        ({"apply_to": ["storage", "logs"]}, "redaction.apply_to.1: Input should be"),
    ],
)
def test_bad_redaction_config_names_the_key(redaction: dict[str, Any], message: str, tmp_path: Path) -> None:
    path = tmp_path / "ragpulse.yaml"
    path.write_text(json.dumps({"redaction": redaction}))
    with pytest.raises(ConfigError) as error:
        load_config(path, environ={})
    assert message in str(error.value)


# ------------------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def redacting(
    tmp_path_factory: pytest.TempPathFactory, judge: OpenAIStub, downstream: Service
) -> Iterator[Service]:
    config = make_config(
        tmp_path_factory.mktemp("redacting"),
        assembler=fast_assembler(),
        judge={"base_url": judge.base_url, "model": "judge-test", "api_key": "test", "max_retries": 0},
        sampling={"judge_rate": 1.0},
        scoring={"judge_poll_interval": 0.1},
        exporters={
            "otlp": {"endpoint": f"127.0.0.1:{downstream.grpc_port}"},
            "forward_spans": True,
            "export_interval": 0.1,
        },
        redaction={"presets": list(PRESETS), "patterns": [{"name": "order_id", "regex": "ORD-[0-9]{8}"}]},
    )
    with BackgroundService(config) as svc:
        yield svc


# The default set's scores that the judge gives, once a judge is configured.
JUDGE_SCORES = DEFAULT_SCORE_NAMES.intersection(JUDGE_NAMES)


class _UniqueIds(IdGenerator):
    """Ids from the OS. The SDK's own draw from `random`, which Hypothesis seeds alike for every
    example: each example's trace would have the ids of the first, and a span sent again with the
    same ids is the first one's copy (`spans` shows the first)."""

    def generate_span_id(self) -> int:
        return secrets.randbits(64) or 1

    def generate_trace_id(self) -> int:
        return secrets.randbits(128) or 1


def send_rag_trace(svc: Service, question: str, document: str, answer: str) -> str:
    """One RAG request through the real SDK; its trace id."""
    provider = sdk_tracer_provider(svc, "shop-bot")
    provider.id_generator = _UniqueIds()  # read by the tracers it makes from now on
    trace_id = emit_rag_request(provider.get_tracer("test-app"), question, document, answer)
    provider.shutdown()
    return trace_id


def stored_text(svc: Service, trace_id: str) -> str:
    """Every row of every per-trace table for `trace_id`, as one JSON text."""
    tables = ["spans", "span_events", "traces", "steps", "documents", "scores"]
    return json.dumps(
        {t: sql(svc, f"SELECT * FROM {t} WHERE trace_id = '{trace_id}'") for t in tables}, default=str
    )


def wait_judged(svc: Service, trace_id: str, marker: str) -> None:
    """Wait for the whole trace judged: its root stored (the question holds `marker`; the SDK ends the
    root last, so an assembly before it arrived is redone), every judge score in, the work done."""
    wait_for(
        lambda: sql(
            svc,
            "SELECT t.question, t.judge_status, count(s.name) AS judged FROM traces t "
            "LEFT JOIN scores s ON s.trace_id = t.trace_id AND s.evaluator = 'judge' "
            f"WHERE t.trace_id = '{trace_id}' GROUP BY ALL",
        ),
        lambda rows: (
            bool(rows)
            and marker in (rows[0]["question"] or "")
            and rows[0]["judge_status"] == "done"
            and rows[0]["judged"] == len(JUDGE_SCORES)
        ),
        timeout=30,
        what="the trace judged",
    )


def judge_text(judge: OpenAIStub, marker: str) -> str:
    """The judge requests that carried `marker` (one trace's), as one JSON text."""
    return "\n".join(json.dumps(r.json) for r in judge.chat_requests if marker in json.dumps(r.json))


@settings(
    max_examples=8,
    deadline=None,
    # An example costs a trace judged and exported (about a second): no shrinking, the failing
    # example is reported as generated.
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(values=st.lists(any_pii, min_size=3, max_size=6), marker=st.uuids().map(lambda u: u.hex[:12]))
def test_nothing_generated_reaches_the_store_the_judge_or_the_downstream(
    redacting: Service, judge: OpenAIStub, downstream: Service, values: list[tuple[str, str]], marker: str
) -> None:
    pii = [value for _, value in values]
    question = f"Case {marker}: what did {pii[0]} order? ORD-12345678"
    document = "Customer record: " + " ; ".join(pii) + " ."
    answer = f"They contacted us from {pii[-1]} about ORD-12345678."
    trace_id = send_rag_trace(redacting, question, document, answer)

    wait_judged(redacting, trace_id, marker)
    downstream_text = wait_for(
        lambda: stored_text(downstream, trace_id),
        lambda text: "gen_ai.evaluation.result" in text and "faithfulness" in text,
        timeout=30,
        what="forwarded spans and evaluation events downstream",
    )
    seen = {
        "store": stored_text(redacting, trace_id),
        "judge": judge_text(judge, marker),
        "downstream": downstream_text,
    }
    for where, text in seen.items():
        assert marker in text, f"{where}: the trace's text did not arrive"
        assert "[ORDER_ID]" in text and "ORD-12345678" not in text, where
        for kind, value in values:
            assert json.dumps(value)[1:-1] not in text, f"{kind} {value!r} reached the {where}"
            assert _has_placeholder(kind, value, text), f"{where}: no [{kind.upper()}]"


def test_log_bodies_and_status_messages_are_redacted_before_storage(redacting: Service) -> None:
    trace_id, span_id = bytes.fromhex("ab" * 16), bytes.fromhex("cd" * 8)
    record = LogRecord(
        time_unix_nano=time.time_ns(),
        trace_id=trace_id,
        span_id=span_id,
        event_name="gen_ai.user.message",
        body=AnyValue(string_value="I am jane.doe@example.org, card 4111 1111 1111 1111"),
    )
    response = post_otlp(
        redacting, logs_request(record).SerializeToString(), "application/x-protobuf", signal="logs"
    )
    assert response.status_code == 200
    (row,) = sql(redacting, f"SELECT attributes FROM span_events WHERE trace_id = '{trace_id.hex()}'")
    assert row["attributes"]["body"] == "I am [EMAIL], card [CREDIT_CARD]"
    assert metric(redacting, "ragpulse_redactions_total", kind="email", stage="storage") >= 1
    assert metric(redacting, "ragpulse_redactions_total", kind="email", stage="judge") >= 0


def test_judge_only_redaction_keeps_the_store_as_sent(tmp_path: Path, judge: OpenAIStub) -> None:
    config = make_config(
        tmp_path,
        assembler=fast_assembler(),
        judge={"base_url": judge.base_url, "model": "judge-test", "api_key": "test", "max_retries": 0},
        sampling={"judge_rate": 1.0},
        scoring={"judge_poll_interval": 0.1},
        redaction={"presets": ["email"], "apply_to": ["judge"]},
    )
    with BackgroundService(config) as svc:
        marker = "judge-only-" + str(time.time_ns())
        trace_id = send_rag_trace(
            svc, f"{marker} who is bob@example.com?", "bob@example.com is a customer", "Bob."
        )
        wait_judged(svc, trace_id, marker)
        stored = stored_text(svc, trace_id)
        judged = judge_text(judge, marker)
        assert metric(svc, "ragpulse_redactions_total", kind="email", stage="judge") >= 2
    assert "bob@example.com" in stored
    assert judged and "bob@example.com" not in judged and "[EMAIL]" in judged


def test_export_only_redaction_keeps_the_store_and_cleans_what_goes_downstream(
    tmp_path: Path, downstream: Service
) -> None:
    config = make_config(
        tmp_path,
        assembler=fast_assembler(),
        exporters={
            "otlp": {"endpoint": f"127.0.0.1:{downstream.grpc_port}"},
            "forward_spans": True,
            "export_interval": 0.1,
        },
        redaction={"presets": ["email"], "apply_to": ["export"]},
    )
    with BackgroundService(config) as svc:
        marker = "export-only-" + str(time.time_ns())
        # The citation scorer quotes what it could not resolve, so the email is in its explanation
        # too: the evaluation event carries it unless export redacts it.
        trace_id = send_rag_trace(
            svc, f"{marker} who is bob@example.com?", "A customer.", "See [bob@example.com]."
        )
        downstream_text = wait_for(
            lambda: stored_text(downstream, trace_id),
            lambda text: text.count("gen_ai.evaluation.result") >= 5 and marker in text,
            timeout=30,
            what="forwarded spans and evaluation events downstream",
        )
        stored = stored_text(svc, trace_id)
        exported = metric(svc, "ragpulse_redactions_total", kind="email", stage="export")
        (citation,) = sql(
            svc, f"SELECT explanation FROM scores WHERE trace_id = '{trace_id}' AND name = 'citation'"
        )
    assert "bob@example.com" in citation["explanation"]
    assert "bob@example.com" in stored
    assert "bob@example.com" not in downstream_text and "[EMAIL]" in downstream_text
    assert exported >= 3
