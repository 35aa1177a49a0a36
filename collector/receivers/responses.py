"""The OTLP Export responses, shared by the gRPC and HTTP receivers (encoding is theirs)."""

from __future__ import annotations

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from collector.pipeline import ExportOutcome


def trace_response(outcome: ExportOutcome) -> ExportTraceServiceResponse:
    """Success, with `partial_success` only when spans were rejected."""
    response = ExportTraceServiceResponse()
    if outcome.rejected:
        response.partial_success.CopyFrom(
            ExportTracePartialSuccess(rejected_spans=outcome.rejected, error_message=outcome.message)
        )
    return response


def logs_response(outcome: ExportOutcome) -> ExportLogsServiceResponse:
    """Success; a message with nothing rejected is a warning (ignored records), which OTLP allows."""
    response = ExportLogsServiceResponse()
    if outcome.rejected or outcome.message:
        response.partial_success.CopyFrom(
            ExportLogsPartialSuccess(rejected_log_records=outcome.rejected, error_message=outcome.message)
        )
    return response
