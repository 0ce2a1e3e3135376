"""The manifest and chunk store: one SQLite file (WAL mode, synchronous=FULL).

It records, per tenant, which documents were ingested, which chunk ids and content hashes
each produced, the chunk fields the query path returns, and tombstones of removed chunks
until compaction. It is written LAST in an upsert, after the dense and lexical indexes: a
crash in between leaves the store behind the indexes, so a retry re-does the work (upserts
and deletes are idempotent) and an acknowledged write is never lost.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ragindex.errors import IdentityMismatch, InvalidInput
from ragindex.filters import TermExpr, TermPostings
from ragindex.types import Chunk, Document, ModelIdentity, validate_tenant

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    tenant TEXT NOT NULL, source TEXT NOT NULL, doc_id TEXT NOT NULL,
    title TEXT NOT NULL, updated TEXT, metadata TEXT NOT NULL,
    PRIMARY KEY (tenant, source, doc_id)
);
CREATE TABLE IF NOT EXISTS chunks (
    tenant TEXT NOT NULL, chunk_id TEXT NOT NULL, source TEXT NOT NULL, doc_id TEXT NOT NULL,
    n INTEGER NOT NULL, title TEXT NOT NULL, text TEXT NOT NULL, content_hash TEXT NOT NULL,
    context TEXT, updated TEXT, metadata TEXT NOT NULL, acl TEXT,
    PRIMARY KEY (tenant, chunk_id)
);
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks (tenant, source, doc_id);
CREATE TABLE IF NOT EXISTS tombstones (
    tenant TEXT NOT NULL, chunk_id TEXT NOT NULL, PRIMARY KEY (tenant, chunk_id)
);
"""
_CHUNK_COLS = (
    "chunk_id, source, doc_id, n, title, text, content_hash, context, updated, metadata, acl"
)
_IDENTITY_KEY = "embedding_identity"
_SQL_VARS = 500  # ids per IN (...) query, well under SQLite's variable limit


@dataclass(frozen=True)
class Diff:
    """What an upsert of `document` changes: `added` (new or changed) chunks must be embedded."""

    document: Document
    added: list[Chunk]
    unchanged: list[Chunk]
    removed: list[str]


@dataclass(frozen=True)
class DocumentRecord:
    """A document as the manifest knows it, with its chunk ids and content hashes."""

    source: str
    doc_id: str
    title: str
    updated: str | None
    chunks: dict[str, str]  # chunk id -> content hash


def compute_diff(document: Document, stored: dict[str, str], new_chunks: list[Chunk]) -> Diff:
    """Pure diff of a document's stored {chunk id: hash} against its new chunks."""
    added = [c for c in new_chunks if stored.get(c.chunk_id) != c.content_hash]
    unchanged = [c for c in new_chunks if stored.get(c.chunk_id) == c.content_hash]
    new_ids = {c.chunk_id for c in new_chunks}
    removed = sorted((cid for cid in stored if cid not in new_ids), key=_natural)
    return Diff(document, added, unchanged, removed)


def _natural(chunk_id: str) -> tuple[str, int]:
    head, _, n = chunk_id.rpartition(":")
    return (head, int(n)) if n.isdigit() else (chunk_id, -1)


def _row_to_chunk(tenant: str, row: sqlite3.Row) -> Chunk:
    return Chunk(
        tenant_id=tenant,
        chunk_id=row["chunk_id"],
        source=row["source"],
        doc_id=row["doc_id"],
        n=row["n"],
        title=row["title"],
        text=row["text"],
        content_hash=row["content_hash"],
        context=row["context"],
        updated=row["updated"],
        metadata=json.loads(row["metadata"]),
        acl=None if row["acl"] is None else tuple(json.loads(row["acl"])),
    )


class ChunkStore:
    """Manifest + chunk store for every tenant of one index generation."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._postings: dict[str, TermPostings] = {}  # built on first filtered search
        self._writes = 0  # a postings build that raced a write is not kept
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(chunks)")}
        if "acl" not in columns:  # a store written before ACLs: every chunk is tenant-wide
            self._db.execute("ALTER TABLE chunks ADD COLUMN acl TEXT")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: all of it commits, or none of it."""
        with self._lock:
            self._postings.clear()  # rebuilt from the committed rows on the next filter
            self._writes += 1
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _query(self, sql: str, args: Sequence[object] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, tuple(args)).fetchall()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # identity -------------------------------------------------------------------------------

    def identity(self) -> ModelIdentity | None:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (_IDENTITY_KEY,))
        return ModelIdentity.from_dict(json.loads(rows[0]["value"])) if rows else None

    def bind_identity(self, identity: ModelIdentity) -> None:
        """Stamp the embedding identity on a new store; refuse a different one later."""
        with self._tx() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (_IDENTITY_KEY,)).fetchone()
            if row is None:
                value = json.dumps(identity.to_dict(), sort_keys=True)
                db.execute("INSERT INTO meta VALUES (?, ?)", (_IDENTITY_KEY, value))
                return
            stored = ModelIdentity.from_dict(json.loads(row["value"]))
        if stored != identity:
            raise IdentityMismatch(
                f"chunk store {self.path} was built with {stored}, not {identity}:"
                " a new model needs a new index generation"
            )

    # manifest -------------------------------------------------------------------------------

    def stored_hashes(self, tenant_id: str, source: str, doc_id: str) -> dict[str, str]:
        rows = self._query(
            "SELECT chunk_id, content_hash FROM chunks WHERE tenant = ? AND source = ?"
            " AND doc_id = ?",
            (validate_tenant(tenant_id), source, doc_id),
        )
        return {r["chunk_id"]: r["content_hash"] for r in rows}

    def diff(self, tenant_id: str, document: Document, new_chunks: Sequence[Chunk]) -> Diff:
        """Compare a document's new chunks with what the store holds for it."""
        tenant = validate_tenant(tenant_id)
        for c in new_chunks:
            if (c.tenant_id, c.source, c.doc_id) != (tenant, document.source, document.doc_id):
                raise InvalidInput(
                    f"chunk {c.chunk_id} of tenant {c.tenant_id} does not belong to"
                    f" document {document.key} of tenant {tenant}"
                )
        if len({c.chunk_id for c in new_chunks}) != len(new_chunks):
            raise InvalidInput(f"document {document.key}: duplicate chunk ids")
        stored = self.stored_hashes(tenant, document.source, document.doc_id)
        return compute_diff(document, stored, list(new_chunks))

    def apply(self, tenant_id: str, *diffs: Diff) -> None:
        """Record the diffs in one transaction: documents, chunks and tombstones together."""
        tenant = validate_tenant(tenant_id)
        with self._tx() as db:
            for d in diffs:
                doc = d.document
                db.execute(
                    "INSERT OR REPLACE INTO documents VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        tenant,
                        doc.source,
                        doc.doc_id,
                        doc.title,
                        doc.updated,
                        json.dumps(doc.metadata, sort_keys=True),
                    ),
                )
                self._remove(db, tenant, d.removed)
                current = d.added + d.unchanged
                db.executemany(
                    f"INSERT OR REPLACE INTO chunks (tenant, {_CHUNK_COLS})"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            tenant,
                            c.chunk_id,
                            c.source,
                            c.doc_id,
                            c.n,
                            c.title,
                            c.text,
                            c.content_hash,
                            c.context,
                            c.updated,
                            json.dumps(c.metadata, sort_keys=True),
                            None if c.acl is None else json.dumps(c.acl),
                        )
                        for c in current
                    ],
                )
                db.executemany(
                    "DELETE FROM tombstones WHERE tenant = ? AND chunk_id = ?",
                    [(tenant, c.chunk_id) for c in d.added],
                )

    @staticmethod
    def _remove(db: sqlite3.Connection, tenant: str, chunk_ids: Sequence[str]) -> None:
        db.executemany(
            "DELETE FROM chunks WHERE tenant = ? AND chunk_id = ?",
            [(tenant, cid) for cid in chunk_ids],
        )
        db.executemany(
            "INSERT OR IGNORE INTO tombstones VALUES (?, ?)", [(tenant, cid) for cid in chunk_ids]
        )

    def delete_document(self, tenant_id: str, source: str, doc_id: str) -> list[str]:
        """Forget a document; its chunks become tombstones. Returns the removed chunk ids."""
        tenant = validate_tenant(tenant_id)
        with self._tx() as db:
            rows = db.execute(
                "SELECT chunk_id FROM chunks WHERE tenant = ? AND source = ? AND doc_id = ?",
                (tenant, source, doc_id),
            ).fetchall()
            removed = sorted((r["chunk_id"] for r in rows), key=_natural)
            self._remove(db, tenant, removed)
            db.execute(
                "DELETE FROM documents WHERE tenant = ? AND source = ? AND doc_id = ?",
                (tenant, source, doc_id),
            )
        return removed

    # reads ----------------------------------------------------------------------------------

    def get_chunks(self, tenant_id: str, chunk_ids: Sequence[str]) -> dict[str, Chunk]:
        """The live chunks among `chunk_ids` (unknown or tombstoned ids are absent)."""
        tenant = validate_tenant(tenant_id)
        ids = list(dict.fromkeys(chunk_ids))
        out: dict[str, Chunk] = {}
        for i in range(0, len(ids), _SQL_VARS):
            part = ids[i : i + _SQL_VARS]
            marks = ", ".join("?" * len(part))
            rows = self._query(
                f"SELECT {_CHUNK_COLS} FROM chunks WHERE tenant = ? AND chunk_id IN ({marks})",
                [tenant, *part],
            )
            out.update((r["chunk_id"], _row_to_chunk(tenant, r)) for r in rows)
        return out

    def allowed_ids(self, tenant_id: str, access: TermExpr) -> frozenset[str]:
        """The live chunk ids of a tenant that `access` allows (ragindex.filters)."""
        tenant = validate_tenant(tenant_id)
        with self._lock:
            postings, writes = self._postings.get(tenant), self._writes
        if postings is None:
            postings = TermPostings()
            rows = self._query(f"SELECT {_CHUNK_COLS} FROM chunks WHERE tenant = ?", (tenant,))
            for row in rows:
                postings.add(_row_to_chunk(tenant, row))
            with self._lock:
                if writes == self._writes:
                    self._postings[tenant] = postings
        return postings.select(access)

    def count(self, tenant_id: str) -> int:
        """Live chunks of a tenant."""
        rows = self._query(
            "SELECT COUNT(*) AS n FROM chunks WHERE tenant = ?", (validate_tenant(tenant_id),)
        )
        return int(rows[0]["n"])

    def documents(self, tenant_id: str) -> list[DocumentRecord]:
        """Every document of a tenant with its chunk ids and hashes, ordered by key."""
        tenant = validate_tenant(tenant_id)
        docs = self._query(
            "SELECT source, doc_id, title, updated FROM documents WHERE tenant = ?"
            " ORDER BY source, doc_id",
            (tenant,),
        )
        chunks = self._query(
            "SELECT source, doc_id, chunk_id, content_hash FROM chunks WHERE tenant = ?"
            " ORDER BY source, doc_id, n",
            (tenant,),
        )
        by_doc: dict[tuple[str, str], dict[str, str]] = {}
        for r in chunks:
            by_doc.setdefault((r["source"], r["doc_id"]), {})[r["chunk_id"]] = r["content_hash"]
        return [
            DocumentRecord(
                d["source"],
                d["doc_id"],
                d["title"],
                d["updated"],
                by_doc.get((d["source"], d["doc_id"]), {}),
            )
            for d in docs
        ]

    def tombstones(self, tenant_id: str) -> list[str]:
        """Chunk ids removed since the last compaction of this tenant."""
        rows = self._query(
            "SELECT chunk_id FROM tombstones WHERE tenant = ?", (validate_tenant(tenant_id),)
        )
        return sorted((r["chunk_id"] for r in rows), key=_natural)

    def clear_tombstones(self, tenant_id: str, chunk_ids: Sequence[str]) -> None:
        """Forget tombstones once compaction has rebuilt the indexes without those chunks."""
        tenant = validate_tenant(tenant_id)
        with self._tx() as db:
            db.executemany(
                "DELETE FROM tombstones WHERE tenant = ? AND chunk_id = ?",
                [(tenant, cid) for cid in chunk_ids],
            )
