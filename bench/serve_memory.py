#!/usr/bin/env python3
"""`ragpulse serve` with a thread that records, every `SERVE_MEMORY_EVERY` seconds (60), where the
process's memory is: its resident and anonymous memory and threads, glibc malloc's arenas (in use
and free, `mallinfo2`), DuckDB's jemalloc (allocated, active, resident, retained: `mallctl`),
Python's allocated blocks and CPython's object arenas (`_PyObject_DebugMallocStats`), and the
anonymous resident memory by kind of mapping (`/proc/self/smaps`: glibc's main heap, its other
arenas' 64 MiB heaps, stacks, the rest); one JSON line each to `SERVE_MEMORY_OUT`
(serve-memory.jsonl). With the whole process on jemalloc's profiler
(`LD_PRELOAD=libjemalloc.so.2 MALLOC_CONF=prof:true`), `SERVE_MEMORY_HEAP_DUMPS=600,6000` also
dumps the sampled live heap at those seconds after start (`heap-<seconds>.prof` beside the JSON
lines), for `jeprof --base=heap-600.prof ... heap-6000.prof`: what grew between two fixed times.

    .venv/bin/python bench/serve_memory.py serve --config ragpulse.yaml
    .venv/bin/python bench/soak.py --memory-probe ...     # the soak's service started this way

Run it as `ragpulse` would be run; every argument goes to the `ragpulse` command. DuckDB's buffer
pool is read from outside (`duckdb_memory()` through /api/sql, as bench/soak.py does). glibc and
the DuckDB wheel's jemalloc (its symbols are prefixed `duckdb_je_`) only: elsewhere those fields are
left out.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

OUT = Path(os.environ.get("SERVE_MEMORY_OUT", "serve-memory.jsonl"))
EVERY = float(os.environ.get("SERVE_MEMORY_EVERY", "60"))
MALLINFO_FIELDS = (
    "arena",
    "ordblks",
    "smblks",
    "hblks",
    "hblkhd",
    "usmblks",
    "fsmblks",
    "uordblks",
    "fordblks",
    "keepcost",
)
JEMALLOC_STATS = ("allocated", "active", "resident", "retained", "mapped", "metadata")
# glibc's arenas other than the main one live in heaps of this size, aligned to it (HEAP_MAX_SIZE
# on 64-bit builds); the main arena is the `[heap]` mapping.
GLIBC_HEAP = 64 << 20


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in MALLINFO_FIELDS]


def status_kib(field: str) -> int | None:
    """A field of /proc/self/status, in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def glibc_arenas() -> dict[str, int] | None:
    """glibc malloc's arenas in MiB: obtained from the system, in use, free."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
    except (OSError, AttributeError):
        return None
    info = libc.mallinfo2()
    return {
        "arena": info.arena >> 20,
        "in_use": info.uordblks >> 20,
        "free": info.fordblks >> 20,
        "mmapped": info.hblkhd >> 20,
    }


def jemalloc_stats() -> dict[str, int] | None:
    """DuckDB's jemalloc in MiB (stats refreshed first: `epoch`)."""
    try:
        import _duckdb  # type: ignore[import-not-found]

        return _mallctl_stats(ctypes.CDLL(_duckdb.__file__).duckdb_je_mallctl)
    except (ImportError, OSError, AttributeError):
        return None


def preloaded_jemalloc_stats() -> dict[str, int] | None:
    """A jemalloc preloaded for the whole process (`LD_PRELOAD`), in MiB: `resident - allocated` is
    what it holds that nothing uses; None on glibc (no `mallctl`)."""
    try:
        return _mallctl_stats(ctypes.CDLL(None).mallctl)
    except AttributeError:
        return None


def typed_mallctl(mallctl: Any) -> Any:
    """A jemalloc `mallctl` function with its C signature set (name, old, old size, new, new size)."""
    mallctl.argtypes = [
        ctypes.c_char_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.c_void_p,
        ctypes.c_size_t,
    ]
    return mallctl


def _mallctl_stats(mallctl: Any) -> dict[str, int]:
    mallctl = typed_mallctl(mallctl)
    epoch, size = ctypes.c_uint64(1), ctypes.c_size_t(8)
    mallctl(b"epoch", ctypes.byref(epoch), ctypes.byref(size), ctypes.byref(epoch), 8)
    stats = {}
    for name in JEMALLOC_STATS:
        value, size = ctypes.c_size_t(0), ctypes.c_size_t(8)
        if mallctl(f"stats.{name}".encode(), ctypes.byref(value), ctypes.byref(size), None, 0) == 0:
            stats[name] = value.value >> 20
    return stats


def pymalloc_arenas() -> dict[str, int] | None:
    """CPython's object allocator: its 1 MiB arenas now and at most (an arena is freed only when
    every object in it is), read from `_PyObject_DebugMallocStats` into a file of our own (it
    prints to a C stream: stderr would mix it into the service's log)."""
    try:
        stats = ctypes.pythonapi._PyObject_DebugMallocStats  # a PyDLL: called holding the GIL
        libc = ctypes.CDLL("libc.so.6")
    except (OSError, AttributeError):
        return None
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    stats.argtypes = [ctypes.c_void_p]
    with tempfile.NamedTemporaryFile("r", suffix=".pymalloc") as out:
        stream = libc.fopen(out.name.encode(), b"w")
        if not stream:
            return None
        try:
            stats(stream)
        finally:
            libc.fclose(stream)
        text = out.read()
    fields = {"# arenas allocated current": "arenas", "# arenas highwater mark": "highwater"}
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition("=")
        if name.strip() in fields:
            found[fields[name.strip()]] = int(value.strip().replace(",", ""))
    return found or None


def anonymous_by_mapping() -> dict[str, int]:
    """The process's anonymous resident memory in MiB by kind of mapping: glibc's main heap
    (`heap`), its other arenas' heaps (`glibc_heaps`), stacks, file-backed mappings' private copies
    (`file`) and anonymous mappings of any other allocator (`other`: CPython's arenas, mimalloc,
    jemalloc, large mallocs served by `mmap`)."""
    kib: dict[str, int] = {"heap": 0, "glibc_heaps": 0, "stack": 0, "file": 0, "other": 0}
    kind = "other"
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            first = line.split(maxsplit=6)
            if "-" in first[0] and not first[0].endswith(":"):  # a mapping's header line
                start, end = (int(x, 16) for x in first[0].split("-"))
                path = first[5].strip() if len(first) > 5 else ""
                if path == "[heap]":
                    kind = "heap"
                elif path.startswith("[stack"):
                    kind = "stack"
                elif path:
                    kind = "file"
                elif start % GLIBC_HEAP == 0 and end - start <= GLIBC_HEAP:
                    kind = "glibc_heaps"
                else:
                    kind = "other"
            elif first[0] == "Anonymous:":
                kib[kind] += int(first[1])
    return {name: value >> 10 for name, value in kib.items()}


def sample(started: float) -> dict[str, Any]:
    row: dict[str, Any] = {"t": round(time.time() - started, 1), "wall": time.time()}
    row["rss_mib"] = (status_kib("VmRSS") or 0) >> 10
    row["anon_mib"] = (status_kib("RssAnon") or 0) >> 10
    row["threads"] = status_kib("Threads")  # a count, not KiB: the same line format
    row["python_blocks"] = sys.getallocatedblocks()
    row["anon_by_mapping"] = anonymous_by_mapping()
    readers = (
        ("glibc", glibc_arenas),
        ("jemalloc", jemalloc_stats),
        ("preloaded_jemalloc", preloaded_jemalloc_stats),
        ("pymalloc", pymalloc_arenas),
    )
    for key, read in readers:
        value = read()
        if value is not None:
            row[key] = value
    return row


def heap_dump(path: Path) -> str:
    """Ask a preloaded jemalloc (unprefixed `mallctl`) with its profiler on to dump the live heap."""
    try:
        mallctl = ctypes.CDLL(None).mallctl
    except AttributeError:
        return "no jemalloc preloaded"
    name = ctypes.c_char_p(str(path).encode())
    mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    failed = mallctl(b"prof.dump", None, None, ctypes.byref(name), ctypes.sizeof(name))
    return f"prof.dump failed: {failed}" if failed else str(path)


def record() -> None:
    started = time.time()
    dumps = sorted(float(s) for s in os.environ.get("SERVE_MEMORY_HEAP_DUMPS", "").split(",") if s)
    while True:
        time.sleep(EVERY)
        if dumps and time.time() - started >= dumps[0]:
            at = int(dumps.pop(0))
            row_dump = heap_dump(OUT.with_name(f"heap-{at}.prof"))
            with OUT.open("a") as out:
                out.write(json.dumps({"t": round(time.time() - started, 1), "heap_dump": row_dump}) + "\n")
        try:
            row = sample(started)
        except Exception as exc:  # never let the probe take the service down
            row = {"t": round(time.time() - started, 1), "error": repr(exc)}
        with OUT.open("a") as out:
            out.write(json.dumps(row) + "\n")


def main() -> None:
    threading.Thread(target=record, name="memory-probe", daemon=True).start()
    from collector.cli import main as ragpulse

    sys.exit(ragpulse())


if __name__ == "__main__":
    main()
