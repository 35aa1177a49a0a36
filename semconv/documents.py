"""Document lists in every shape the conventions use, normalized to `Document`s."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from semconv.models import Document
from semconv.values import as_list, as_mapping, is_absent, number, parse_structured, text

ID_KEYS = ("document.id", "id", "id_", "doc_id", "db.query.result.id", "db.search.result.id")
CONTENT_KEYS = (
    "document.content",
    "content",
    "page_content",
    "text",
    "db.query.result.document",
    "document",
)
SCORE_KEYS = ("document.score", "score", "relevance_score", "db.query.result.score", "db.search.result.score")
DISTANCE_KEYS = ("distance", "document.distance", "db.query.result.distance", "db.search.result.distance")
METADATA_KEYS = ("document.metadata", "metadata", "db.query.result.metadata", "db.search.result.entity")


def _first(item: Mapping[str, Any], keys: Iterable[str]) -> Any:
    for key in keys:
        value = item.get(key)
        if not is_absent(value):
            return value
    return None


def _flatten_node(item: Mapping[str, Any]) -> Mapping[str, Any]:
    """LlamaIndex NodeWithScore (`{"node": {"id_", "text", "metadata"}, "score"}`) as a flat item."""
    node = as_mapping(item.get("node"))
    if node is None:
        return item
    merged = dict(node)
    merged.setdefault("id", node.get("id_"))
    if "score" in item:
        merged["score"] = item["score"]
    return merged


def document(item: Any, rank: int) -> Document | None:
    """One document from a mapping in any convention's field names; None when it is not one."""
    item = parse_structured(item)
    if isinstance(item, str):
        return Document(rank=rank, id=None, content=item, score=None, distance=None, metadata=None)
    if not isinstance(item, Mapping):
        return None
    item = _flatten_node(item)
    content = _first(item, CONTENT_KEYS)
    if isinstance(content, Mapping):  # {"document": {...}} nests the real fields one level down
        return document(content, rank)
    metadata = as_mapping(_first(item, METADATA_KEYS))
    doc_id = text(_first(item, ID_KEYS))
    return Document(
        rank=rank,
        id=doc_id,
        content=text(content),
        score=number(_first(item, SCORE_KEYS)),
        distance=number(_first(item, DISTANCE_KEYS)),
        metadata=metadata,
    )


def documents(items: Any) -> list[Document]:
    """A ranked list of documents (best first) from a list, JSON text or `{"documents": [...]}`."""
    parsed = parse_structured(items)
    if isinstance(parsed, Mapping):
        for key in ("documents", "nodes", "source_nodes", "results"):
            if key in parsed:
                return documents(parsed[key])
        return []
    listed = as_list(parsed)
    if not listed:
        return []
    result: list[Document] = []
    for item in listed:
        doc = document(item, len(result) + 1)
        if doc is not None:
            result.append(doc)
    return result


def fill_ids(docs: list[Document], output_docs: list[Document]) -> list[Document]:
    """Resolve ids in DESIGN §5 order: own id; the id of the same-rank document in the span's
    output JSON (LangChain `Document.id`); metadata `id`; metadata `source`. Never invented."""
    same_list = len(output_docs) == len(docs)
    for i, doc in enumerate(docs):
        if doc.id is not None:
            continue
        if same_list and output_docs[i].id is not None:
            doc.id = output_docs[i].id
        elif doc.metadata and not is_absent(doc.metadata.get("id")):
            doc.id = text(doc.metadata["id"])
        elif doc.metadata and not is_absent(doc.metadata.get("source")):
            doc.id = text(doc.metadata["source"])
    return docs
