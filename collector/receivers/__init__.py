"""Receivers: OTLP/gRPC and OTLP/HTTP front doors to the ingest pipeline."""
