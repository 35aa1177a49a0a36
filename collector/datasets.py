"""Golden cases (`ragpulse datasets load`): question -> expected document ids / expected answer.

A file is YAML (`cases: [...]` or a bare list) or JSONL, one case per item:
`{id, question, expected_documents: [...], expected_answer, ...}` (`case_id` is accepted for `id`;
other keys are kept as metadata). Traces match a case by `rag.case.id`, else by normalized question.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from collector.schema.tables import CASES

_NOT_WORD = re.compile(r"[^\w\s]+")
_SPACE = re.compile(r"\s+")


class DatasetError(ValueError):
    """A cases file that cannot be loaded; the message names the file and the case."""


class Case(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, coerce_numbers_to_str=True)

    id: str = Field(alias="case_id", min_length=1)
    question: str = Field(min_length=1)
    expected_documents: list[str] | None = None
    expected_answer: str | None = None


def normalize_question(question: str) -> str:
    """Case-, punctuation- and whitespace-insensitive form used to match traces to cases."""
    return _SPACE.sub(" ", _NOT_WORD.sub(" ", question.lower())).strip()


def _items(path: Path) -> list[Any]:
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc.strerror}") from None
    if path.suffix == ".jsonl":
        items = []
        for number, line in enumerate(raw.splitlines(), 1):
            if line.strip():
                try:
                    items.append(orjson.loads(line))
                except orjson.JSONDecodeError as exc:
                    raise DatasetError(f"{path}:{number}: not valid JSON: {exc}") from None
        return items
    try:
        document = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise DatasetError(f"{path} is not valid YAML: {exc}") from None
    if isinstance(document, dict):
        document = document.get("cases")
    if not isinstance(document, list):
        raise DatasetError(f"{path}: expected a list of cases (or a mapping with `cases:`)")
    return document


def read_cases(path: Path) -> list[Case]:
    """Every case of a file, validated; the first bad case raises DatasetError naming it."""
    return parse_cases(_items(path), str(path))


def parse_cases(items: Any, source: str) -> list[Case]:
    """Validated cases from a list of mappings; the first bad case raises DatasetError naming it."""
    if not isinstance(items, list):
        raise DatasetError(f"{source}: expected a list of cases")
    cases = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        if isinstance(item, dict) and "id" in item and "case_id" not in item:
            item = {"case_id": item["id"], **{k: v for k, v in item.items() if k != "id"}}
        try:
            case = Case.model_validate(item)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"]).replace("case_id", "id") or "case"
            raise DatasetError(f"{source}: case {index + 1}: {where}: {problem['msg']}") from None
        if case.id in seen:
            raise DatasetError(f"{source}: case {index + 1}: duplicate id {case.id!r}")
        seen.add(case.id)
        cases.append(case)
    return cases


def cases_table(cases: list[Case], source: str) -> pa.Table:
    """Cases as rows of the `cases` table, for `Store.write_cases`."""
    now_us = int(time.time() * 1_000_000)
    columns: dict[str, list[Any]] = {
        "case_id": [c.id for c in cases],
        "question": [c.question for c in cases],
        "normalized_question": [normalize_question(c.question) for c in cases],
        "expected_documents": [
            None if c.expected_documents is None else orjson.dumps(c.expected_documents).decode()
            for c in cases
        ],
        "expected_answer": [c.expected_answer for c in cases],
        "metadata": [orjson.dumps(c.model_extra or {}).decode() for c in cases],
        "source": [source] * len(cases),
        "loaded_at": [now_us] * len(cases),
    }
    return CASES.arrow_table(columns, len(cases))
