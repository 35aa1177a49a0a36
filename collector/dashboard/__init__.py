"""The dashboard: its read-only JSON API (`api.py`) and the queries behind it (`queries.py`)."""
