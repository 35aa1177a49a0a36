"""semconv."""
