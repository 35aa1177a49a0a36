"""Setting `judge.examples.<evaluator>` in a config file (`ragpulse align --write`), keeping the
user's comments and layout where the file allows it.

The file is not rewritten: the key's lines are inserted where they belong (`insert_examples_key`),
the only edit a block-style file needs, and the result is read back to check that it says exactly
what the file said plus the key. A layout this edit does not handle (a flow-style `judge: {...}`, or
`examples` given in flow style) is rewritten from its parsed content instead, which loses its
comments: `set_examples_key` says which happened, and the command says it to the user.
"""

from __future__ import annotations

import copy
import json
import re
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
    """A copy of parsed config `data` with `judge.examples.<evaluator>` set to `value`."""
    result: dict[str, Any] = copy.deepcopy(data) if isinstance(data, dict) else {}
    judge = result.get("judge")
    if not isinstance(judge, dict):
        judge = result["judge"] = {}
    examples = judge.get("examples")
    if not isinstance(examples, dict):
        examples = judge["examples"] = {}
    examples[evaluator] = value
    return result


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
        path.write_text(yaml.safe_dump(with_examples_key({}, evaluator, value), sort_keys=False), "utf-8")
        return ConfigEdit(path, "created")
    text = path.read_text(encoding="utf-8")
    data = yaml.safe_load(text) or {}
    wanted = with_examples_key(data, evaluator, value)
    if wanted == data:
        return ConfigEdit(path, "unchanged")
    edited = insert_examples_key(text, evaluator, value)
    if edited is not None and yaml.safe_load(edited) == wanted:
        path.write_text(edited, encoding="utf-8")
        return ConfigEdit(path, "inserted")
    path.write_text(yaml.safe_dump(wanted, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return ConfigEdit(path, "rewritten")
