"""The `monitoring:` config section: how sure a gate or a regression must be before it speaks."""

from __future__ import annotations

from pydantic import Field

from collector.config_base import Section


class MonitoringConfig(Section):
    # Scores a gate or a regression test needs in a window before it decides (else: too little data).
    min_samples: int = Field(20, ge=1)
    # Confidence of the intervals `check` prints beside each gate.
    confidence: float = Field(0.95, gt=0, lt=1)
    # Regression tests: the family-wise false-alarm rate of one run (Holm), and the smallest drop
    # (of a mean or a pass rate, in 0..1) worth flagging.
    alpha: float = Field(0.05, gt=0, lt=1)
    min_effect: float = Field(0.05, ge=0, le=1)
