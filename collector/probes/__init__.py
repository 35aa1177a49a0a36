"""Scheduled probes (`probes:`): the golden questions sent to the production app, their traces scored
against the cases' references. `config.py` (the section), `runner.py` (the scheduled runs),
`report.py` (a run read back over SQL: `ragpulse probes`, `/api/probes`)."""
