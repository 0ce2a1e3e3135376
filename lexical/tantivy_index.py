"""The embedded BM25 backend: a tantivy index on local disk.

One `TantivyIndex` owns the index's single writer (tantivy allows one per directory); every
write commits and reloads the reader before returning, so an acknowledged write is durable and
visible to the next search. Queries are never parsed: the text goes through the shared
analyzer and becomes term queries, so no user text can raise a syntax error. The tenant is a
required clause inside the query, scored 0 so that it leaves BM25 scores alone.

Title and body are separate fields, each with its own BM25 statistics; a query is the sum of
boosted per-field term scores (see documents.field_clauses), as on Elasticsearch. Both fields
are stored so that RM3 feedback can read its feedback hits' text, and with the rest of the chunk
(`chunk`, stored only) a search can answer its top hits' chunks (`with_chunks`) without a fetch
from the shards. An index made before the `chunk` field keeps working without it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import tantivy

from ragindex.config import Rm3Spec
from ragindex.errors import BackendUnavailable
from ragindex.filters import ACL_PREFIX, PUBLIC, AllExpr, AnyTerm, TermExpr
from ragindex.lexical.analysis import ANALYZER_NAME, build_analyzer
from ragindex.lexical.documents import (
    BODY_FIELD,
    FILTER_FIELD,
    TITLE_FIELD,
    FieldBoosts,
    doc_key,
    field_clauses,
    filter_terms,
    indexed_fields,
    is_searchable,
    validate_chunks,
    validate_ids,
    validate_search,
)
from ragindex.lexical.feedback import bm25_search
from ragindex.types import Chunk, ScoredId

_WRITER_HEAP_BYTES = 32_000_000
CHUNK_FIELD = "chunk"
# Chunk ids a reader keeps by document address (~150 bytes each): enough for every hit of a
# 100 k-chunk index; past it the reader forgets them and starts again.
CHUNK_IDS_KEPT = 200_000


def build_schema() -> tantivy.Schema:
    """title, body: analysed like ES `standard`, stored; tenant_id, chunk_id, key: exact;
    chunk: the chunk's other fields (JSON), stored and not indexed."""
    builder = tantivy.SchemaBuilder()
    for name in (TITLE_FIELD, BODY_FIELD):
        builder.add_text_field(name, stored=True, tokenizer_name=ANALYZER_NAME, index_option="freq")
    builder.add_text_field("tenant_id", stored=False, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("chunk_id", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("key", stored=False, tokenizer_name="raw", index_option="basic")
    builder.add_text_field(FILTER_FIELD, stored=False, tokenizer_name="raw", index_option="basic")
    builder.add_bytes_field(CHUNK_FIELD, stored=True, indexed=False)
    return builder.build()


def chunk_rest(chunk: Chunk) -> bytes:
    """What the `chunk` field stores: every field of the chunk but the two stored as text."""
    rest = asdict(chunk)
    del rest["title"], rest["text"]
    return json.dumps(rest, separators=(",", ":")).encode()


def stored_chunk(doc: tantivy.Document) -> Chunk:
    """The chunk a document of this schema was made from (see chunk_rest); a contextual
    chunk's text without the search prefix its body starts with (indexed_fields)."""
    title, body = ("".join(doc.get_all(f)) for f in (TITLE_FIELD, BODY_FIELD))
    rest = json.loads(doc[CHUNK_FIELD][0])
    prefix = rest.get("search_prefix", "")
    return Chunk(title=title, text=body[len(prefix) + 1 :] if prefix else body, **rest)


@dataclass(frozen=True)
class _Reader:
    """The searcher of one reload, and what searches learn about its documents: an address
    (segment, doc) names one document for the searcher's life (its segments never change).

    `chunk_ids`: the ids of the documents searches have hit, so that a hit's id is not read
    from the document store again (a stored document is read whole and decompressed: ~10 us,
    1 ms for a search's 100 hits, against 0.4 ms for the search itself at 100 k chunks).
    `public_only`: no document, live or deleted, has an ACL, so an access clause that lets
    public chunks through filters nothing and is left out (it would stop tantivy from
    pruning the BM25 disjunction: ~0.9 ms of a search's 3 at 100 k)."""

    searcher: tantivy.Searcher
    public_only: bool
    chunk_ids: dict[tuple[int, int], str] = field(default_factory=dict)
    sole_tenant: dict[str, bool] = field(default_factory=dict)  # holds_only, per tenant

    @classmethod
    def of(cls, index: tantivy.Index) -> _Reader:
        searcher = index.searcher()
        acl_terms = searcher.terms_with_prefix(FILTER_FIELD, ACL_PREFIX, limit=2)
        return cls(searcher, [term for term, _ in acl_terms] == [PUBLIC])

    def holds_only(self, tenant_id: str) -> bool:
        """`holds_only` of this reader's searcher, asked once per tenant."""
        found = self.sole_tenant.get(tenant_id)
        if found is None:
            found = self.sole_tenant[tenant_id] = holds_only(self.searcher, tenant_id)
        return found

    def chunk_id(self, address: tantivy.DocAddress, doc: tantivy.Document | None = None) -> str:
        """The id of the document at `address` (`doc`: that document, when already read)."""
        key = (address.segment_ord, address.doc)
        found = self.chunk_ids.get(key)
        if found is None:
            found = str((doc if doc is not None else self.searcher.doc(address))["chunk_id"][0])
            if len(self.chunk_ids) >= CHUNK_IDS_KEPT:
                self.chunk_ids.clear()
            self.chunk_ids[key] = found
        return found


class TantivyIndex:
    """LexicalIndex over a tantivy directory; see the module docstring for the guarantees."""

    def __init__(
        self,
        index: tantivy.Index,
        path: Path | None,
        read_only: bool = False,
        stores_chunks: bool = True,
        boosts: FieldBoosts | None = None,
        rm3: Rm3Spec | None = None,
        heap_bytes: int = _WRITER_HEAP_BYTES,
    ) -> None:
        self._index = index
        self.stores_chunks = stores_chunks
        self.boosts = boosts or FieldBoosts()
        self.rm3 = rm3
        self._schema = index.schema
        self._path = path
        self._lock = threading.Lock()
        self._read_only = read_only
        self._closed = False
        self._writer: tantivy.IndexWriter | None = None
        self._reader = _Reader.of(index)
        if read_only:
            return  # a reader of another process's writer; see reload()
        try:
            self._writer = index.writer(heap_bytes, 1)
        except ValueError as exc:
            raise BackendUnavailable(
                f"cannot open a writer on the tantivy index at {path}: {exc}"
                " (is another process or TantivyIndex using it?)"
            ) from exc

    @classmethod
    def open(
        cls,
        path: str | Path | None,
        read_only: bool = False,
        boosts: FieldBoosts | None = None,
        rm3: Rm3Spec | None = None,
        heap_bytes: int = _WRITER_HEAP_BYTES,
    ) -> TantivyIndex:
        """Open the index at `path`, creating it if absent; None keeps it in memory.

        `read_only` opens an existing index without taking the writer lock, for readers in
        other processes (Serve replicas); they see the writer's commits after `reload()`.
        `boosts` and `rm3` shape queries only, so readers of one index may differ in them.
        `heap_bytes` is the writer's indexing memory budget.
        """
        schema = build_schema()
        if read_only:
            if path is None or not (Path(path) / "meta.json").exists():
                raise BackendUnavailable(f"no tantivy index at {path} to open read-only")
            stores_chunks = _check_layout(Path(path))
            index = tantivy.Index.open(str(path))
            index.register_tokenizer(ANALYZER_NAME, build_analyzer())
            return cls(index, Path(path), True, stores_chunks, boosts=boosts, rm3=rm3)
        stores_chunks = True
        if path is None:
            index = tantivy.Index(schema)
            where = None
        else:
            where = Path(path)
            where.mkdir(parents=True, exist_ok=True)
            if (where / "meta.json").exists():
                stores_chunks = _check_layout(where)
                index = tantivy.Index.open(str(where))  # with the schema it was made with
            else:
                index = tantivy.Index(schema, path=str(where))
        index.register_tokenizer(ANALYZER_NAME, build_analyzer())
        return cls(
            index, where, False, stores_chunks, boosts=boosts, rm3=rm3, heap_bytes=heap_bytes
        )

    def _live_writer(self) -> tantivy.IndexWriter:
        if self._read_only:
            raise BackendUnavailable(f"the tantivy index at {self._path} is open read-only")
        if self._writer is None:
            raise BackendUnavailable(f"the tantivy index at {self._path} is closed")
        return self._writer

    def _check_open(self) -> None:
        if self._closed or (self._writer is None and not self._read_only):
            raise BackendUnavailable(f"the tantivy index at {self._path} is closed")

    def reload(self) -> None:
        """See the commits made since the last reload (by this or another process)."""
        self._check_open()
        self._load_reader()

    def _commit(self, writer: tantivy.IndexWriter) -> None:
        writer.commit()
        self._load_reader()

    def _load_reader(self) -> None:
        self._index.reload()
        self._reader = _Reader.of(self._index)

    def upsert(self, chunks: Sequence[Chunk], *, versions: Sequence[int] | None = None) -> None:
        """Replace-or-insert each chunk by (tenant, chunk id); visible when this returns.
        A chunk with no BM25 term only removes its previous version (see is_searchable).
        `versions` are not needed: one writer (this replica's view) applies the log in order."""
        valid = validate_chunks(chunks)
        if not valid:
            return
        with self._lock:
            writer = self._live_writer()
            try:
                for chunk in valid:
                    key = doc_key(chunk.tenant_id, chunk.chunk_id)
                    writer.delete_documents_by_term("key", key)
                    if not is_searchable(chunk):
                        continue
                    writer.add_document(
                        tantivy.Document(
                            **indexed_fields(chunk),
                            tenant_id=chunk.tenant_id,
                            chunk_id=chunk.chunk_id,
                            key=key,
                            **{FILTER_FIELD: filter_terms(chunk)},
                            **({CHUNK_FIELD: chunk_rest(chunk)} if self.stores_chunks else {}),
                        )
                    )
                self._commit(writer)
            except BaseException:
                writer.rollback()
                raise

    def delete(
        self, tenant_id: str, chunk_ids: Sequence[str], *, versions: Sequence[int] | None = None
    ) -> None:
        """Remove chunks of one tenant; unknown ids are ignored."""
        ids = validate_ids(tenant_id, chunk_ids)
        if not ids:
            return
        with self._lock:
            writer = self._live_writer()
            try:
                for chunk_id in ids:
                    writer.delete_documents_by_term("key", doc_key(tenant_id, chunk_id))
                self._commit(writer)
            except BaseException:
                writer.rollback()
                raise

    def _tenant_clause(self, tenant_id: str) -> tantivy.Query:
        term = tantivy.Query.term_query(self._schema, "tenant_id", tenant_id, index_option="basic")
        return tantivy.Query.const_score_query(term, 0.0)

    def search(
        self,
        query: str,
        top_k: int,
        tenant_id: str,
        access: TermExpr | None = None,
        *,
        with_chunks: int = 0,
    ) -> list[ScoredId]:
        """BM25 top_k of one tenant (RM3-expanded when configured), `access` as filter
        clauses inside the query; text with no tokens matches nothing. The first
        `with_chunks` hits carry their chunk, read from the same stored document as the id."""
        text, k, tenant = validate_search(query, top_k, tenant_id)
        self._check_open()
        run = partial(
            self._run_terms, access=access, with_chunks=with_chunks if self.stores_chunks else 0
        )
        return bm25_search(run, text, k, tenant, self.rm3)

    def _access_clause(self, expr: TermExpr, public_only: bool) -> tantivy.Query | None:
        """The filter clause of `expr`; None when it passes every document (`public_only`
        and it lets public chunks through)."""
        if isinstance(expr, AnyTerm):
            if public_only and PUBLIC in expr.terms:
                return None
            if not expr.terms:
                return tantivy.Query.empty_query()
            found = tantivy.Query.term_set_query(self._schema, FILTER_FIELD, sorted(expr.terms))
            return tantivy.Query.const_score_query(found, 0.0)
        parts = [self._access_clause(p, public_only) for p in expr.parts]
        needed = [p for p in parts if p is not None]  # None: passes every document
        if isinstance(expr, AllExpr):
            occur = tantivy.Occur.Must
            if not needed:
                return None
        else:
            occur = tantivy.Occur.Should
            if len(needed) < len(parts):
                return None
        return tantivy.Query.boolean_query([(occur, p) for p in needed])

    def _run_terms(
        self,
        terms: Mapping[str, float],
        top_k: int,
        tenant_id: str,
        with_text: bool,
        access: TermExpr | None = None,
        with_chunks: int = 0,
    ) -> list[tuple[ScoredId, str]]:
        clauses = [
            (
                tantivy.Occur.Should,
                tantivy.Query.boost_query(
                    tantivy.Query.term_query(self._schema, field, term, index_option="freq"),
                    weight,
                ),
            )
            for field, term, weight in field_clauses(terms, self.boosts)
        ]
        if not clauses:
            return []
        reader = self._reader
        searcher = reader.searcher
        required = [tantivy.Query.boolean_query(clauses)]
        if not reader.holds_only(tenant_id):
            required.append(self._tenant_clause(tenant_id))
        clause = None if access is None else self._access_clause(access, reader.public_only)
        if clause is not None:
            required.append(clause)
        if len(required) == 1:  # the bare disjunction: tantivy prunes it (block-max WAND)
            full = required[0]
        else:
            full = tantivy.Query.boolean_query([(tantivy.Occur.Must, q) for q in required])
        result = searcher.search(full, limit=top_k, count=False)
        hits = []
        for rank, (score, address) in enumerate(result.hits):
            text, chunk, doc = "", None, None
            if with_text or rank < with_chunks:
                doc = searcher.doc(address)
                if with_text:
                    text = "\n".join(v for f in (TITLE_FIELD, BODY_FIELD) for v in doc.get_all(f))
                chunk = stored_chunk(doc) if rank < with_chunks else None
            hits.append((ScoredId(reader.chunk_id(address, doc), float(score), chunk), text))
        return hits

    def count(self, tenant_id: str) -> int:
        """Live chunks of one tenant."""
        tenant = validate_search("", 1, tenant_id)[2]
        self._check_open()
        result = self._reader.searcher.search(self._tenant_clause(tenant), limit=1, count=True)
        return int(result.count)  # type: ignore[attr-defined]  # missing from tantivy's stub

    def location(self) -> str:
        where = self._path.resolve() if self._path is not None else f"memory {id(self)}"
        return f"tantivy {where}"

    def close(self) -> None:
        """Release the writer lock (pending merges finish first); idempotent."""
        with self._lock:
            self._closed = True
            if self._writer is not None:
                self._writer.wait_merging_threads()
                self._writer = None


def _check_layout(path: Path) -> bool:
    """Refuse an index written before title and body became separate fields; say whether it
    stores whole chunks (made after the `chunk` field came)."""
    meta = json.loads((path / "meta.json").read_text())
    fields = {field["name"] for field in meta.get("schema", [])}
    if not {BODY_FIELD, FILTER_FIELD} <= fields:
        raise BackendUnavailable(
            f"the tantivy index at {path} was built by an older ragindex (no title/body or"
            f" filter fields): delete {path} and re-ingest, or use a new data directory"
        )
    return CHUNK_FIELD in fields


def holds_only(searcher: tantivy.Searcher, tenant_id: str) -> bool:
    """Whether every document of the index, live or deleted, is `tenant_id`'s (a one-tenant
    index, or one per tenant): then the tenant clause filters nothing, and a search without it
    lets tantivy prune the BM25 disjunction (at 100 k chunks the clause cost ~2 ms of ~5).
    A term stays in the dictionary while any document of it, even deleted, is in a segment."""
    if searcher.doc_freq("tenant_id", tenant_id) < searcher.num_docs:
        return False  # some live document is another tenant's: no need to walk the terms
    only = searcher.terms_with_prefix("tenant_id", "", limit=2)
    return [term for term, _ in only] == [tenant_id]
