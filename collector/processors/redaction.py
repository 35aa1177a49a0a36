"""Redaction of personal data in span text: what the `redaction:` presets and patterns find becomes a
typed placeholder (`bob@example.com` -> `[EMAIL]`), so a question stays readable and nothing of
the value is kept.

Pure: `Redactor.redact(text)` and the walkers over decoded attribute values and OTLP protobuf
messages do no I/O; where redaction runs (before storage, before the judge, before export) is the
callers' business (`redaction.apply_to`). Two engines, each for what it does best: one RE2 search
(google-re2: linear time, any number of alternatives) over all the strings of an export finds the
few that could hold personal data, and Python's `re` runs the presets over those (they need
lookarounds RE2 lacks). Matches that need it are checked before they are replaced (Luhn for cards,
mod 97 for IBANs, `ipaddress` for IP addresses), so ordinary numbers, dates and versions stay as
they are.
"""

from __future__ import annotations

import bisect
import dataclasses
import ipaddress
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import re2
from google.protobuf.message import Message

from semconv.models import EventRecord, SpanRecord

# The presets, in the order they run over a text: keys first (a key may contain a run of digits),
# an IBAN and a card before a phone (all digits), an IP address before a phone (10.0.0.1 is not a
# number to call). Each pattern starts with a character class or a literal, so that `re` skips in C
# to the places a match can begin instead of trying every position; a word boundary before the
# first character is a lookbehind after it (`[0-9](?<!\w.)`) for the same reason.
_NO_WORD_BEFORE = r"(?<!\w.)"
PRESET_PATTERNS: dict[str, str] = {
    "api_key": "|".join(
        (
            r"sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}",
            r"(?:AKIA|ASIA)[0-9A-Z]{16}\b",
            r"gh[pousr]_[A-Za-z0-9]{36,}",
            r"github_pat_[A-Za-z0-9_]{22,}",
            r"glpat-[A-Za-z0-9_-]{20,}",
            r"xox[abposr]-[A-Za-z0-9-]{10,}",
            r"AIza[0-9A-Za-z_-]{35}",
            r"(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",
            r"e(?<![A-Za-z0-9_-]e)yJ[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+",
            r"(?<=Bearer )[A-Za-z0-9._~+/-]{16,}=*",  # the token, not the word
        )
    ),
    # One start per run of local-part characters, runs taken whole (possessive): linear time
    # whatever the text (`aaaa...@!` would otherwise be tried from every `a`). The last label must be
    # letters (`_CHECKS`).
    "email": r"[A-Za-z0-9._%+-](?<![A-Za-z0-9._%+-].)[A-Za-z0-9._%+-]*+@[A-Za-z0-9-]++(?:\.[A-Za-z0-9-]++)++",
    "iban": rf"[A-Z]{_NO_WORD_BEFORE}[A-Z][0-9]{{2}}(?: ?[A-Z0-9]){{11,30}}\b",
    # Not a phone's +354 ..., nor the number after its country code (`+1 475 00 1121 1121`).
    "credit_card": r"[0-9](?<![\w+].)(?<!\+[0-9] .)(?<!\+[0-9]{2} .)(?<!\+[0-9]{3} .)(?:[ -]?[0-9]){12,18}\b",
    "ip_address": rf"[0-9]{_NO_WORD_BEFORE}[0-9]{{0,2}}(?:\.[0-9]{{1,3}}){{3}}(?![\w.])",
    # One leading class for every format, then the format that character starts (a lookbehind).
    "phone": r"[+(0-9]"
    + _NO_WORD_BEFORE
    + "(?:"
    + "|".join(
        (
            r"(?<=\+)[0-9]{1,3}[ .-]?(?:\([0-9]{1,4}\)[ .-]?)?[0-9]{1,4}(?:[ .-]?[0-9]{2,4}){1,4}\b",
            r"(?<=\()[0-9]{3}\) ?[0-9]{3}[ .-][0-9]{4}\b",  # (555) 123-4567
            r"(?<=[0-9])[0-9]{2}[.-][0-9]{3}[.-][0-9]{4}\b",  # 555-123-4567
            r"(?<=0)[0-9]{2,4}[ -][0-9]{3,4}[ -]?[0-9]{3,4}\b",  # 020 7946 0958
            r"(?<=0)[1-9](?:[ .][0-9]{2}){4}\b",  # 06 12 34 56 78
        )
    )
    + ")",
}
PRESETS = tuple(PRESET_PATTERNS)
# IPv6 candidates, run for `ip_address` over text with a `:hex:` in it (hex letters are everywhere
# in prose, so this pattern cannot skip ahead); `ipaddress` decides (10:30:00 is a time).
# A run of hex digits and colons, started where no hex digit or colon comes before it and taken whole
# (possessive: linear time); after a word (`addr:2001:db8::1`) it starts at the colon, which the
# check and the replacement leave in place.
_IPV6 = r"[0-9A-Fa-f:](?<![0-9A-Fa-f:][0-9A-Fa-f:])[0-9A-Fa-f:]*+(?![\w:])"
_HEX_COLON = re.compile(":[0-9A-Fa-f]{0,4}:")
_IPV6_AFTER_COLON = re.compile("[0-9A-Fa-f:]*+")

# What a text must contain somewhere for a preset to find anything in it (RE2 syntax). One RE2 search
# for all of them runs over all the text of an export at once (its strings joined): RE2 scans in
# linear time, whatever the number of alternatives, and most exports hold none of them, so the
# presets' own patterns (Python `re`: they need lookarounds) run only over the few strings flagged.
_API_KEY_TRIGGERS = (
    "sk-",  # OpenAI, Anthropic
    "[srp]k_live_",  # Stripe
    "[srp]k_test_",
    "AKIA",  # AWS access key ids
    "ASIA",
    "gh[pousr]_",  # GitHub
    "github_pat_",
    "glpat-",  # GitLab
    "xox[abposr]-",  # Slack
    "AIza",  # Google
    r"eyJ[A-Za-z0-9_-]+\.eyJ",  # JWTs
    "Bearer ",
)
# 7 characters or more of digits and separators, from a digit to a digit: the shortest card, phone
# (without `+` or `(`) and IPv4 address have that many (`1.1.1.1`); an order number, a date's year or a
# model's version do not.
_DIGIT_RUN = r"[0-9][0-9 .()-]{5,}[0-9]"
_TRIGGERS: dict[str, tuple[str, ...]] = {
    "api_key": _API_KEY_TRIGGERS,
    "email": ("@",),
    "iban": ("[A-Z]{2}[0-9]{2}",),  # country and check digits
    "credit_card": (_DIGIT_RUN,),
    "ip_address": (_DIGIT_RUN, ":[0-9A-Fa-f]{0,4}:"),
    "phone": (_DIGIT_RUN, r"\+[0-9]", r"\([0-9]"),
}
_IBAN_START = re.compile(rb"[A-Z]{2}[0-9]{2}")
# Joins an export's strings for the scan: no trigger matches it, so no match spans two strings.
_SEPARATOR = "\x00"


def placeholder(kind: str) -> str:
    """The text a redacted value of `kind` becomes: `[EMAIL]`, `[ORDER_ID]`."""
    return f"[{kind.upper()}]"


def luhn_valid(digits: str) -> bool:
    """Whether a card number's check digit is right (the Luhn algorithm)."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def card_valid(text: str) -> bool:
    """Whether `text` (digits, spaces, dashes) is a card number: 13 to 19 digits, Luhn-valid."""
    digits = text.replace(" ", "").replace("-", "")
    return 13 <= len(digits) <= 19 and digits.isascii() and digits.isdigit() and luhn_valid(digits)


def iban_valid(text: str) -> bool:
    """Whether `text` is an IBAN: 15 to 34 characters whose check digits are right (ISO 13616: the
    number, rearranged, is 1 modulo 97)."""
    compact = text.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(char, 36)) for char in rearranged)) % 97 == 1


def ip_valid(text: str) -> bool:
    """Whether a candidate is an IPv4 or IPv6 address (`ipaddress` decides)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _ipv6_valid(text: str) -> bool:
    # `::` alone (the unspecified address) names no one, and C++'s `a :: b` is not an address.
    return ":" in text and text.strip(":") != "" and ip_valid(text)


def _email_valid(text: str) -> bool:
    """Whether an email candidate ends in a top-level domain of letters (`a@b.c1` does not)."""
    tld = text.rpartition(".")[2]
    return len(tld) >= 2 and tld.isascii() and tld.isalpha()


# A match is replaced only when its check (if any) passes; otherwise it stays as it was.
_CHECKS: dict[str, Callable[[str], bool]] = {
    "credit_card": card_valid,
    "email": _email_valid,
    "iban": iban_valid,
    "ip_address": ip_valid,
}


@dataclass(frozen=True)
class NamedPattern:
    """A pattern of the user's own (`redaction.patterns`): its name gives the placeholder."""

    name: str
    regex: str


@dataclass(frozen=True)
class _Step:
    """One pattern to replace, with what replaces a match, and the cheap search (if any) that must
    find something in a text before the pattern runs over it."""

    pattern: re.Pattern[str]
    replace: Callable[[re.Match[str]], str]
    gate: re.Pattern[str] | None = None


class Redactor:
    """Replaces every match of the chosen presets and patterns by its placeholder.

    The user's patterns run first (a pattern written for one's own data wins over a preset); the
    presets then run, in `PRESETS` order, over the texts where the RE2 search for their triggers
    finds something (only the presets a found trigger belongs to). `on_match(kind)` is called for
    every replacement, to count them.
    """

    def __init__(
        self,
        presets: Sequence[str],
        patterns: Sequence[NamedPattern] = (),
        on_match: Callable[[str], None] | None = None,
    ) -> None:
        unknown = sorted(set(presets) - set(PRESETS))
        if unknown:
            raise ValueError(f"unknown redaction preset(s) {', '.join(unknown)}; known: {', '.join(PRESETS)}")
        chosen = [name for name in PRESETS if name in presets]
        self._on_match = on_match
        self._always = tuple(_Step(re.compile(p.regex), self._replacement(p.name, None)) for p in patterns)
        self._steps: dict[str, tuple[_Step, ...]] = {
            name: (_Step(re.compile(PRESET_PATTERNS[name]), self._replacement(name, _CHECKS.get(name))),)
            for name in chosen
        }
        if "ip_address" in chosen:
            ipv6 = _Step(re.compile(_IPV6), self._ipv6_replacement(), _HEX_COLON)
            self._steps["ip_address"] += (ipv6,)
        triggers = "|".join(dict.fromkeys(t for name in chosen for t in _TRIGGERS[name]))  # ordered, unique
        self._scan = re2.compile(triggers) if triggers else None
        self._scan_bytes = re2.compile(triggers.encode()) if triggers else None
        widths = [_min_width(p.regex) for p in patterns] + [_min_width(PRESET_PATTERNS[n]) for n in chosen]
        self._shortest = min(widths, default=0)

    def redact(self, text: str) -> str:
        """`text` with every match replaced by its placeholder (the same object when nothing matches)."""
        if len(text) < self._shortest:
            return text
        for step in self._always:
            text = step.pattern.sub(step.replace, text)
        if self._scan is not None and self._scan.search(text) is not None:
            text = self._run_presets(text, self._steps)
        return text

    def _run_presets(self, text: str, names: Iterable[str]) -> str:
        """`text` through the steps of the presets `names` (in `PRESETS` order: `_steps` keeps it)."""
        for name, steps in self._steps.items():
            if name in names:
                for step in steps:
                    if step.gate is None or step.gate.search(text) is not None:
                        text = step.pattern.sub(step.replace, text)
        return text

    def redact_dicts(self, attributes: Iterable[dict[str, Any]]) -> None:
        """Redact, in place, the values of many decoded attribute maps (one export's spans and
        events): one scan over all their strings finds the few that the patterns must see."""
        holders: list[tuple[dict[str, Any], str]] = []
        texts: list[str] = []
        shortest = self._shortest
        for attrs in attributes:
            for key, value in attrs.items():
                if value.__class__ is str:
                    if len(value) >= shortest:
                        holders.append((attrs, key))
                        texts.append(value)
                elif isinstance(value, list | dict):  # nested values are rare: one at a time
                    attrs[key] = self.redact_value(value)
        if not texts:
            return
        if self._always:  # one's own patterns, over each string alone (anchors mean what they say)
            for index, text in enumerate(texts):
                redacted = self._run_patterns(text)
                if redacted != text:
                    attrs, key = holders[index]
                    texts[index] = attrs[key] = redacted
        joined = _SEPARATOR.join(texts)
        for index, names in self._flagged_by_triggers(texts, joined).items():
            attrs, key = holders[index]
            attrs[key] = self._run_presets(texts[index], names)

    def _run_patterns(self, text: str) -> str:
        for step in self._always:
            text = step.pattern.sub(step.replace, text)
        return text

    def _flagged_by_triggers(self, texts: list[str], joined: str) -> dict[int, set[str]]:
        """The texts a trigger is found in, each with the presets its triggers belong to. One RE2
        search tells whether there is anything at all; only then are the matches listed, over the
        UTF-8 bytes (RE2's own form: no conversion per match)."""
        if self._scan is None or self._scan_bytes is None or self._scan.search(joined) is None:
            return {}
        data = joined.encode()
        # ASCII text (the usual case) has its byte offsets at its character offsets.
        starts = _starts(texts) if len(data) == len(joined) else _starts([t.encode() for t in texts])
        flagged: dict[int, set[str]] = {}
        for match in self._scan_bytes.finditer(data):
            index = bisect.bisect_right(starts, match.start()) - 1
            flagged.setdefault(index, set()).update(_presets_of_trigger(match.group()))
        return flagged

    def _replacement(self, kind: str, check: Callable[[str], bool] | None) -> Callable[[re.Match[str]], str]:
        """What `re.sub` calls for a match of `kind`: its placeholder. With a check, the placeholder
        takes the longest part of the match that passes it (a pattern may run on into the next
        group of digits or letters: `4111 1111 1111 1111 12`), and a match with none stays as is."""
        text = placeholder(kind)
        on_match = self._on_match

        def replace(match: re.Match[str]) -> str:
            found = match.group()
            end = len(found) if check is None else _longest_valid(found, check)
            if end is None:
                return found
            if on_match is not None:
                on_match(kind)
            return text + found[end:]

        return replace

    def _ipv6_replacement(self) -> Callable[[re.Match[str]], str]:
        """The IPv6 candidates' replacement: a candidate that starts with one colon after a word
        (`addr:2001:db8::1`) keeps that colon."""
        replace = self._replacement("ip_address", _ipv6_valid)

        def replace_ipv6(match: re.Match[str]) -> str:
            found = match.group()
            if found.startswith(":") and not found.startswith("::"):
                inner = _IPV6_AFTER_COLON.match(found, 1)
                if inner is not None:
                    return ":" + replace(inner)
            return replace(match)

        return replace_ipv6

    def redact_value(self, value: Any) -> Any:
        """A decoded attribute value (str, number, list, dict) with every string in it redacted."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, list):
            return [self.redact_value(item) for item in value]
        if isinstance(value, dict):
            return {key: self.redact_value(item) for key, item in value.items()}
        return value

    def redact_records(self, records: Iterable[SpanRecord]) -> list[SpanRecord]:
        """Copies of mapped-to-be span records with their attribute and event values and status
        message redacted (what `redaction.apply_to: [judge]` gives the judge stage to map)."""
        return [
            dataclasses.replace(
                record,
                attributes=self.redact_value(dict(record.attributes)),
                status_message=record.status_message and self.redact(record.status_message),
                events=[
                    EventRecord(e.name, e.time_us, self.redact_value(dict(e.attributes)))
                    for e in record.events
                ],
            )
            for record in records
        ]

    def redact_attributes(self, attributes: Iterable[Any]) -> None:
        """Redact, in place, the values of an OTLP repeated `KeyValue` field."""
        for kv in attributes:
            self._redact_any_value(kv.value)

    def redact_message(self, message: Message) -> None:
        """Redact, in place, every attribute value, status message and log body of an OTLP export
        request (traces or logs), as `redaction.apply_to: [export]` forwards it."""
        for resource in getattr(message, "resource_spans", ()):
            self.redact_attributes(resource.resource.attributes)
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.redact_attributes(span.attributes)
                    if span.status.message:
                        span.status.message = self.redact(span.status.message)
                    for event in span.events:
                        self.redact_attributes(event.attributes)
                    for link in span.links:
                        self.redact_attributes(link.attributes)
        for resource in getattr(message, "resource_logs", ()):
            self.redact_attributes(resource.resource.attributes)
            for scope in resource.scope_logs:
                for record in scope.log_records:
                    self.redact_attributes(record.attributes)
                    self._redact_any_value(record.body)

    def _redact_any_value(self, value: Any) -> None:
        kind = value.WhichOneof("value")
        if kind == "string_value":
            redacted = self.redact(value.string_value)
            if redacted != value.string_value:
                value.string_value = redacted
        elif kind == "array_value":
            for item in value.array_value.values:
                self._redact_any_value(item)
        elif kind == "kvlist_value":
            self.redact_attributes(value.kvlist_value.values)


def _starts(texts: Sequence[str | bytes]) -> list[int]:
    """Where each text starts in the texts joined with `_SEPARATOR`."""
    return list(itertools.accumulate((len(t) + 1 for t in texts[:-1]), initial=0))


def _presets_of_trigger(found: bytes) -> tuple[str, ...]:
    """The presets a trigger found (the match's bytes) can belong to."""
    first = found[:1]
    if first == b"@":
        return ("email",)
    if first.isdigit():
        return ("credit_card", "ip_address", "phone")
    if first in (b"+", b"("):  # `(8.8.8.8)`: the trigger took `(8`, the rest is too short for a run
        return ("credit_card", "ip_address", "phone")
    if first == b":":
        return ("ip_address",)
    if _IBAN_START.match(found):
        return ("iban",)
    return ("api_key",)


def _longest_valid(found: str, check: Callable[[str], bool]) -> int | None:
    """The end of the longest part of `found` that passes `check`, cut before a space or a dash."""
    ends = [len(found)] + [i for i in range(len(found) - 1, 0, -1) if found[i] in " -"]
    return next((end for end in ends if check(found[:end])), None)


def _min_width(regex: str) -> int:
    """The length of the shortest text `regex` can match (what `re`'s own parser computes)."""
    return int(re._parser.parse(regex).getwidth()[0])  # type: ignore[attr-defined]


def check_pattern(regex: str) -> str:
    """`regex` if Python's `re` compiles it and it cannot match an empty string (every position
    would get a placeholder), else `ValueError` with the reason (for the config)."""
    try:
        re.compile(regex)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    if _min_width(regex) == 0:
        raise ValueError("the pattern can match an empty string (every position would get a placeholder)")
    return regex
