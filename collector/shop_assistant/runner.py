"""Send the question set through the assistant to an OTLP endpoint: one trace per question."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from collector.shop_assistant.app import Answer, ShopAssistant
from collector.shop_assistant.knowledge import Case, load_cases
from collector.shop_assistant.telemetry import CountingExporter, otlp_exporter, tracer_provider


@dataclass
class RunReport:
    """What one run sent, and what the collector acknowledged."""

    mode: str
    convention: str
    answers: list[Answer] = field(default_factory=list)
    spans_exported: int = 0
    spans_failed: int = 0

    @property
    def ok(self) -> bool:
        """Every span was acknowledged."""
        return self.spans_failed == 0 and self.spans_exported > 0


def run(
    endpoint: str,
    mode: str = "healthy",
    convention: str = "ragpulse",
    protocol: str = "grpc",
    cases: Sequence[Case] | None = None,
    labels: bool = False,
    latency: float = 1.0,
    service_name: str = "shop-assistant",
    timeout: float = 10.0,
    service_version: str = "1.0",
) -> RunReport:
    """Answer every case (default: the bundled cases.yaml) and flush the spans before returning."""
    exporter = CountingExporter(otlp_exporter(endpoint, protocol, timeout))
    provider = tracer_provider(exporter, service_name, service_version)
    report = RunReport(mode, convention)
    try:
        app = ShopAssistant(
            provider.get_tracer("collector.shop_assistant"),
            mode=mode,
            convention=convention,
            latency=latency,
            labels=labels,
        )
        for case in load_cases() if cases is None else cases:
            report.answers.append(app.answer(case.question, case))
    finally:
        # Flushes the batch processor and closes the exporter.
        provider.shutdown()
    report.spans_exported, report.spans_failed = exporter.exported, exporter.failed
    return report
