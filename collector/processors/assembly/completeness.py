"""Completeness: when a trace's spans are here, per trace, as a state machine.

A trace is complete when its root span has arrived (OTel exports spans when they end) and no span
arrived for `decision_wait` seconds, or `max_wait` seconds after its first span. At most
`max_traces` are in flight; past that the oldest are assembled early (reason `pressure`).

A span whose parent is in another process (OTLP's span flags say so; SERVER and CONSUMER spans of
senders that do not set them) is its service's entry into the trace, and stands in for the root:
an app behind a traced gateway that reports elsewhere would otherwise wait `max_wait` for a root
that never comes. When spans of another service come after an entry span stood in and its trace
was assembled (a caller reporting here too, slowly, or a service the entry's service was called by
in the same trace), the entry's service was not the first: its entry spans stop standing in, so its
traces are not all assembled (and judged) twice. A trace that then reaches `max_wait` with only such
entry spans and no root makes them stand in again (the callers stopped reporting here). A root that
comes in time (ragpulse's own probe span, a quick gateway) changes nothing.

Events sent apart from their spans (GenAI events on /v1/logs) count as arrivals of their trace like
spans do, but never as its root. A span or event that arrives after its trace was assembled starts
the trace again, to be re-assembled from the store (reason `late_span`).

Pure: no store, no clock. The caller passes the time, what it remembers of earlier assemblies, and
the store's answer (a callable) about traces that may have been assembled before this process.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from collector.processors.config import AssemblerConfig

log = logging.getLogger(__name__)

# Traces an entry span completed, remembered (trace id -> its service) so that spans of another
# service arriving later show that it was not the first; and at most this many such services.
ENTERED_CAP = 10_000
WAITING_SERVICES_CAP = 10_000


class Stage(Enum):
    """How far a trace is from having a root: what makes it wait `decision_wait` or `max_wait`.

    A trace starts WAITING_FOR_ROOT (or ROOTED when remembered as assembled with spans); an entry
    span moves it to ENTERED; its root span, from either, to ROOTED, as does the store's word that
    it was assembled before, or an entry span standing in when the trace is ready. Never back."""

    WAITING_FOR_ROOT = "waiting for root"  # neither its root nor an entry span came
    # An entry span came (`TraceState.entry` its service): it stands in for the root unless its
    # service is one whose traces wait for their root (another service reported before it).
    ENTERED = "entered"
    # Its root came; or the trace was assembled before (its root came then); or, once ready, its
    # entry span stood in (taken as new, like a trace with its root: see `Claims.look_up`).
    ROOTED = "rooted"


class History(Enum):
    """What is known of the trace's earlier assemblies: where its rows are read from."""

    NEW = "new"  # none known: its rows are the ones held for it
    # Assembled before (a late span), or stored but not assembled (recovery): every span of it is
    # read from the store and it is assembled again (reason `late_span`), replacing earlier rows.
    ASSEMBLED_BEFORE = "assembled before"
    # Found assembled twice (`Claims.assembled_twice`): assembled again whatever came late.
    ASSEMBLED_TWICE = "assembled twice"


@dataclass(slots=True)
class TraceState:
    """One trace in flight, from its first arrival until it is ready."""

    first_seen: float
    last_seen: float
    stage: Stage = Stage.WAITING_FOR_ROOT
    entry: str | None = None  # the service of an entry span that may stand in for the root
    history: History = History.NEW
    asked: bool = False  # the store was asked whether this root-less trace was assembled before

    @property
    def late(self) -> bool:
        """Its spans are read from the store: late spans, recovery, or assembled twice."""
        return self.history is not History.NEW

    def found_assembled(self) -> None:
        """The store has an assembly of it: a late span (a trace found twice stays so)."""
        if self.history is History.NEW:
            self.history = History.ASSEMBLED_BEFORE


@dataclass(slots=True)
class Arrivals:
    """What a committed batch tells completeness: the trace of each span, then of each trace with
    log events in it (events come apart from their spans and never count as roots), which of them
    are roots, the traces with an entry span (and its service), and the service of each span."""

    trace_ids: list[str]
    roots: list[bool]
    spans: int  # the first `spans` of `trace_ids` are spans'; the others, events'
    entries: dict[str, str]
    service_of: Callable[[int], str | None]  # the service of span `row`


class Ready(NamedTuple):
    """A trace that is ready for assembly, and why: `complete`, `max_wait`, `late_span`, `pressure`
    (or, queued by the assembler, `recovery`)."""

    trace_id: str
    reason: str
    state: TraceState


class Completeness:
    """The traces in flight, each in its `Stage`, and the services whose entry spans wait."""

    def __init__(self, config: AssemblerConfig) -> None:
        self._config = config
        self._pending: dict[str, TraceState] = {}
        self._asked_at = -math.inf  # when the store was last asked about root-less traces
        # Services whose entry spans do not stand in for the root: other services report first.
        self._entry_waits: set[str] = set()
        self._entered: OrderedDict[str, str] = OrderedDict()  # completed by an entry span: its service

    def __len__(self) -> int:
        return len(self._pending)

    def trace_ids(self) -> set[str]:
        """The traces in flight."""
        return set(self._pending)

    def arrive(self, arrivals: Arrivals, now: float, assembled: Mapping[str, int]) -> None:
        """Note a batch's arrivals at `now`. `assembled`: the traces remembered as assembled before,
        and how many times (0: only events of it came so far, stored without an assembly)."""
        for trace_id, is_root in zip(arrivals.trace_ids, arrivals.roots, strict=True):
            state = self._pending.get(trace_id)
            if state is None:
                # Seen before: read it all from the store. Assembled before (count > 0): its root
                # came, so a late span waits decision_wait, not max_wait. Count 0: events only so far.
                count = assembled.get(trace_id)
                state = TraceState(now, now)
                if count:
                    state.stage = Stage.ROOTED
                if count is not None:
                    state.history = History.ASSEMBLED_BEFORE
                self._pending[trace_id] = state
            state.last_seen = now
            if is_root:
                state.stage = Stage.ROOTED
        for trace_id, service in arrivals.entries.items():
            state = self._pending[trace_id]
            if state.entry is None or state.entry in self._entry_waits:
                state.entry = service
                if state.stage is Stage.WAITING_FOR_ROOT:
                    state.stage = Stage.ENTERED
        if self._entered:
            self._learn_from_late_spans(arrivals)

    def mark_twice(self, trace_id: str) -> bool:
        """The trace was found assembled twice: if in flight, it is re-assembled from the store
        whatever comes. Returns whether it was in flight."""
        state = self._pending.get(trace_id)
        if state is None:
            return False
        state.history = History.ASSEMBLED_TWICE
        return True

    def ask_store(
        self, now: float, assembly_counts: Callable[[list[str]], Mapping[str, int]]
    ) -> dict[str, int]:
        """Root-less traces idle for decision_wait may be late spans of a trace assembled before
        this process started (or forgotten since): ask the store once, so they need not wait for
        max_wait. The store reads all of `traces` to answer, so it is asked at most once per
        decision_wait, for every such trace at once (traffic whose spans all have a parent outside
        it would otherwise ask every round): one waits at most twice decision_wait to be asked.

        Returns the traces found assembled before, with their assembly counts."""
        decision_wait = self._config.decision_wait
        if now - self._asked_at < decision_wait:
            return {}
        idle = [
            t
            for t, s in self._pending.items()
            if now - s.last_seen >= decision_wait and not s.asked and not self._has_root(s)
        ]
        if not idle:
            return {}
        self._asked_at = now
        earlier = assembly_counts(idle)
        found = {}
        for trace_id in idle:
            state = self._pending[trace_id]
            state.asked = True
            if trace_id in earlier:
                state.stage = Stage.ROOTED
                state.found_assembled()
                found[trace_id] = earlier[trace_id]
        return found

    def ready(self, now: float) -> list[Ready]:
        """Take the traces that are ready at `now` out of flight: those complete or past max_wait,
        then (last) the oldest others past `max_traces` in flight."""
        cfg = self._config
        ready = []
        for trace_id, state in self._pending.items():
            if now - state.last_seen >= cfg.decision_wait and self._has_root(state):
                if state.stage is Stage.ENTERED:  # its entry span stands in for the root
                    self._remember_entered(trace_id, state)
                    state.stage = Stage.ROOTED  # taken as new, like a trace with its root
                ready.append(Ready(trace_id, "late_span" if state.late else "complete", state))
            elif now - state.first_seen >= cfg.max_wait:
                if state.stage is Stage.ENTERED and state.entry in self._entry_waits:
                    self._entry_waits.discard(state.entry)  # no one reported the trace before it
                    log.info(
                        "a trace entering %r came without its root: its entry spans stand in", state.entry
                    )
                ready.append(Ready(trace_id, "late_span" if state.late else "max_wait", state))
        excess = len(self._pending) - len(ready) - cfg.max_traces
        if excess > 0:
            chosen = {r.trace_id for r in ready}
            oldest = sorted(
                ((s.first_seen, t) for t, s in self._pending.items() if t not in chosen),
            )[:excess]
            ready.extend(Ready(t, "pressure", self._pending[t]) for _, t in oldest)
        for r in ready:
            del self._pending[r.trace_id]
        return ready

    def _has_root(self, state: TraceState) -> bool:
        """Its root span came, or an entry span stands in for a root that is reported elsewhere."""
        if state.stage is Stage.ENTERED:
            return state.entry not in self._entry_waits
        return state.stage is Stage.ROOTED

    def _remember_entered(self, trace_id: str, state: TraceState) -> None:
        assert state.entry is not None
        self._entered[trace_id] = state.entry
        if len(self._entered) > ENTERED_CAP:
            self._entered.popitem(last=False)

    def _learn_from_late_spans(self, arrivals: Arrivals) -> None:
        """Spans of another service arriving for a trace whose entry span stood in for its root,
        after its assembly: that entry's service was not the first to report the trace, and its
        entry spans stop standing in (its traces wait for their root, or for the other service's
        entry span). Log events do not count: they often come apart from their spans, later."""
        for row, trace_id in enumerate(itertools.islice(arrivals.trace_ids, arrivals.spans)):
            service = self._entered.get(trace_id)
            if service is None or arrivals.service_of(row) == service:
                continue
            del self._entered[trace_id]
            if service not in self._entry_waits and len(self._entry_waits) < WAITING_SERVICES_CAP:
                self._entry_waits.add(service)
                log.info(
                    "spans of trace %s came after %r's entry span stood in for its root: "
                    "its traces wait for their root from now on",
                    trace_id,
                    service,
                )
