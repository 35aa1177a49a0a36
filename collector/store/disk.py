"""The disk under a database file: whether it is still the file that was opened, whether its
directory takes a write, how much room is left, and what to say when the write-ahead log cannot be
replayed for lack of it."""

from __future__ import annotations

import contextlib
import errno
import math
import os
import shutil
from pathlib import Path

# A probe finds the store writable only with this much free beside it: a group commit of the
# default size (50,000 spans) appends about 40 MB to the log, and a smaller margin would let the
# probe pass while every commit still fails.
MIN_FREE_BYTES = 64 * 1024 * 1024
PROBE_BYTES = 1024 * 1024
PROBE_NAME = ".ragpulse-write-probe"


def file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of `path`, None when it does not exist."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def free_bytes(directory: Path) -> int:
    """Bytes free to an unprivileged writer on the file system of `directory`."""
    return shutil.disk_usage(directory).free


def room_needed(directory: Path) -> int:
    """The free space a store needs to take writes: `MIN_FREE_BYTES`, or a twentieth of a file
    system too small for that."""
    return min(MIN_FREE_BYTES, shutil.disk_usage(directory).total // 20)


def probe_directory(directory: Path) -> None:
    """Raise OSError unless `directory` has room for a group commit (`MIN_FREE_BYTES`, or a
    twentieth of a smaller file system) and takes a synced write."""
    free, min_free = free_bytes(directory), room_needed(directory)
    if free < min_free:
        raise OSError(
            errno.ENOSPC,
            f"No space left on device ({free / 1e6:.0f} MB free on {directory}, "
            f"{min_free / 1e6:.0f} MB needed to take writes again)",
        )
    probe = directory / PROBE_NAME
    try:
        with probe.open("wb") as f:
            f.write(b"\0" * PROBE_BYTES)
            f.flush()
            os.fsync(f.fileno())
    finally:
        probe.unlink(missing_ok=True)


def wal_replay_message(path: Path, error: str) -> str | None:
    """The message for a start that failed replaying `path`'s write-ahead log for lack of space, or
    None for any other failure. DuckDB says "No space left on device", or, when the replay had to
    spill to a full disk, "Out of Memory Error: Failure while replaying WAL ...
    max_temp_directory_size"."""
    wal = Path(f"{path}.wal")
    needed = wal.stat().st_size if wal.exists() else 0
    free = free_bytes(path.parent)
    text = error.lower()
    margin = room_needed(path.parent)
    short_of_space = "no space left" in text or ("replaying wal" in text and free < needed + margin)
    if not short_of_space:
        return None
    missing = max(needed - free, 0) + margin
    return (
        f"no space left on {path.parent} to replay the write-ahead log of {path} "
        f"({needed / 1e6:.0f} MB, {free / 1e6:.0f} MB free); free about {math.ceil(missing / 1e6)} MB "
        "and start again (nothing acknowledged is lost: it is in the log)"
    )


def probe_log(path: Path) -> None:
    """Raise OSError when the write-ahead log beside `path` exists and cannot be opened for writing
    (made immutable or read-only). The database file itself is never opened here: closing any
    descriptor of it would drop the lock DuckDB holds on it (POSIX locks are per process)."""
    wal = Path(f"{path}.wal")
    with contextlib.suppress(FileNotFoundError), wal.open("ab"):
        pass
