"""A trace's timeline and durations at every scale, and the trace list's failing-score chips, in
headless Chromium.

The timeline draws each step to scale whatever the trace lasts: a 466 µs trace's root fills the
track and its children start where they started (54 µs and 394 µs in), as in a trace of seconds;
durations and offsets are shown in the unit that suits them (466 µs, +54 µs, 1.25 ms, 3.4 s), never
"0 ms". The chips naming a trace's failed scores stay whole inside their cell at a 1,400 px window
and narrower ones.

Real parts: the service on loopback ports, the OpenTelemetry SDK sending spans with explicit start
and end times (in ns), the deterministic evaluators, the browser.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collector.service import BackgroundService, Service
from semconv import emit
from tests.support.browser import Page, needs_chromium
from tests.support.helpers import fast_assembler, make_config, sdk_tracer_provider, sql, wait_for

pytestmark = needs_chromium

US = 1_000  # ns
MS = 1_000_000
S = 1_000_000_000

# Each trace's spans: (start, end) in ns from the trace's start, by the span name's first word.
TINY = {"rag.request": (0, 466 * US), "retrieval": (54 * US, 380 * US), "chat": (394 * US, 460 * US)}
SLOW = {
    "rag.request": (0, 3_400 * MS),
    "retrieval": (12_500 * US, 13_750 * US),
    "chat": (1_700 * MS, 3_300 * MS),
}
# A request that fails most scores: nothing expected is retrieved, the answer is unrelated.
# Long question and answer, as real ones are: their columns take their widest.
FAILING_QUESTION = "How long does shipping to Norway take, and can I track my parcel once it has left?"
FAILING_ANSWER = "Bananas are yellow and grow in bunches; plantations harvest them twice a year."

# Each timeline row's bar, as fractions of its track: left edge, width, right edge.
BARS = """() => [...document.querySelectorAll('.timeline .row')].map(row => {
    const track = row.querySelector('.track').getBoundingClientRect();
    const bar = row.querySelector('.track .span').getBoundingClientRect();
    return {kind: row.dataset.kind, left: (bar.left - track.left) / track.width,
            width: bar.width / track.width, right: (bar.right - track.left) / track.width,
            text: row.querySelector('.num').innerText};
})"""


class TimedTracer:
    """A tracer whose spans start and end at given times (`semconv.emit` only calls
    `start_as_current_span`): `times` maps a span name's first word to (start, end), in ns from
    `origin`."""

    def __init__(self, tracer: Any, origin: int, times: dict[str, tuple[int, int]]) -> None:
        self._tracer = tracer
        self._origin = origin
        self._times = times

    @contextlib.contextmanager
    def start_as_current_span(self, name: str, **kwargs: Any) -> Iterator[Any]:
        start, end = self._times[name.split()[0]]
        with self._tracer.start_as_current_span(
            name, start_time=self._origin + start, end_on_exit=False, **kwargs
        ) as span:
            yield span
        span.end(end_time=self._origin + end)


def send(tracer: Any, question: str, answer: str, expected: list[str] | None = None) -> str:
    """One RAG request (root, retrieval of one document, chat); returns its trace id."""
    with emit.request(tracer, question) as request:
        if expected:
            request.expected(documents=expected, answer="Shipping to Norway takes 5 to 7 days.")
        with emit.retrieval(tracer, question) as retrieval:
            retrieval.documents([{"id": "doc-a", "content": "Our plants are watered weekly.", "score": 0.4}])
        with emit.chat(tracer, "gpt-test") as chat:
            chat.output(answer, input_tokens=10, output_tokens=5)
        request.answer(answer)
        return format(request.span.get_span_context().trace_id, "032x")


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, dict[str, str]]]:
    """A service holding a trace of 466 µs, one of 3.4 s and one failing many scores."""
    tmp_path: Path = tmp_path_factory.mktemp("timeline-ui")
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as service:
        provider = sdk_tracer_provider(service, "timeline-bot")
        tracer = provider.get_tracer("timeline-test")
        # Whole µs (the store keeps µs), not on a whole ms: 700 µs past one.
        origin = (time.time_ns() // S - 60) * S + 123_700 * US
        ids = {
            "tiny": send(TimedTracer(tracer, origin, TINY), "What is tiny?", "Tiny is small."),
            "slow": send(TimedTracer(tracer, origin + 10 * S, SLOW), "What is slow?", "Slow is long."),
            "failing": send(
                tracer, FAILING_QUESTION, FAILING_ANSWER, expected=["shipping-policy", "norway-rates"]
            ),
        }
        provider.shutdown()
        wait_for(
            lambda: sql(service, "SELECT count(DISTINCT trace_id) AS n FROM scores")[0]["n"],
            lambda n: n == 3,
            timeout=30,
            what="three scored traces",
        )
        yield service, ids


def meta(page: Any, label: str) -> str:
    """The value after `label` in the trace view's header."""
    (item,) = [t for t in page.locator(".meta span").all_inner_texts() if t.startswith(f"{label} ")]
    return str(item[len(label) + 1 :])


def test_a_sub_millisecond_trace_is_drawn_to_scale(traces: tuple[Service, dict[str, str]], tab: Page) -> None:
    service, ids = traces
    page = tab.open(f"{service.http_url}/#/trace/{ids['tiny']}")
    tab.shown(".timeline .row")
    root, retrieval, chat = page.evaluate(BARS)
    assert [root["kind"], retrieval["kind"], chat["kind"]] == ["chain", "retrieval", "llm"]
    # The root is the whole trace: it fills the track.
    assert root["left"] == pytest.approx(0, abs=0.01) and root["width"] == pytest.approx(1, abs=0.01)
    # The children where they started and as long as they lasted, none pinned to an edge.
    assert retrieval["left"] == pytest.approx(54 / 466, abs=0.02)
    assert retrieval["width"] == pytest.approx(326 / 466, abs=0.02)
    assert chat["left"] == pytest.approx(394 / 466, abs=0.02)
    assert chat["width"] == pytest.approx(66 / 466, abs=0.02)
    assert chat["right"] == pytest.approx(460 / 466, abs=0.02) and chat["right"] < 0.995
    # The trace's duration, the steps' offsets from its start and their durations, in µs.
    assert meta(page, "duration") == "466 µs"
    assert root["text"].startswith("+0 ms · 466 µs")
    assert retrieval["text"].startswith("+54 µs · 326 µs")
    assert chat["text"].startswith("+394 µs · 66 µs")
    assert " 0 ms" not in page.inner_text(".timeline")
    tab.screenshot("timeline-microseconds", full_page=False)
    # The trace list says so too.
    page = tab.navigate("#/traces")
    assert page.locator(f"tr[data-trace='{ids['tiny']}'] td.num").first.inner_text() == "466 µs"
    assert tab.problems == []


def test_a_trace_of_seconds_is_drawn_to_scale(traces: tuple[Service, dict[str, str]], tab: Page) -> None:
    service, ids = traces
    page = tab.open(f"{service.http_url}/#/trace/{ids['slow']}")
    tab.shown(".timeline .row")
    root, retrieval, chat = page.evaluate(BARS)
    assert root["left"] == pytest.approx(0, abs=0.01) and root["width"] == pytest.approx(1, abs=0.01)
    # 1.25 ms of 3.4 s: a sliver, still drawn (2 px at least), where it started.
    assert retrieval["left"] == pytest.approx(12.5 / 3400, abs=0.01)
    assert 0 < retrieval["width"] < 0.01
    assert chat["left"] == pytest.approx(1700 / 3400, abs=0.01)
    assert chat["width"] == pytest.approx(1600 / 3400, abs=0.01)
    assert meta(page, "duration") == "3.4 s"
    assert root["text"].startswith("+0 ms · 3.4 s")
    assert retrieval["text"].startswith("+12.5 ms · 1.25 ms")
    assert chat["text"].startswith("+1.7 s · 1.6 s")
    assert tab.problems == []


# A duration in ms, and how it is shown.
DURATIONS = [
    (None, "—"),
    (0, "0 ms"),
    (0.0054, "5.4 µs"),
    (0.054, "54 µs"),
    (0.466, "466 µs"),
    (0.9996, "1 ms"),
    (1.25, "1.25 ms"),
    (12.345, "12.3 ms"),
    (466, "466 ms"),
    (999.7, "1 s"),
    (3400, "3.4 s"),
    (59_400, "59.4 s"),
    (59_990, "1 min 0 s"),
    (125_000, "2 min 5 s"),
    (3_723_000, "1 h 2 min"),
    (-54, "\u221254 ms"),  # a minus sign
]


def test_durations_are_shown_in_the_unit_that_suits_them(
    traces: tuple[Service, dict[str, str]], tab: Page
) -> None:
    service, _ = traces
    page = tab.open(f"{service.http_url}/#/traces")
    shown = page.evaluate("values => values.map(v => fmtMs(v))", [ms for ms, _ in DURATIONS])
    assert shown == [text for _, text in DURATIONS]


# Each failing-score chip of the trace list: its box (left, top, right, bottom), its cell's and its
# table's, whether its text is cut, and the window's width.
CHIPS = """() => [...document.querySelectorAll('#trace-table td.failing .chip')].map(chip => {
    const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
    return {text: chip.innerText, chip: box(chip), cell: box(chip.closest('td')),
            table: box(chip.closest('table')), cut: chip.scrollWidth > chip.clientWidth,
            viewport: document.documentElement.clientWidth};
})"""
# How far the page, and the trace list in its scroll box, run past their width (px).
OVERFLOW = """() => ({page: document.documentElement.scrollWidth - document.documentElement.clientWidth,
    list: (s => s.scrollWidth - s.clientWidth)(document.querySelector('#trace-table').closest('.scroll'))})"""


def inside(inner: list[float], outer: list[float]) -> bool:
    """Whether box `inner` (left, top, right, bottom) lies inside box `outer`, to half a pixel."""
    return all(i >= o - 0.5 for i, o in zip(inner[:2], outer[:2], strict=True)) and all(
        i <= o + 0.5 for i, o in zip(inner[2:], outer[2:], strict=True)
    )


@pytest.mark.parametrize("width", [1400, 1200, 1024, 800])
def test_failing_score_chips_stay_whole_inside_their_cell(
    traces: tuple[Service, dict[str, str]], tab: Page, width: int
) -> None:
    """Down to 1,024 px the list fits the window, its chips wrapping inside their cell; narrower, the
    list scrolls sideways, its chips still whole in their cells."""
    service, ids = traces
    tab.page.set_viewport_size({"width": width, "height": 900})
    page = tab.open(f"{service.http_url}/#/traces")
    failing = page.locator(f"tr[data-trace='{ids['failing']}'] td.failing")
    names = failing.get_attribute("title").split(", ")
    assert len(names) >= 3, names
    # The row's chips name its first failed scores in full, then how many more.
    assert failing.locator(".chip").all_inner_texts() == names[:2]
    more = failing.locator(".muted")
    assert more.inner_text().strip() == f"+{len(names) - 2}"
    # ... on the line of the last chip, not alone on a line of its own.
    last, count = failing.locator(".chip").last.bounding_box(), more.bounding_box()
    assert last["y"] <= count["y"] + count["height"] / 2 <= last["y"] + last["height"]
    chips = page.evaluate(CHIPS)
    assert len(chips) == 2 * 3  # two chips in each row
    for chip in chips:
        assert not chip["cut"], chip
        assert inside(chip["chip"], chip["cell"]), chip
        assert inside(chip["chip"], chip["table"]), chip
    if width >= 1024:
        assert page.evaluate(OVERFLOW) == {"page": 0, "list": 0}
        for chip in chips:
            assert chip["chip"][0] >= 0 and chip["chip"][2] <= chip["viewport"], chip
    assert tab.problems == []
