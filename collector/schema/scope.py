"""Which scores a figure counts: one service or every service, the app's own traffic or one probe's,
and values of slice dimensions (`monitoring.dimensions`). Gates, regressions, alerts and the
dashboard all cut `scores` and `score_aggregates` through a `Scope` (`store/reads/predicates.py`
makes it SQL), so they agree on what a slice is.

Probe traffic (the golden questions `probes:` sends) is kept apart by default: a figure of the app's
own traffic never mixes in a probe's, and a probe's figures are asked for by its name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

# The label of a slice whose traces had no value for the dimension.
NO_VALUE = "(none)"
_DIMENSION = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


@dataclass(frozen=True)
class Scope:
    service: str | None = None  # None: every service together
    probe: str | None = None  # None: the app's own traffic; a name: that probe's traffic
    # (dimension, value) pairs every counted score has; a None value: scores without one.
    slices: tuple[tuple[str, str | None], ...] = ()

    @classmethod
    def of(
        cls,
        service: str | None = None,
        probe: str | None = None,
        where: Mapping[str, str | None] | None = None,
    ) -> Scope:
        return cls(service, probe, tuple(sorted((where or {}).items())))

    def with_slice(self, dimension: str, value: str | None) -> Scope:
        return replace(self, slices=(*self.slices, (check_dimension(dimension), value)))

    @property
    def slice_label(self) -> str | None:
        """`category=refunds, version=1.4` (None: no slice)."""
        if not self.slices:
            return None
        return ", ".join(f"{d}={NO_VALUE if v is None else v}" for d, v in self.slices)

    def describe(self) -> str:
        parts = [f"service {self.service}" if self.service else "every service"]
        if self.probe is not None:
            parts.append(f"probe {self.probe}")
        if self.slices:
            parts.append(self.slice_label or "")
        return ", ".join(parts)


def check_dimension(name: str) -> str:
    """A dimension name safe to put in SQL as a quoted column (ValueError otherwise)."""
    if not _DIMENSION.match(name):
        raise ValueError(f"not a dimension name: {name!r}")
    return name


def parse_slices(texts: Iterable[str]) -> dict[str, str | None]:
    """`category=refunds` options as a mapping (`category=(none)`: the traces without a value)."""
    found: dict[str, str | None] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"expected DIMENSION=VALUE, got {text!r}")
        found[check_dimension(name.strip())] = None if value == NO_VALUE else value
    return found
