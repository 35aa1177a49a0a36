"""Exporters: what ragpulse sends out over OTLP (forwarded spans; evaluation write-back later)."""
