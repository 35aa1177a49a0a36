"""Document lists in every shape the conventions use, normalized to `Document`s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from semconv.construct import builder
from semconv.models import Document
from semconv.values import as_list, as_mapping, is_absent, number, parse_structured, scalar_text, text

# `_id` / `_score` / `_source`: Elasticsearch and OpenSearch hits; `file_id`: OpenAI file search
# results (chunks of one file share it, so it comes last); `payload`: Qdrant points.
ID_KEYS = (
    "document.id",
    "id",
    "id_",
    "doc_id",
    "db.query.result.id",
    "db.search.result.id",
    "_id",
    "file_id",
)
CONTENT_KEYS = (
    "document.content",
    "content",
    "page_content",
    "text",
    "db.query.result.document",
    "document",
)
SCORE_KEYS = (
    "document.score",
    "score",
    "relevance_score",
    "db.query.result.score",
    "db.search.result.score",
    "_score",
)
DISTANCE_KEYS = ("distance", "document.distance", "db.query.result.distance", "db.search.result.distance")
METADATA_KEYS = (
    "document.metadata",
    "metadata",
    "db.query.result.metadata",
    "db.search.result.entity",
    "_source",
    "payload",
    "attributes",
)
# Where a store keeps a hit's text when the hit itself has none (Pinecone `metadata.text`,
# Elasticsearch `_source.content`, Qdrant `payload.text`).
NESTED_CONTENT_KEYS = ("text", "content", "page_content", "chunk", "body")


# `Document.model_construct(rank=, id=, content=, score=, distance=, metadata=)`, positionally.
_document = builder(
    Document,
    ("rank", "id", "content", "score", "distance", "metadata"),
    (1, "id", "text", 0.5, None, {"source": "kb"}),
)

# Each field name of every convention -> (Document field, precedence: lower wins).
_FIELD_OF: dict[str, tuple[str, int]] = {
    key: (name, rank)
    for name, keys in (
        ("id", ID_KEYS),
        ("content", CONTENT_KEYS),
        ("score", SCORE_KEYS),
        ("distance", DISTANCE_KEYS),
        ("metadata", METADATA_KEYS),
    )
    for rank, key in enumerate(keys)
}


def _fields(item: Mapping[Any, Any]) -> dict[str, Any]:
    """The best value of each document field present in `item` (one pass over its keys). The keys
    may be of any type: a Python-repr text (`{0: None}`) parses to non-text keys, which name no
    field (and the compiled module checks declared types, so they are not declared `str`)."""
    best: dict[str, tuple[int, Any]] = {}
    for key, value in item.items():
        slot = _FIELD_OF.get(key) if isinstance(key, str) else None
        if slot is None or is_absent(value):
            continue
        name, rank = slot
        current = best.get(name)
        if current is None or rank < current[0]:
            best[name] = (rank, value)
    return {name: value for name, (_, value) in best.items()}


def _flatten_node(item: Mapping[Any, Any]) -> Mapping[Any, Any]:
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
        return _document(rank, None, item, None, None, None)
    if not isinstance(item, Mapping):
        return None
    if "node" in item:
        item = _flatten_node(item)
    fields = _fields(item)
    content = fields.get("content")
    if isinstance(content, Mapping):  # {"document": {...}} nests the real fields one level down
        return document(content, rank)
    if isinstance(content, list):  # content parts: [{"type": "text", "text": "..."}]
        content = _parts_text(content)
    metadata = fields.get("metadata")
    if content is None and metadata is not None:
        content = _nested_content(metadata)
    # Every value below is already normalized to the field's type (and rank >= 1 by the callers),
    # so validation is skipped: it was a tenth of the mapping time.
    return _document(
        rank,
        scalar_text(fields.get("id")),
        text(content),
        number(fields.get("score")),
        number(fields.get("distance")),
        as_mapping(metadata) if metadata is not None else None,
    )


def _parts_text(parts: list[Any]) -> str | None:
    texts = [text(p.get("text")) if isinstance(p, Mapping) else text(p) for p in parts]
    return "\n".join(t for t in texts if t) or None


def _nested_content(metadata: Any) -> str | None:
    found = as_mapping(metadata)
    if not found:
        return None
    for key in NESTED_CONTENT_KEYS:
        value = found.get(key)
        if isinstance(value, str) and value:
            return value
    return None


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


def fill_ids(docs: list[Document], other: list[Document]) -> list[Document]:
    """Give each document without an id the id of the same-rank document of `other`, when both
    lists are the same length. Only for two serializations of one list on one span (the flattened
    documents and the span's output JSON with LangChain's `Document.id`), where rank is identity."""
    if len(other) != len(docs):
        return docs
    for doc, twin in zip(docs, other, strict=True):
        if doc.id is None and twin.id is not None:
            doc.id = twin.id
    return docs


def fill_ids_by_content(docs: list[Document], results: list[Document]) -> list[Document]:
    """Give each document without an id the id of a database result with exactly the same text.

    For a retriever whose documents carry no id and a vector-database span below it whose results
    do: the retriever may reorder, drop or rewrite what the database returned (MMR, score
    thresholds, compressors, several queries), so rank says nothing and only the text links the
    two. A text the database returned under several ids hands them out in the database's order (the
    last one repeats); a document whose text is not among the results keeps no id from them."""
    ids_by_text: dict[str, list[str]] = {}
    for result in results:
        if result.id is not None and result.content is not None:
            ids = ids_by_text.setdefault(result.content, [])
            if result.id not in ids:
                ids.append(result.id)
    for doc in docs:
        if doc.id is not None or doc.content is None:
            continue
        found = ids_by_text.get(doc.content)
        if found:
            doc.id = found.pop(0) if len(found) > 1 else found[0]
    return docs


def fill_metadata_ids(docs: list[Document]) -> list[Document]:
    """Last resorts for an id: metadata `id`, then metadata `source`. Never an invented one."""
    for doc in docs:
        if doc.id is not None or not doc.metadata:
            continue
        for key in ("id", "source"):
            found = scalar_text(doc.metadata.get(key))
            if found is not None:
                doc.id = found
                break
    return docs
