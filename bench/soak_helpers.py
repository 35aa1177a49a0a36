"""Small helpers of the soak (bench/soak.py): a free loopback port, /proc readings (memory, child
processes, liveness, CPU time), Prometheus text, a least-squares slope, percentiles, rounding, and
removing a directory."""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import socket
from pathlib import Path


def free_port() -> int:
    """A loopback TCP port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status_kib(pid: int, field_name: str = "VmRSS") -> int | None:
    """A /proc/<pid>/status memory field in KiB (None when the process is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = re.search(rf"^{field_name}:\s+(\d+) kB", text, re.M)
    return int(found.group(1)) if found else None


def children(pid: int) -> list[int]:
    """The processes `pid` started, from any of its threads."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def alive(pid: int) -> bool:
    """Running and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of a process so far, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_metrics(text: str, prefixes: tuple[str, ...]) -> dict[str, float]:
    """The samples of a Prometheus text page whose name starts with one of `prefixes`, keyed by
    `name{labels}` as written."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#" or not line.startswith(prefixes):
            continue
        found = _SAMPLE.match(line)
        if found:
            with contextlib.suppress(ValueError):
                out[found.group(1) + (found.group(2) or "")] = float(found.group(3))
    return out


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per hour; None with fewer than 3 points."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    sxx = sum((t - mx) ** 2 for t, _ in points)
    if sxx == 0:
        return None
    sxy = sum((t - mx) * (v - my) for t, v in points)
    return sxy / sxx * 3600


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between closest ranks; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def rnd(value: float | None, digits: int = 2) -> float | None:
    """`value` rounded for the report; None for a missing or NaN value."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(value, digits)


def remove_tree(path: Path) -> None:
    """Remove a directory and everything in it, whatever is left of it."""
    shutil.rmtree(path, ignore_errors=True)
