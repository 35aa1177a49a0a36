"""OTLP wire formats: protobuf and OTLP/JSON requests decoded to columnar span batches."""
