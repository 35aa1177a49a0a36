"""The completeness state machine on its own (a fake clock, no store): whatever the order in which
the spans and events of several traces arrive, however they are cut into batches, wherever the
process restarts, each set of arrivals is assembled exactly once.

The test plays the assembler around `Completeness`: a round takes a batch in, asks the store (a
dict) about root-less idle traces, and assembles the ready traces, counting their assemblies as
`Claims` does. A restart recovers the traces in flight from the store (reason `recovery`) and starts
a fresh state machine, which remembers the store's assembly counts or, as after a real restart,
nothing (then it learns them from the store's answers)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from collector.processors.assembly.completeness import Arrivals, Completeness, Ready
from collector.processors.config import AssemblerConfig

DECISION_WAIT = 1.0
MAX_WAIT = 4.0
# Clock steps between rounds: exact in binary, so that waits end exactly on a round too.
STEPS = [0.0, 0.25, 0.5, DECISION_WAIT, 1.5, MAX_WAIT, 9.0]
SPAN_KINDS = ("root", "child", "entry")  # an entry span: its parent is in another process


@dataclass(frozen=True)
class Arrival:
    id: int
    trace: str
    kind: str  # a span's (SPAN_KINDS) or "event": a log event of the trace, sent apart
    service: str


@dataclass
class Step:
    wait: float  # clock seconds before the round
    batch: list[Arrival]  # empty: a round with no batch committed
    restart: bool = False  # the process restarts before the round
    remembers: bool = True  # after a restart: the state machine is given the store's counts


@dataclass
class Scenario:
    steps: list[Step]
    max_traces: int
    arrivals: list[Arrival] = field(default_factory=list)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """Up to four traces of spans (roots, children, entry spans of three services) and events, in
    any order, cut into batches committed at clock steps, with restarts between them."""
    arrivals: list[Arrival] = []
    for trace in range(draw(st.integers(1, 4))):
        kinds = draw(
            st.lists(
                st.tuples(st.sampled_from([*SPAN_KINDS, "event"]), st.sampled_from("abc")),
                min_size=1,
                max_size=6,
            )
        )
        arrivals += [Arrival(len(arrivals) + i, f"t{trace}", k, s) for i, (k, s) in enumerate(kinds)]
    order = draw(st.permutations(arrivals))
    steps = []
    for size, wait, restart, remembers in draw(
        st.lists(
            st.tuples(
                st.integers(0, 4),
                st.sampled_from(STEPS),
                st.sampled_from([False, False, False, True]),
                st.booleans(),
            ),
            max_size=14,
        )
    ):
        steps.append(Step(wait, order[:size], restart, remembers))
        order = order[size:]
    if order:
        steps.append(Step(draw(st.sampled_from(STEPS)), order))
    return Scenario(steps, draw(st.sampled_from([1, 3, 100, 100, 100])), arrivals)


def batch_arrivals(batch: list[Arrival]) -> Arrivals:
    """What `holding.inbound` makes of a batch: its spans' rows, then each trace with events."""
    spans = [a for a in batch if a.kind != "event"]
    event_traces = list(dict.fromkeys(a.trace for a in batch if a.kind == "event"))
    entries: dict[str, str] = {}
    for a in spans:
        if a.kind == "entry":
            entries.setdefault(a.trace, a.service)
    return Arrivals(
        [a.trace for a in spans] + event_traces,
        [a.kind == "root" for a in spans] + [False] * len(event_traces),
        len(spans),
        entries,
        service_of=lambda row: spans[row].service,
    )


class Assembly:
    """The assembler around the state machine, and what each assembly took."""

    def __init__(self, max_traces: int) -> None:
        self.config = AssemblerConfig(decision_wait=DECISION_WAIT, max_wait=MAX_WAIT, max_traces=max_traces)
        self.store: dict[str, int] = {}  # assembly counts of the traces with spans assembled
        self.taken: list[tuple[str, str, list[Arrival]]] = []  # (trace, reason, arrivals it took)
        self.now = 0.0
        self._start(remembers=True)

    def _start(self, remembers: bool) -> None:
        self.machine = Completeness(self.config)
        self.memory: dict[str, int] = dict(self.store) if remembers else {}
        self.may_have_older = bool(self.store)  # `Claims.check_history`
        # Per trace in flight: its arrivals not assembled yet (time, arrival), its count in memory
        # when the first of them came (None: not known), and whether the store then said it was
        # assembled before.
        self.waiting: dict[str, list[tuple[float, Arrival]]] = {}
        self.known: dict[str, int | None] = {}
        self.found: set[str] = set()

    def restart(self, remembers: bool) -> None:
        """A new process: the traces in flight are recovered, then a fresh state machine starts."""
        for trace in list(self.waiting):  # stored but not assembled: recovered at start
            self._assemble(trace, "recovery")
        self._start(remembers)

    def round(self, wait: float, batch: list[Arrival]) -> None:
        """`wait` seconds later, a round of the assembler thread, checking what it makes ready."""
        self.now += wait
        if batch:
            for a in batch:
                if a.trace not in self.waiting:
                    self.known[a.trace] = self.memory.get(a.trace)
                    self.found.discard(a.trace)
                self.waiting.setdefault(a.trace, []).append((self.now, a))
            self.machine.arrive(batch_arrivals(batch), self.now, self.memory)
        if self.may_have_older:
            found = self.machine.ask_store(
                self.now, lambda ids: {t: self.store[t] for t in ids if t in self.store}
            )
            assert set(found) <= set(self.waiting)
            self.found |= set(found)
            self.memory.update(found)  # `Claims.learn`
        pressed = []
        for ready in self.machine.ready(self.now):
            self._check_ready(ready)
            if ready.reason == "pressure":
                pressed.append(self.waiting[ready.trace_id][0][0])
            self._assemble(ready.trace_id, ready.reason)
        self._check_waiting()
        if pressed:  # the oldest, as many as are past max_traces and no more
            assert len(self.waiting) == self.config.max_traces
            assert all(max(pressed) <= arrived[0][0] for arrived in self.waiting.values())

    def _check_ready(self, ready: Ready) -> None:
        arrived = self.waiting.get(ready.trace_id)
        assert arrived, f"{ready.trace_id} ready again with nothing new since its assembly"
        idle = self.now - arrived[-1][0]
        age = self.now - arrived[0][0]
        late = self.known[ready.trace_id] is not None or ready.trace_id in self.found
        if ready.reason != "pressure":
            assert (ready.reason == "late_span") == late, ready
        if ready.reason == "complete":
            assert idle >= DECISION_WAIT and any(a.kind in ("root", "entry") for _, a in arrived), ready
        if ready.reason == "max_wait":
            assert age >= MAX_WAIT, ready
        if ready.reason == "late_span":
            assert idle >= DECISION_WAIT or age >= MAX_WAIT, ready

    def _check_waiting(self) -> None:
        """Nothing waits that should not: past max_wait, or rooted and idle for decision_wait."""
        assert self.machine.trace_ids() == set(self.waiting)
        assert len(self.waiting) <= self.config.max_traces
        for trace, arrived in self.waiting.items():
            assert self.now - arrived[0][0] < MAX_WAIT, trace
            # Assembled before (count > 0): its root came then.
            rooted = bool(self.known[trace]) or trace in self.found
            if rooted or any(a.kind == "root" for _, a in arrived):
                assert self.now - arrived[-1][0] < DECISION_WAIT, trace

    def _assemble(self, trace: str, reason: str) -> None:
        arrived = [a for _, a in self.waiting.pop(trace)]
        self.taken.append((trace, reason, arrived))
        if any(a.kind != "event" for a in arrived):
            self.store[trace] = self.memory[trace] = (
                max(self.memory.get(trace, 0), self.store.get(trace, 0)) + 1
            )
        else:
            self.memory[trace] = self.memory.get(trace, 0)  # events only: stored, nothing to map yet


# A late span after a restart that forgot everything: the store, asked, says the trace was assembled.
_LATE = [Arrival(0, "t0", "root", "a"), Arrival(1, "t0", "child", "a"), Arrival(2, "t0", "child", "b")]
_FORGOTTEN = Scenario(
    [
        Step(0.0, _LATE[:2]),
        Step(DECISION_WAIT, []),
        Step(0.25, _LATE[2:], restart=True, remembers=False),
        Step(DECISION_WAIT, []),
    ],
    max_traces=100,
    arrivals=_LATE,
)


# Events first, alone: assembled with nothing to map (count 0); the spans that come later are late.
_EVENTS = [Arrival(0, "t0", "event", "a"), Arrival(1, "t0", "child", "a")]
_EVENTS_FIRST = Scenario([Step(0.0, _EVENTS[:1]), Step(MAX_WAIT, []), Step(0.25, _EVENTS[1:])], 100, _EVENTS)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
@example(_FORGOTTEN)
@example(_EVENTS_FIRST)
def test_each_set_of_arrivals_is_assembled_exactly_once(scenario: Scenario) -> None:
    """Every arrival is taken by exactly one assembly: a trace is ready once for its first arrivals
    and once more for each later group (never again for the same ones, never before its waits are
    over), and once time passes nothing stays in flight."""
    assembly = Assembly(scenario.max_traces)
    for step in scenario.steps:
        if step.restart:
            assembly.restart(step.remembers)
        assembly.round(step.wait, step.batch)
    assembly.round(MAX_WAIT, [])  # time passes: nothing stays in flight
    assert not assembly.waiting and not len(assembly.machine)
    taken = Counter(a.id for _, _, arrived in assembly.taken for a in arrived)
    assert taken == Counter(a.id for a in scenario.arrivals)  # each once, none lost
    for i, (trace, reason, _) in enumerate(assembly.taken):
        if reason == "late_span":  # once more for a later group of arrivals, never the first
            assert any(earlier == trace for earlier, _, _ in assembly.taken[:i])
