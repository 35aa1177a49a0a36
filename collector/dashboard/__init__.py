"""The dashboard: its read-only JSON API (`api.py`) over what it shows (`data.py`, whose reads are
`collector/store/reads/dashboard.py`)."""
