"""The soak's timetable (bench/soak.py): `Schedule`, the hour's faults and windows in seconds from the
start of the load, scaled to the run's length; `Injector`, a thread that runs timed actions (a
fault on, a fault off, a SIGKILL) on that timetable and logs each one's outcome."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Schedule:
    """The hour's schedule, in seconds from the start of the load, for a run of `minutes`."""

    minutes: float

    @property
    def scale(self) -> float:
        return self.minutes / 60

    @property
    def duration(self) -> float:
        return self.minutes * 60

    def at(self, hour_minute: float) -> float:
        """Seconds into the run of minute `hour_minute` of the hour."""
        return hour_minute * self.minutes

    def judge_outages(self) -> list[tuple[float, float, str]]:
        return [
            (self.at(10 * k + 3), self.at(10 * k + 5), "refuse" if k % 2 == 0 else "503") for k in range(6)
        ]

    def down_and_up(
        self, name: str, outages: list[tuple[float, float, str]], set_mode: Callable[[str], None]
    ) -> list[tuple[float, str, Callable[[], None]]]:
        """An injector's actions for a server's outages within the run: into each outage's mode at
        its start (`refuse`, `503`), back `up` at its end."""
        actions: list[tuple[float, str, Callable[[], None]]] = []
        for start, end, mode in outages:
            if start < self.duration:
                actions += [
                    (start, f"{name} {mode}", lambda mode=mode: set_mode(mode)),
                    (end, f"{name} up", lambda: set_mode("up")),
                ]
        return actions

    def webhook_downs(self) -> list[tuple[float, float, str]]:
        return [
            (self.at(10 * k + 5), self.at(10 * k + 10), "503" if k % 2 == 0 else "refuse") for k in range(6)
        ]

    @property
    def fill_at(self) -> float:
        return self.at(26)

    @property
    def free_at(self) -> float:
        return self.at(30)

    @property
    def kill_at(self) -> float:
        return self.at(40)

    @property
    def warmup(self) -> float:
        return self.at(5)

    @property
    def flip_minutes(self) -> int:
        """Wall-clock minutes between flips of the expected document. Scores are kept per minute of
        their trace's start and an alert's window takes whole minutes (at least one, so it spans the
        previous minute and the current one): a flip shows after one whole minute of the new value, so
        two minutes is the shortest that fires and resolves cleanly."""
        return max(2, round(3 * self.scale))

    @property
    def lag_window(self) -> float:
        return self.at(10)

    @property
    def judge_bin(self) -> float:
        return max(10.0, self.at(1))

    @property
    def webhook_retry_max(self) -> float:
        return max(5.0, 30 * self.scale)

    def describe(self) -> dict[str, Any]:
        return {
            "minutes": self.minutes,
            "judge_outages_s": [[round(a, 1), round(b, 1), m] for a, b, m in self.judge_outages()],
            "webhook_downs_s": [[round(a, 1), round(b, 1), m] for a, b, m in self.webhook_downs()],
            "disk_full_s": [round(self.fill_at, 1), round(self.free_at, 1)],
            "sigkill_s": round(self.kill_at, 1),
            "rss_warmup_s": round(self.warmup, 1),
            "flip_every_wall_minutes": self.flip_minutes,
            "lag_window_s": round(self.lag_window, 1),
            "judge_bin_s": round(self.judge_bin, 1),
        }


class Injector(threading.Thread):
    """Runs `(seconds from t0, label, action)` in order in its own thread; `cancel()` skips the rest.
    Each action's time and outcome is logged in `log`."""

    def __init__(self, name: str, t0: float, actions: list[tuple[float, str, Callable[[], Any]]]) -> None:
        super().__init__(name=f"soak-{name}", daemon=True)
        self.t0, self.actions = t0, sorted(actions, key=lambda a: a[0])
        self.log: list[dict[str, Any]] = []
        self.cancelled = threading.Event()

    def run(self) -> None:
        for offset, label, action in self.actions:
            if self.cancelled.wait(max(0.0, self.t0 + offset - time.time())):
                return
            started = time.time()
            entry: dict[str, Any] = {"t": round(started - self.t0, 2), "action": label}
            try:
                result = action()
                if result is not None:
                    entry["result"] = result
            except Exception as exc:  # a failed injection is reported, the soak goes on
                entry["error"] = repr(exc)
            entry["took_s"] = round(time.time() - started, 2)
            self.log.append(entry)

    def cancel(self) -> None:
        self.cancelled.set()
