"""Setting `judge.examples.<evaluator>` in a config file (`ragpulse align --write`), keeping the
user's comments and layout where the file allows it.

The file is not rewritten: the key's lines are inserted where they belong (`insert_examples_key`),
the only edit a block-style file needs, and the result is read back to check that it says exactly
what the file said plus the key. A layout this edit does not handle (a flow-style `judge: {...}`, or
`examples` given in flow style, an anchor on `judge`), and any edit whose result does not read back
as that (or is no YAML at all), is rewritten from its parsed content instead, which loses its
comments: `set_examples_key` says which happened, and the command says it to the user.

Files are replaced whole (`write_atomically`: a temporary file in the same directory, then
`os.replace`), so a reader, or a crash, never sees half a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

_TOP_JUDGE = re.compile(r"^judge:[ \t]*(#.*)?$")
_INDENT = re.compile(r"^([ \t]*)")


@dataclass(frozen=True)
class ConfigEdit:
    """What `set_examples_key` did to the file."""

    path: Path
    how: Literal["unchanged", "inserted", "rewritten", "created"]


def with_examples_key(data: Any, evaluator: str, value: str) -> dict[str, Any]:
    """A copy of parsed config `data` with `judge.examples.<evaluator>` set to `value`; `data` is
    not changed. The mappings on the key's path are new ones: a YAML alias of `judge` (`other: *j`)
    shares the parsed mapping with it, and must not get the key too."""
    result: dict[str, Any] = dict(data) if isinstance(data, dict) else {}
    judge = result.get("judge")
    judge = judge if isinstance(judge, dict) else {}
    examples = judge.get("examples")
    examples = examples if isinstance(examples, dict) else {}
    result["judge"] = {**judge, "examples": {**examples, evaluator: value}}
    return result


def write_atomically(path: Path, text: str) -> None:
    """Replace the file at `path` with `text` in one step: written to a temporary file in the same
    directory, flushed to disk, then renamed over it (`os.replace`). A reader sees the old file or
    the new one, never a part; a failed write leaves the old one. The old file's permission bits
    are kept (a new file gets the umask's); a symbolic link is followed, not replaced."""
    target = Path(os.path.realpath(path))
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = None
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def _reads_as(text: str, wanted: dict[str, Any]) -> bool:
    """Whether `text` is YAML that says exactly `wanted`."""
    try:
        return bool(yaml.safe_load(text) == wanted)
    except yaml.YAMLError:
        return False


def _meaningful(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _indent(line: str) -> str:
    found = _INDENT.match(line)
    return found.group(1) if found else ""


def insert_examples_key(text: str, evaluator: str, value: str) -> str | None:
    """`text` with the lines of `judge.examples.<evaluator>: value` inserted, every other line kept;
    None when the file's layout is not a block-style one this edit handles. The caller checks the
    result (`set_examples_key`)."""
    data = yaml.safe_load(text) if text.strip() else {}
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return None
    entry = f"{evaluator}: {json.dumps(value, ensure_ascii=False)}"
    lines = text.splitlines(keepends=True)
    if "judge" not in data:
        separator = "" if not text or text.endswith("\n") else "\n"
        return f"{text}{separator}judge:\n  examples:\n    {entry}\n"
    judge = data["judge"]
    if judge is not None and not isinstance(judge, dict):
        return None
    start = next((i for i, line in enumerate(lines) if _TOP_JUDGE.match(line.rstrip("\r\n"))), None)
    if start is None:
        return None  # flow style (`judge: {model: x}`) or something stranger
    end = next(
        (i for i in range(start + 1, len(lines)) if _meaningful(lines[i]) and not _indent(lines[i])),
        len(lines),
    )
    children = [i for i in range(start + 1, end) if _meaningful(lines[i])]
    indent = _indent(lines[children[0]]) if children else "  "
    examples = judge.get("examples") if judge else None
    if isinstance(examples, dict) and evaluator in examples:
        return None  # a value to replace, not a line to add: left to the rewrite
    if not judge or "examples" not in judge:
        inserted = f"{indent}examples:\n{indent}{indent}{entry}\n"
        return "".join([*lines[: start + 1], inserted, *lines[start + 1 :]])
    examples_line = re.compile(rf"^{re.escape(indent)}examples:[ \t]*(#.*)?$")
    at = next((i for i in children if examples_line.match(lines[i].rstrip("\r\n"))), None)
    if at is None:
        return None  # `examples: {...}` in flow style
    deeper = [i for i in range(at + 1, end) if _meaningful(lines[i])]
    child = (
        _indent(lines[deeper[0]]) if deeper and len(_indent(lines[deeper[0]])) > len(indent) else indent * 2
    )
    return "".join([*lines[: at + 1], f"{child}{entry}\n", *lines[at + 1 :]])


def set_examples_key(path: Path, evaluator: str, value: str) -> ConfigEdit:
    """Set `judge.examples.<evaluator>` to `value` in the config file at `path` (created when
    absent): lines inserted when the layout allows (comments kept), else the file rewritten from its
    parsed content (comments lost); nothing written when the key already says `value`."""
    if not path.exists():
        write_atomically(path, yaml.safe_dump(with_examples_key({}, evaluator, value), sort_keys=False))
        return ConfigEdit(path, "created")
    text = path.read_text(encoding="utf-8")
    data = yaml.safe_load(text) or {}
    wanted = with_examples_key(data, evaluator, value)
    if wanted == data:
        return ConfigEdit(path, "unchanged")
    edited = insert_examples_key(text, evaluator, value)
    # An insertion the layout defeated reads back as something else, or as no YAML at all.
    if edited is not None and _reads_as(edited, wanted):
        write_atomically(path, edited)
        return ConfigEdit(path, "inserted")
    write_atomically(path, yaml.safe_dump(wanted, sort_keys=False, allow_unicode=True))
    return ConfigEdit(path, "rewritten")
