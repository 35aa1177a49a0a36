"""The knowledge base and the golden cases shipped with the shop assistant (YAML files beside this module)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
KNOWLEDGE_BASE_FILE = HERE / "knowledge_base.yaml"
CASES_FILE = HERE / "cases.yaml"
POLICY_INDEX = "store-policies"
# The index `degraded` mode queries by mistake.
WRONG_INDEX = "store-blog"


@dataclass(frozen=True)
class KbDocument:
    """One document of an index: a stable id, a title and 1-3 factual sentences."""

    id: str
    title: str
    content: str


@dataclass(frozen=True)
class Case:
    """A question with the documents that answer it and a reference answer."""

    id: str
    question: str
    expected_documents: tuple[str, ...]
    expected_answer: str


def _read_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def load_indexes(path: Path = KNOWLEDGE_BASE_FILE) -> dict[str, list[KbDocument]]:
    """Every index of the knowledge base file, by name, documents in file order."""
    data = _read_yaml(path)
    return {
        name: [
            KbDocument(id=str(d["id"]), title=str(d.get("title", d["id"])), content=str(d["content"]).strip())
            for d in docs
        ]
        for name, docs in data["indexes"].items()
    }


def load_cases(path: Path = CASES_FILE) -> list[Case]:
    """The question set (`cases: [{id, question, expected_documents, expected_answer}]`)."""
    data = _read_yaml(path)
    items = data["cases"] if isinstance(data, dict) else data
    return [
        Case(
            id=str(item["id"]),
            question=str(item["question"]),
            expected_documents=tuple(str(d) for d in item.get("expected_documents") or ()),
            expected_answer=str(item.get("expected_answer") or ""),
        )
        for item in items
    ]
