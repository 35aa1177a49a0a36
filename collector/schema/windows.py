"""Time windows over stored scores (`store/reads/predicates.py` selects them in SQL).

Scores count in the minute their trace started (`bucket` in `scores` and `score_aggregates`), so a
window can only select whole minutes. The one rule, used by `check`, regressions, alerts and the
dashboard alike (`Window.covering`): a window of N seconds ending at `end` takes **every minute that
overlaps `[end - N, end)`**, from the minute holding `end - N` to the minute holding `end` (so far,
when `end` is now). So a trace that started in the last N seconds always counts, and a window shorter
than a minute (which could miss every bucket) is refused (`check_window`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

# The granularity of `score_aggregates`: a row per minute, so no window is finer than this.
MINUTE_SECONDS = 60
_MINUTE = timedelta(seconds=MINUTE_SECONDS)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str | float) -> float:
    """Seconds in `90`, `90s`, `15m`, `1h`, `7d` or `2w`; ValueError with the text otherwise."""
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        match = _DURATION.match(text)
        if match is None:
            raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 15m, 1h, 7d)")
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds <= 0:
        raise ValueError(f"a duration must be positive, got {text!r}")
    return seconds


def check_window(seconds: float) -> float:
    """`seconds` when it is a usable window length; ValueError saying why otherwise. Scores are kept
    per minute, so a shorter window would be rounded to minutes it does not mean (and an alert on it
    could look like it watches 8 seconds while watching one or two minutes): refused, not rounded."""
    if seconds < MINUTE_SECONDS:
        raise ValueError(
            f"must be at least {MINUTE_SECONDS} s, got {seconds:g} s "
            "(scores are kept per minute: a window takes whole minutes)"
        )
    return seconds


def parse_window(text: str | float) -> float:
    """A window length in seconds (`parse_duration`, at least a minute: `check_window`)."""
    return check_window(parse_duration(text))


def floor_minute_us(us: int) -> int:
    """The start of the minute `us` (µs since the epoch) falls in, in µs: a score's bucket."""
    return us - us % 60_000_000


def floor_minute(moment: datetime) -> datetime:
    """The start of the minute holding `moment` (its bucket)."""
    return moment.replace(second=0, microsecond=0)


def ceil_minute(moment: datetime) -> datetime:
    """`moment` when it starts a minute, else the start of the next minute."""
    floor = floor_minute(moment)
    return floor if floor == moment else floor + _MINUTE


def utc_now() -> datetime:
    """Now, as the naive UTC time stored times are compared with."""
    return datetime.now(UTC).replace(tzinfo=None)


def parse_time(text: str) -> datetime:
    """An ISO 8601 time as naive UTC (a time without offset is taken as UTC)."""
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is not None:
            moment = moment.astimezone(UTC).replace(tzinfo=None)
    except (ValueError, OverflowError):
        raise ValueError(f"not an ISO 8601 time: {text!r}") from None
    return moment


@dataclass(frozen=True)
class Window:
    """`[start, end)`, naive UTC. Monitoring and the dashboard build theirs with `covering`, so a
    window's bounds are the minutes it counts."""

    start: datetime
    end: datetime

    @classmethod
    def ending(cls, end: datetime, seconds: float) -> Window:
        """Exactly `[end - seconds, end)`, to the microsecond (not yet whole minutes)."""
        return cls(end - timedelta(seconds=seconds), end)

    @classmethod
    def covering(cls, end: datetime, seconds: float) -> Window:
        """The whole minutes a window of `seconds` ending at `end` covers: every minute that overlaps
        `[end - seconds, end)`. The one rule of every surface (`check`, `check --regression`,
        alerts, the dashboard), so one window gives one n everywhere."""
        return cls.ending(end, seconds).whole_minutes()

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def whole_minutes(self) -> Window:
        """The minutes the window overlaps: its start moved back and its end forward to the minute.
        A score's `bucket` is its trace's start minute, so this selects the scores of every trace that
        starts in the window; the end moves too so that the bounds say which minutes count (on
        `bucket`, `< end` and `< ceil(end)` select the same minutes)."""
        return Window(floor_minute(self.start), ceil_minute(self.end))

    def shifted(self, seconds: float) -> Window:
        """The same window `seconds` earlier, to the microsecond."""
        delta = timedelta(seconds=seconds)
        return Window(self.start - delta, self.end - delta)

    def before(self, seconds: float) -> Window:
        """A regression's baseline: the whole minutes covering this window `seconds` earlier (the
        previous day, the same hours last week), ending no later than this window starts. Rounding
        both windows out to whole minutes could make them share a minute (`--since 1h --baseline 1h`):
        that minute stays on the recent side only, so no score counts on both."""
        earlier = self.shifted(seconds).whole_minutes()
        return Window(earlier.start, min(earlier.end, max(self.start, earlier.start)))

    def describe(self) -> dict[str, str]:
        return {"start": self.start.isoformat(sep=" "), "end": self.end.isoformat(sep=" ")}
