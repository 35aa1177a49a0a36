"""Text helpers for the evaluators (`evaluators.lexical`, `evaluators/metrics/`): words, sentences,
numbers, entities.

Everything here is deterministic, English-only and deliberately simple: a lexical stand-in for
understanding, not understanding. The rules:

- Words: lower-cased runs of letters/digits (`[a-z0-9]`, with inner `'` or `.` kept, so `don't`,
  `e.g` and `3.5` are one word). A hyphen separates words (`30-day` -> `30`, `day`).
- Content words: words that are not in `STOP_WORDS` (a short English list: articles, pronouns,
  auxiliaries, common prepositions and conjunctions) and are not numbers, lightly stemmed by
  `stem` (a few English suffixes: `refunds`/`refunded`/`refunding` -> `refund`). Negations (`no`,
  `not`, `never`, `cannot`) are stop words here, so a lexical check cannot tell "covered" from
  "not covered": that is one of the reasons these evaluators are rough.
- Numbers (`numbers`): every numeric token with its value normalised — thousands separators and
  a currency sign dropped, trailing decimal zeros dropped (`$1,250.00` -> `1250`, `3.50%` -> `3.5`).
  Number words (`five`) are not numbers.
- Sentences (`sentences`): split after `.`, `!` or `?` followed by white space and a capital letter,
  digit, currency sign or opening quote, and at line breaks between lines (bullets); never inside a
  number (`3.5`) and not after a known abbreviation (`e.g.`, `Dr.`, `Inc.`, ...) or a single-letter
  initial (`J. Smith`).
- Entities (`entities`, for `context_entity_recall`): dates (`March 3, 2026`, `3 March 2026`,
  `2026-03-03`, `March 2026`, `March 3`), money (`$25`, `€9.99`), percentages (`3.5%`,
  `3.5 percent`), quantities (a number and a unit word: `30 days`, `48 hours`, `2 pm`; an optional
  `business`/`working`/`calendar` in between is ignored), other numbers, and names: a capitalised
  word that does not start a sentence, or a run of two or more capitalised words anywhere
  (`Acme Corp`; at a sentence start, a leading
  stop word such as `The` or `If` is dropped). Each entity has a `key` that is compared, so
  `March 3, 2026` matches `2026-03-03` and `30 days` matches `30-day`; names compare
  case-insensitively as whole word sequences.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

_STOP = """a about above after again all also am an and any are as at be because been before being both
    but by can cannot could did do does doing don't during each either else for from further had has
    have having he her here hers him his how i if in into is isn't it it's its itself just let me more
    most my myself neither no nor not of off on once only or other our ours ourselves out own please
    same she should so some such than that that's the their theirs them themselves then there these
    they this those through to too until us very was wasn't we were weren't what when where whether
    which while who whom why will with would yes yet you your yours yourself never"""
STOP_WORDS: frozenset[str] = frozenset(_STOP.split())
# Words that carry the *form* of a question, not its topic (used by answer_relevance / context_relevance).
_QUESTION = "how what which when where who whom why many much tell know need want like give show explain"
QUESTION_WORDS: frozenset[str] = frozenset(_QUESTION.split())

_WORD = re.compile(r"[a-z0-9]+(?:['.][a-z0-9]+)*")
_NUMBER_WORD = re.compile(r"[0-9]+(?:\.[0-9]+)?")

_ABBREVIATION_LIST = """mr mrs ms dr prof sr jr st mt vs etc inc ltd co corp dept approx no fig eq vol al
    ca est min max jan feb mar apr jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun
    e.g i.e u.s u.k"""
_ABBREVIATIONS = frozenset(_ABBREVIATION_LIST.split())
# A sentence end: terminal punctuation (plus closing quotes/brackets), white space, and a start.
_BOUNDARY = re.compile(r"([.!?]+)([\"')\]]*)(\s+)(?=[\"'(\[]?[A-Z0-9$€£])")
_LINE_BREAK = re.compile(r"\s*\n\s*(?:[-*•]\s+|\d+[.)]\s+)?")


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Strip a few English suffixes so `refunds`, `refunded` and `refunding` meet (crude on purpose)."""
    if len(word) <= 3 or not word.isalpha():
        return word
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "es" and word[-3] not in "sxzh":  # "prices" -> "price", "boxes" -> "box"
                suffix, keep = "s", ""
            if suffix == "s" and word.endswith("ss"):  # "less", "address"
                break
            word = word[: -len(suffix)] + keep
            break
    if len(word) >= 4 and word[-1] == word[-2] and word[-1] not in "aeiouls":  # shipp -> ship
        word = word[:-1]
    return word


def words(text: str) -> list[str]:
    """Lower-cased words in order (see the module docstring)."""
    return list(_words(text))


@lru_cache(maxsize=8192)
def _words(text: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(text.lower()))


def unicode_words(text: str) -> list[str]:
    """Case-folded runs of Unicode word characters: how a judge's quote is found in a document
    (`evaluators.judge.asking.quote_problem`) and how `ragpulse eval` compares answers (not the
    lexical `words` above: any script, and `don't` is two words)."""
    return re.findall(r"\w+", text.casefold())


def blank(text: str | None) -> bool:
    """Whether a text is absent or only white space (an input the evaluators treat as missing)."""
    return text is None or not text.strip()


def is_number(word: str) -> bool:
    return word[:1].isdigit() and _NUMBER_WORD.fullmatch(word) is not None


# word -> its stem when it is a content word, else "" (a stop word or a number); bounded below.
_CONTENT: dict[str, str] = {}
_CONTENT_LIMIT = 200_000


def _content_form(word: str) -> str:
    form = _CONTENT.get(word)
    if form is None:
        form = "" if word in STOP_WORDS or is_number(word) else stem(word)
        if len(_CONTENT) >= _CONTENT_LIMIT:
            _CONTENT.clear()
        _CONTENT[word] = form
    return form


@lru_cache(maxsize=8192)
def content_words(text: str) -> frozenset[str]:
    """Stemmed content words (no stop words, no numbers) of a text, as a set. Cached by text."""
    return frozenset(content_word_list(text))


@lru_cache(maxsize=8192)
def content_word_list(text: str) -> tuple[str, ...]:
    """Stemmed content words, each once, in order of first occurrence (for evidence). Cached by text."""
    seen: dict[str, None] = {}
    get = _CONTENT.get
    for w in _words(text):
        form = get(w)
        if form is None:
            form = _content_form(w)
        if form:
            seen[form] = None
    return tuple(seen)


# The words of `_WORD`, in any case: `as_written` finds them in the text as it was written.
_WORD_AS_WRITTEN = re.compile(r"[a-z0-9]+(?:['.][a-z0-9]+)*", re.IGNORECASE)


@lru_cache(maxsize=8192)
def _written_forms(text: str) -> dict[str, str]:
    forms: dict[str, str] = {}
    for match in _WORD_AS_WRITTEN.finditer(text):
        written = match.group()
        form = _content_form(written.lower())
        if form and form not in forms:
            forms[form] = written
    return forms


def as_written(stemmed: Sequence[str], text: str) -> list[str]:
    """Stemmed content words (`content_word_list`) as `text` first writes them, case kept: what an
    explanation shows a person ("restocking", not "restock"). A stem the text does not hold stays."""
    if not stemmed:  # a covered sentence: nothing to look up (the scoring hot path)
        return []
    forms = _written_forms(text)
    return [forms.get(word, word) for word in stemmed]


# --------------------------------------------------------------------------- numbers

# A number starts at a non-word character (a currency sign or `-` is fine) and may run into a unit
# (`2pm`, `30kg`); the currency sign is not part of the value.
_NUMBER = re.compile(r"(?<![\w.])([0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(\.[0-9]+)?(?![0-9])")


def normalise_number(integer: str, fraction: str | None) -> str:
    """`1,250` + `.00` -> `1250`; `3` + `.50` -> `3.5`."""
    value = integer.replace(",", "").lstrip("0") or "0"
    if fraction:
        digits = fraction[1:].rstrip("0")
        if digits:
            value = f"{value}.{digits}"
    return value


@lru_cache(maxsize=8192)
def numbers(text: str) -> frozenset[str]:
    """Normalised values of every number in the text (`$25` and `25 days` both give `25`). Cached."""
    return frozenset(normalise_number(m.group(1), m.group(2)) for m in _NUMBER.finditer(text))


@lru_cache(maxsize=8192)
def number_list(text: str) -> tuple[str, ...]:
    """Normalised number values in order of appearance, each once. Cached by text."""
    return tuple(dict.fromkeys(normalise_number(m.group(1), m.group(2)) for m in _NUMBER.finditer(text)))


# --------------------------------------------------------------------------- sentences


def _ends_with_abbreviation(chunk: str) -> bool:
    tail = chunk.rstrip(".!?\"')]").rsplit(None, 1)
    if not tail:
        return False
    last = tail[-1].lstrip("\"'([").lower()
    if last in _ABBREVIATIONS:
        return True
    return len(last) == 1 and last.isalpha()  # an initial: "J. Smith"


def sentences(text: str) -> list[str]:
    """Split a text into sentences (see the module docstring); empty pieces are dropped."""
    return list(_sentences(text))


@lru_cache(maxsize=8192)
def _sentences(text: str) -> tuple[str, ...]:
    out: list[str] = []
    for line in _LINE_BREAK.split(text):
        line = line.strip()
        if not line:
            continue
        start = 0
        for match in _BOUNDARY.finditer(line):
            end = match.end(2)
            piece = line[start:end]
            if match.group(1) == "." and _ends_with_abbreviation(piece):
                continue
            out.append(piece.strip())
            start = match.end()
        rest = line[start:].strip()
        if rest:
            out.append(rest)
    return tuple(s for s in out if s)


# --------------------------------------------------------------------------- entities

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = (
    r"(?P<{g}>January|February|March|April|May|June|July|August|September|October|November|December"
    r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?"
)
_DATE_PATTERNS = (
    # 2026-03-03
    re.compile(r"\b(?P<y>[12][0-9]{3})-(?P<mn>[01]?[0-9])-(?P<d>[0-3]?[0-9])\b"),
    # March 3, 2026 / March 3rd 2026 / March 3
    re.compile(
        _MONTH.format(g="m") + r"\s+(?P<d>[0-3]?[0-9])(?:st|nd|rd|th)?\b(?:,?\s+(?P<y>[12][0-9]{3})\b)?"
    ),
    # 3 March 2026 / 3rd of March
    re.compile(
        r"\b(?P<d>[0-3]?[0-9])(?:st|nd|rd|th)?\s+(?:of\s+)?"
        + _MONTH.format(g="m")
        + r"(?:,?\s+(?P<y>[12][0-9]{3})\b)?"
    ),
    # March 2026
    re.compile(_MONTH.format(g="m") + r",?\s+(?P<y>[12][0-9]{3})\b"),
)
_MONEY = re.compile(
    r"(?P<cur>[$€£])\s?(?P<i>[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?P<f>\.[0-9]+)?(?:\s?(?P<scale>k|m|bn|million|billion|thousand)\b)?",
    re.IGNORECASE,
)
_PERCENT = re.compile(r"(?<![\w.])(?P<i>[0-9]+)(?P<f>\.[0-9]+)?\s?(?:%|percent\b|per cent\b)", re.IGNORECASE)
_UNITS = {
    "second": "second",
    "minute": "minute",
    "min": "minute",
    "hour": "hour",
    "hr": "hour",
    "day": "day",
    "week": "week",
    "month": "month",
    "year": "year",
    "yr": "year",
    "am": "am",
    "pm": "pm",
    "a.m": "am",
    "p.m": "pm",
    "kg": "kg",
    "g": "g",
    "lb": "lb",
    "km": "km",
    "mile": "mile",
    "cm": "cm",
    "mm": "mm",
    "m": "m",
    "gb": "gb",
    "tb": "tb",
    "mb": "mb",
    "item": "item",
    "order": "order",
    "country": "country",
    "point": "point",
    "store": "store",
    "degree": "degree",
}
_QUANTITY = re.compile(
    r"(?<![\w.$€£])(?P<i>[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?P<f>\.[0-9]+)?(?:\s|-)"
    r"(?:(?:business|working|calendar)\s)?(?P<unit>[a-z]+(?:\.[a-z])?)\b\.?",
    re.IGNORECASE,
)
_CAPITALISED = re.compile(r"[A-Z][A-Za-z0-9&'\u2019.-]*[A-Za-z0-9]|[A-Z]")
_NAME_JOINERS = frozenset({"of", "&", "de", "la", "van", "von", "der", "du"})
_NOT_NAMES = frozenset({"I", "I'm", "I've", "I'll", "I'd", "OK"})
_TOKEN = re.compile(r"\S+")
_DIGIT = re.compile(r"[0-9]")  # every numeric pattern needs one: a text without is skipped


@dataclass(frozen=True, slots=True)
class Entity:
    """A name, number or date found in a text: `text` as written, `kind`, and the comparison `key`."""

    text: str
    kind: str  # date | money | percent | quantity | number | name
    key: str


def _unit(word: str) -> str | None:
    word = word.lower().rstrip(".")
    if word in _UNITS:
        return _UNITS[word]
    singular = word[:-1] if word.endswith("s") else word
    if singular in _UNITS and len(singular) > 2:
        return _UNITS[singular]
    if word.endswith("ies") and word[:-3] + "y" in _UNITS:
        return _UNITS[word[:-3] + "y"]
    return None


def _numeric_entities(text: str) -> tuple[list[tuple[int, int, Entity]], list[tuple[int, int]]]:
    """(entities with spans, spans taken) for dates, money, percentages, quantities, bare numbers."""
    found: list[tuple[int, int, Entity]] = []
    taken: list[tuple[int, int]] = []
    if _DIGIT.search(text) is None:
        return found, taken

    def free(start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e in taken)

    def add(start: int, end: int, entity: Entity) -> None:
        found.append((start, end, entity))
        taken.append((start, end))

    for pattern in _DATE_PATTERNS:
        for m in pattern.finditer(text):
            if not free(m.start(), m.end()):
                continue
            groups = m.groupdict()
            month = int(groups["mn"]) if groups.get("mn") else _MONTHS[groups["m"].lower().rstrip(".")]
            day = int(groups["d"]) if groups.get("d") else None
            year = groups.get("y")
            if not 1 <= month <= 12 or (day is not None and not 1 <= day <= 31):
                continue
            if groups.get("m") == "May" and day is None and year is None:
                continue
            key = f"{year or '-'}-{month:02d}" + (f"-{day:02d}" if day is not None else "")
            add(m.start(), m.end(), Entity(m.group(0).rstrip(".,"), "date", f"date:{key}"))
    for m in _MONEY.finditer(text):
        if free(m.start(), m.end()):
            scale = (m.group("scale") or "").lower()
            value = normalise_number(m.group("i"), m.group("f"))
            key = f"money:{m.group('cur')}{value}{scale[:1] if scale else ''}"
            add(m.start(), m.end(), Entity(m.group(0), "money", key))
    for m in _PERCENT.finditer(text):
        if free(m.start(), m.end()):
            add(
                m.start(),
                m.end(),
                Entity(m.group(0), "percent", f"percent:{normalise_number(m.group('i'), m.group('f'))}"),
            )
    for m in _QUANTITY.finditer(text):
        unit = _unit(m.group("unit"))
        if unit is None or not free(m.start(), m.end("unit")):
            continue
        value = normalise_number(m.group("i"), m.group("f"))
        add(
            m.start(),
            m.end("unit"),
            Entity(text[m.start() : m.end("unit")], "quantity", f"quantity:{value} {unit}"),
        )
    for m in _NUMBER.finditer(text):
        if free(m.start(), m.end()):
            value = normalise_number(m.group(1), m.group(2))
            add(m.start(), m.end(), Entity(m.group(0).strip(), "number", f"number:{value}"))
    return found, taken


def _name_entities(text: str, taken: list[tuple[int, int]]) -> list[tuple[int, int, Entity]]:
    found: list[tuple[int, int, Entity]] = []
    offset = 0
    for sentence in sentences(text):
        base = text.find(sentence, offset)
        if base < 0:
            base = offset
        offset = base + len(sentence)
        tokens = [(m.start() + base, m.end() + base, m.group(0)) for m in _TOKEN.finditer(sentence)]
        i = 0
        while i < len(tokens):
            run: list[tuple[int, int, str]] = []
            j = i
            while j < len(tokens):
                start, end, raw = tokens[j]
                word = raw.strip("\"'()[]{}:;,!?\u201c\u201d\u2018\u2019")
                word = word[:-1] if word.endswith(".") and not word[:-1].count(".") else word
                if not word:
                    break
                # Cheap tests first: most words are lower case, and few overlap a number or date.
                capital = (
                    "A" <= word[0] <= "Z"
                    and word not in _NOT_NAMES
                    and _CAPITALISED.fullmatch(word) is not None
                )
                if (
                    capital
                    and not any(not (end <= s or start >= e) for s, e in taken)
                    and (word.lower() not in _MONTHS or j > i)
                ):
                    run.append((start, end, word))
                    j += 1
                    abbreviation = word.lower() in _ABBREVIATIONS or len(word) == 1
                    if raw[-1:] in ",;:!?)" or (raw.endswith(".") and word == raw[:-1] and not abbreviation):
                        break  # punctuation ends a name (not the period of "Dr." or "J.")
                    continue
                if run and word.lower() in _NAME_JOINERS and j + 1 < len(tokens):
                    nxt = tokens[j + 1][2].strip("\"'()[]{}:;,.!?")
                    if _CAPITALISED.fullmatch(nxt):
                        run.append((start, end, word))
                        j += 1
                        continue
                break
            if run:
                names = [w for *_, w in run]
                at_start = i == 0
                if at_start and len(names) > 1 and names[0].lower() in STOP_WORDS:
                    names, run = names[1:], run[1:]
                    at_start = False
                while names and names[-1].lower() in _NAME_JOINERS:
                    names, run = names[:-1], run[:-1]
                if len(names) >= 2 or (names and not at_start):
                    phrase = " ".join(names)
                    key = "name:" + " ".join(words(phrase))
                    found.append((run[0][0], run[-1][1], Entity(phrase, "name", key)))
                i = j if j > i else i + 1
            else:
                i += 1
    return found


@lru_cache(maxsize=8192)
def entities(text: str) -> tuple[Entity, ...]:
    """Names, numbers and dates of a text, in order of appearance, each key once. Cached by text."""
    numeric, taken = _numeric_entities(text)
    named = _name_entities(text, taken)
    ordered = sorted(numeric + named, key=lambda item: item[0])
    seen: set[str] = set()
    out: list[Entity] = []
    for _, _, entity in ordered:
        if entity.key not in seen:
            seen.add(entity.key)
            out.append(entity)
    return tuple(out)


def entity_from_text(text: str) -> Entity:
    """An explicitly listed entity (`entities:` option): parsed as a number/date when it is one
    whole, else a name compared case-insensitively as a word sequence."""
    parsed = [e for e in entities(text) if e.text.strip() == text.strip()]
    if parsed:
        return parsed[0]
    return Entity(text, "name", "name:" + " ".join(words(text)))


@dataclass(frozen=True, slots=True)
class EntityIndex:
    """What a document offers for entity matching: its entity keys, number values and word sequence."""

    keys: frozenset[str]
    values: frozenset[str]
    padded_words: str  # " w1 w2 ... " for whole-word phrase search


@lru_cache(maxsize=8192)
def entity_index(text: str) -> EntityIndex:
    found = entities(text)
    values = frozenset(e.key.split(":", 1)[1].split(" ")[0].lstrip("$€£") for e in found if e.kind != "name")
    return EntityIndex(frozenset(e.key for e in found), values | numbers(text), f" {' '.join(words(text))} ")


def entity_in(entity: Entity, index: EntityIndex) -> bool:
    """Whether a document (its `EntityIndex`) contains the entity.

    Names: the words appear in sequence (case-insensitive). Dates: the same date key, or a
    full date's day and month when the document omits the year. Money, percent, quantity: the same
    key. A bare number: the same value anywhere in the document, in any form.
    """
    if entity.kind == "name":
        phrase = entity.key.split(":", 1)[1]
        return bool(phrase) and f" {phrase} " in index.padded_words
    if entity.key in index.keys:
        return True
    if entity.kind == "number":
        return entity.key.split(":", 1)[1] in index.values
    if entity.kind == "date":
        body = entity.key[len("date:") :]
        if body.startswith("--"):  # "March 3" matches "March 3, 2026"
            return any(k.startswith("date:") and k.endswith(body[1:]) for k in index.keys)
        _, _, month_day = body.partition("-")
        return month_day.count("-") == 1 and f"date:--{month_day}" in index.keys
    return False
