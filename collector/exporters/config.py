"""The `exporters:` config section: the downstream OTLP endpoint and what goes there."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from collector.config_base import Section


class OtlpExporterConfig(Section):
    endpoint: str | None = None
    protocol: Literal["grpc", "http/protobuf"] = "grpc"
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(10.0, gt=0)


class ExportersConfig(Section):
    # Where evaluation events go (every score, as soon as an endpoint is set) and, with
    # forward_spans, every received export too.
    otlp: OtlpExporterConfig = Field(default_factory=OtlpExporterConfig)
    forward_spans: bool = False  # every received export, traces and logs
    # Exports waiting to be forwarded; beyond this the oldest are dropped (and counted).
    forward_queue: int = Field(1_000, gt=0)
    # Evaluation events kept in the store while the downstream is away; beyond this the oldest
    # are dropped (and counted).
    outbox_max_events: int = Field(1_000_000, gt=0)
    export_batch: int = Field(512, gt=0)  # evaluation events per OTLP export
    export_interval: float = Field(1.0, gt=0)  # seconds between looks at the outbox when drained
