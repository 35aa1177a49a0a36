"""Example apps instrumented for ragpulse (run them against `ragpulse serve` or through `ragpulse demo`)."""
