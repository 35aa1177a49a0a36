"""One lifecycle: components start in order and stop in reverse, every one of them even when one
fails; the service builds its components from the config in the order that lets each stop after
what feeds it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from collector.lifecycle import Component, remaining, start_all, stop_all
from collector.service import BackgroundService
from tests.support.helpers import make_config


class Recorder(Component):
    def __init__(self, name: str, events: list[str], fail_stop: bool = False) -> None:
        self.name = name
        self._events = events
        self._fail_stop = fail_stop

    def start(self) -> None:
        self._events.append(f"start {self.name}")

    def stop(self, deadline: float | None = None) -> None:
        self._events.append(f"stop {self.name}")
        if self._fail_stop:
            raise RuntimeError(f"{self.name} could not stop")


class AsyncRecorder(Recorder):
    async def start(self) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        self._events.append(f"start {self.name}")

    async def stop(self, deadline: float | None = None) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        self._events.append(f"stop {self.name}")


def test_components_start_in_order_and_stop_in_reverse() -> None:
    events: list[str] = []
    components = [Recorder("store", events), AsyncRecorder("receiver", events), Recorder("probe", events)]
    asyncio.run(start_all(components))
    asyncio.run(stop_all(components))
    assert events == [
        "start store",
        "start receiver",
        "start probe",
        "stop probe",
        "stop receiver",
        "stop store",
    ]


def test_every_component_stops_even_when_one_fails() -> None:
    events: list[str] = []
    writer = Recorder("writer", events, fail_stop=True)
    components = [Recorder("store", events), writer, Recorder("http", events)]
    with pytest.raises(RuntimeError, match="writer could not stop"):
        asyncio.run(stop_all(components))
    assert events == ["stop http", "stop writer", "stop store"]


def test_a_drain_takes_its_bound_or_what_is_left_before_the_deadline() -> None:
    assert remaining(None, 15.0) == 15.0
    assert remaining(0.0, 15.0) == 0.0  # the deadline passed long ago
    assert 9.0 < remaining(float("inf"), 10.0) <= 10.0


def test_the_service_starts_what_feeds_the_writer_first_and_stops_it_after(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    config.exporters.forward_spans = True
    config.exporters.otlp.endpoint = "127.0.0.1:9"  # nothing listens: forwarding is best effort
    with BackgroundService(config) as service:
        names = [component.name for component in service.components]
        assert service.health()["store"] == {"writable": True}
    assert names[0] == "store"  # first started, last stopped: everything writes to it
    assert names.index("assembler") < names.index("writer")  # the writer drains into it at stop
    assert names.index("forwarder") < names.index("writer")
    assert names.index("writer") < names.index("otlp-grpc") < names.index("http")
    assert len(names) == len(set(names))
