"""Keys and values of the `docs` and `chunks.<generation>` topics: pure encode/decode.

- `docs`: key `tenant/source/doc_id`; value the document as JSON, or None (a tombstone) to
  delete it. Compaction keeps each document's newest version: the topic is the corpus.
- `chunks.<generation>`: key `tenant/chunk_id`; value a little-endian u32 header length, the
  JSON header (chunk fields and content hash), then the float32 vector. None deletes the chunk.

Ids cannot contain `/` or `:` (ID_PART_RE, TENANT_RE), so keys split back unambiguously.
Values are UTF-8 JSON (not ASCII-escaped, which takes 6-12 bytes per non-ASCII character), and
a `docs` record is at most MAX_RECORD_BYTES, the size every log takes in one record.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ragindex.errors import InvalidInput, TooLarge
from ragindex.protocols import Vectors
from ragindex.topics import MAX_RECORD_BYTES, partition_for_key
from ragindex.types import ID_PART_RE, Chunk, Document

_HEADER_LEN = struct.Struct("<I")


@dataclass(frozen=True)
class DocKey:
    tenant_id: str
    source: str
    doc_id: str

    def encode(self) -> bytes:
        return f"{self.tenant_id}/{self.source}/{self.doc_id}".encode()

    @classmethod
    def decode(cls, key: bytes) -> DocKey:
        tenant, source, doc_id = key.decode().split("/", 2)
        return cls(tenant, source, doc_id)


def doc_key(tenant_id: str, source: str, doc_id: str) -> bytes:
    return DocKey(tenant_id, source, doc_id).encode()


def encode_document(doc: Document) -> bytes:
    return json.dumps(asdict(doc), separators=(",", ":"), ensure_ascii=False).encode()


DocsRecord = tuple[int, bytes, bytes | None]  # (partition, key, value) of a `docs` record


def docs_records(
    tenant_id: str, documents: Sequence[Document], partitions: int
) -> list[DocsRecord]:
    """The `docs` records that write a tenant's (validated) documents, in order, each in its
    key's partition; TooLarge, naming the first document over MAX_RECORD_BYTES, for none."""
    records: list[DocsRecord] = []
    for doc in documents:
        key = doc_key(tenant_id, doc.source, doc.doc_id)
        value = encode_document(doc)
        if len(key) + len(value) > MAX_RECORD_BYTES:
            raise TooLarge(
                f"document {doc.key} takes {len(key) + len(value)} bytes as a log record (its"
                f" JSON in UTF-8), more than the limit of {MAX_RECORD_BYTES}: split it; nothing"
                " of this batch was written"
            )
        records.append((partition_for_key(key, partitions), key, value))
    return records


def docs_tombstone(tenant_id: str, source: str, doc_id: str, partitions: int) -> DocsRecord:
    """The `docs` record that deletes a document; InvalidInput for a malformed source or id."""
    for what, value in (("source", source), ("doc_id", doc_id)):
        if not isinstance(value, str) or not ID_PART_RE.fullmatch(value):
            raise InvalidInput(f"{what} {value!r} is malformed")
    key = doc_key(tenant_id, source, doc_id)
    return partition_for_key(key, partitions), key, None


def decode_document(value: bytes) -> Document:
    return Document(**json.loads(value))


def chunk_key(tenant_id: str, chunk_id: str) -> bytes:
    return f"{tenant_id}/{chunk_id}".encode()


def split_chunk_key(key: bytes) -> tuple[str, str]:
    """(tenant, chunk id) of a `chunks` key."""
    tenant, chunk_id = key.decode().split("/", 1)
    return tenant, chunk_id


def doc_of_chunk(chunk_id: str) -> tuple[str, str]:
    """(source, doc_id) of a chunk id `source:doc_id:n`."""
    source, doc_id, _ = chunk_id.split(":", 2)
    return source, doc_id


def encode_chunk(chunk: Chunk, vector: Vectors) -> bytes:
    header = json.dumps(asdict(chunk), separators=(",", ":")).encode()
    return _HEADER_LEN.pack(len(header)) + header + np.ascontiguousarray(vector, "<f4").tobytes()


def chunk_header(value: bytes) -> Chunk:
    """The chunk of a `chunks` value, without decoding its vector (BM25 view, manifest)."""
    (n,) = _HEADER_LEN.unpack_from(value)
    return Chunk(**json.loads(value[_HEADER_LEN.size : _HEADER_LEN.size + n]))


def decode_chunk(value: bytes, dimension: int) -> tuple[Chunk, Vectors]:
    """The chunk and its vector; InvalidInput if the vector is not `dimension` floats."""
    (n,) = _HEADER_LEN.unpack_from(value)
    chunk = chunk_header(value)
    vector = np.frombuffer(value, "<f4", offset=_HEADER_LEN.size + n).astype(np.float32)
    if vector.shape != (dimension,):
        raise InvalidInput(
            f"chunk {chunk.chunk_id} carries a {vector.shape[0]}-d vector;"
            f" the index is {dimension}-d"
        )
    return chunk, vector
