"""Time windows over stored scores, and the SQL that selects them.

Scores count in the minute their trace started (`bucket` in `scores` and `score_aggregates`), so a
window selects whole minutes: `[start, end)` on `bucket`, in UTC like every stored time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

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


def sql_string(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


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
    """`[start, end)`, naive UTC."""

    start: datetime
    end: datetime

    @classmethod
    def ending(cls, end: datetime, seconds: float) -> Window:
        return cls(end - timedelta(seconds=seconds), end)

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def whole_minutes(self) -> Window:
        """The window with its start moved back to the minute: the `bucket` of a score is its trace's
        start minute, so this selects the scores of every trace that starts in the window."""
        return Window(self.start.replace(second=0, microsecond=0), self.end)

    def shifted(self, seconds: float) -> Window:
        """The same window `seconds` earlier (a baseline: the previous day, the same hours last week)."""
        delta = timedelta(seconds=seconds)
        return Window(self.start - delta, self.end - delta)

    def sql(self, column: str = "bucket") -> str:
        """A predicate selecting the window on a TIMESTAMP column."""
        return f"({column} >= {_timestamp(self.start)} AND {column} < {_timestamp(self.end)})"

    def describe(self) -> dict[str, str]:
        return {"start": self.start.isoformat(sep=" "), "end": self.end.isoformat(sep=" ")}


def _timestamp(moment: datetime) -> str:
    return f"TIMESTAMP '{moment.isoformat(sep=' ')}'"
