"""The reads the rest of ragpulse makes over the tables users see, each by name, in a module named
for its caller (the dashboard, monitoring, probes, the demo).

Each read is a SELECT run through a `Query`: the store's read-only SQL in the service and on a file,
or a running server's `/api/sql` (`ragpulse check --server`), so one read works on both backends and
over the network alike. Values from a request are validated or quoted here (`predicates.py`), never
pasted raw.
"""

from collections.abc import Callable
from typing import Any

# Runs one read-only SELECT and returns its rows as dicts.
Query = Callable[[str], list[dict[str, Any]]]
# Runs one read-only query of a user's with a row limit: (rows, whether the limit cut them).
SqlRunner = Callable[[str, int], tuple[list[dict[str, Any]], bool]]
