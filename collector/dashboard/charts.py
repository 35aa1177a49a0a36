"""The dashboard's chart axis: how wide a bucket is, and every bucket of a window (empty ones too)."""

from __future__ import annotations

from datetime import datetime, timedelta

from collector.schema.windows import Window

# DuckDB's time_bucket counts buckets of days or less from this origin (a Monday).
BUCKET_ORIGIN = datetime(2000, 1, 3)


def bucket_starts(window: Window, step: int) -> list[datetime]:
    """Every chart bucket of the window, as `time_bucket` labels them: so a bucket with no rows can
    be drawn as one (no traffic, no score) instead of a line across the silence."""
    delta = timedelta(seconds=step)
    first = BUCKET_ORIGIN + ((window.start - BUCKET_ORIGIN) // delta) * delta
    return [
        first + i * delta
        for i in range(int((window.end - first) / delta) + 1)
        if first + i * delta < window.end
    ]


def bucket_seconds(window: Window, points: int = 60) -> int:
    """A chart bucket for the window: about `points` points, in whole minutes (scores are kept per
    minute), at least one minute."""
    seconds = window.seconds / points
    return max(60, round(seconds / 60) * 60)
