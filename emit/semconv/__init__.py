"""The ragpulse convention, emitting half: `semconv.names` (attribute names) and `semconv.emit` (one
context manager per step, with the plain OpenTelemetry API), from the `ragpulse-emit` distribution.

The server's distribution, `ragpulse`, contains these same modules (plus the models and the mapping),
so an app never needs both: install one or the other into a given environment.
"""
