"""Where a running `ragpulse serve` advertises its API: a small JSON file next to the database file
it holds, so that `ragpulse sql`, `check` and the other commands go through the server instead of
opening a file it has locked. Kept apart from the service, so a command finds the server without
loading the service's own modules."""

from __future__ import annotations

import os
from pathlib import Path

import orjson


def server_file(db_path: str | Path) -> Path:
    """Where a running server advertises its API, next to the database file it holds."""
    return Path(f"{db_path}.server.json")


def running_server_url(db_path: str | Path) -> str | None:
    """The API URL of the live `ragpulse serve` holding `db_path`, if there is one."""
    path = server_file(db_path)
    try:
        info = orjson.loads(path.read_bytes())
        pid, url = int(info["pid"]), str(info["http_url"])
    except (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return url
