"""The HTTP API's request and response bodies: the constraints live in these types, so the
OpenAPI document states them and pydantic enforces exactly what it states."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    WithJsonSchema,
)

from ragindex.router.access import (
    FilterIn,
    Principal,
    ReadScope,
    Timestamp,
    _any_of,
)
from ragindex.router.documents import (
    LIST_CURSOR_MAX_CHARS,
    LIST_CURSOR_PATTERN,
    MAX_DELETE_DOCUMENTS,
    SEARCH_CURSOR_MAX_CHARS,
    DocumentView,
    search_cursor_pattern,
)
from ragindex.router.grounded_answer import Count, _whole_float
from ragindex.router.query import MAX_QUERY_CHARS, SearchResult
from ragindex.types import (
    ID_PART_PATTERN,
    MAX_ACL_PRINCIPALS,
    MAX_DOCUMENT_CHARS,
    MAX_METADATA_INT,
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_KEYS,
    MAX_METADATA_LIST_ITEMS,
    MAX_METADATA_STRING_CHARS,
    MAX_TITLE_CHARS,
    VISIBLE_PATTERN,
)

MAX_BATCH_DOCUMENTS = 256


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# The request constraints live in these types, so that the OpenAPI document states them and
# pydantic enforces exactly what it states; the core (Document) checks the same rules again
# for every other entry point.
IdPart = Annotated[StrictStr, Field(pattern=ID_PART_PATTERN)]


TEXT_PATTERN = r"^[^\x00\ufffd]*[^\s\x00-\x1f\x7f-\x9f\ufeff\ufffd][^\x00\ufffd]*$"
"""Some visible character, and no NUL or U+FFFD (the marks of text that was not UTF-8)."""


DocumentText = Annotated[
    StrictStr,
    Field(max_length=MAX_DOCUMENT_CHARS, pattern=TEXT_PATTERN),
    # The same constraints with the pattern inside an allOf: a generator that folds a sibling
    # maxLength into the pattern's quantifiers (schemathesis) builds a regex too large to
    # compile, and then finds no valid document at all.
    WithJsonSchema(
        {"type": "string", "maxLength": MAX_DOCUMENT_CHARS, "allOf": [{"pattern": TEXT_PATTERN}]}
    ),
]


MetaScalar = (
    StrictBool
    | Annotated[StrictInt, Field(ge=-MAX_METADATA_INT, le=MAX_METADATA_INT)]
    | Annotated[StrictFloat, Field(ge=-MAX_METADATA_INT, le=MAX_METADATA_INT)]
    | Annotated[StrictStr, Field(max_length=MAX_METADATA_STRING_CHARS)]
    | None
)


MetaValue = MetaScalar | Annotated[list[MetaScalar], Field(max_length=MAX_METADATA_LIST_ITEMS)]


MetaKey = Annotated[StrictStr, Field(min_length=1, max_length=MAX_METADATA_KEY_CHARS)]


class DocumentIn(_Strict):
    source: IdPart = Field(
        description="Where the document comes from: no whitespace, control characters, ':' or '/'."
    )
    doc_id: IdPart = Field(description="Id of the document within its source (same rules).")
    title: StrictStr = Field(
        "", max_length=MAX_TITLE_CHARS, description="Title, shown with every hit of the document."
    )
    text: DocumentText = Field(description="Full text (some visible character; no NUL).")
    updated: Timestamp | None = Field(None, description="RFC 3339 time of the last change.")
    metadata: dict[MetaKey, MetaValue] = Field(
        default_factory=dict,
        max_length=MAX_METADATA_KEYS,
        description="Flat metadata: scalars or short lists of scalars, copied to every chunk.",
    )
    acl: list[Principal] | None = Field(
        None,
        min_length=1,
        max_length=MAX_ACL_PRINCIPALS,
        description="Principals that may read the document (`user:alice`, `group:eng`);"
        " absent: everyone in the tenant.",
    )


class UpsertRequest(_Strict):
    documents: list[DocumentIn] = Field(
        min_length=1,
        max_length=MAX_BATCH_DOCUMENTS,
        description="Documents to upsert, in order: a document named twice is written twice,"
        " so its last occurrence wins (as if sent one after another; a version whose `updated`"
        " is older than the indexed one is skipped either way).",
    )


class AcceptedDocument(BaseModel):
    source: str
    doc_id: str
    partition: int = Field(description="Partition of the `docs` log the write went to.")
    offset: int = Field(description="Its offset there: durable once this answer is sent.")


class AcceptedResponse(BaseModel):
    accepted: list[AcceptedDocument] = Field(
        description="One entry per document, in request order; each is durable in the log."
    )
    applied: bool | None = Field(
        description="With `wait`: whether every shard replica and the BM25 view applied the"
        " writes before the timeout (read-your-writes); null without `wait`."
    )


SearchCursor = Annotated[
    StrictStr,
    # The syntax is stated here and checked when the cursor is decoded, so that a cursor that
    # does not decode (or names another index generation) is a 400 saying so; the served
    # document names the generation it serves in the pattern (`create_app`).
    WithJsonSchema(
        {
            "type": "string",
            "maxLength": SEARCH_CURSOR_MAX_CHARS,
            "pattern": search_cursor_pattern(),
        }
    ),
]
ListCursor = Annotated[
    StrictStr,
    WithJsonSchema(
        {"type": "string", "maxLength": LIST_CURSOR_MAX_CHARS, "pattern": LIST_CURSOR_PATTERN}
    ),
]


class SearchRequest(ReadScope):
    query: StrictStr = Field(
        min_length=1,
        max_length=MAX_QUERY_CHARS,
        pattern=VISIBLE_PATTERN,
        description="What to search for.",
    )
    k: Count | None = Field(None, description="Hits to return (1..100).")
    mode: Literal["hybrid", "dense", "lexical"] = Field(
        "hybrid", description="Both legs fused by rank, or one leg alone."
    )
    rerank: StrictBool | None = Field(None, description="Rerank; default: when configured.")
    cursor: SearchCursor | None = Field(
        None,
        description="The `next_cursor` of the previous page of the same search (same query,"
        " mode, k, filter and principals): the best hits that no earlier page returned."
        " Opaque: pass it back unchanged. A cursor of another index generation, or one that"
        " does not decode, is a 400.",
    )


class HitOut(BaseModel):
    chunk_id: str = Field(description="`{source}:{doc_id}:{n}`, stable across re-ingests.")
    source: str = Field(description="The document's source.")
    doc_id: str = Field(description="The document's id within its source.")
    title: str = Field(description="The document's title.")
    text: str = Field(description="The chunk's text.")
    score: float = Field(
        description="Fused (RRF) score, or the reranker's; hits are ordered by score"
        " descending, then chunk id."
    )
    ranks: dict[str, int] = Field(description="1-based rank of the chunk in each leg.")


class SearchResponse(BaseModel):
    hits: list[HitOut] = Field(description="Best first: score descending, then chunk id.")
    timings_ms: dict[str, float] = Field(description="Milliseconds each stage took.")
    warnings: list[str] = Field([], description="What degraded this result, if anything.")
    next_cursor: str | None = Field(
        None,
        description="When this page is full: pass it as `cursor` to get the next page (an"
        " empty page may follow); null when the results end here, or 1,000 hits deep."
        " Valid within this index generation. It carries which hits were returned, so a"
        " write between pages never returns a hit twice and never hides one that is still"
        " in the results (one whose rank the write raised comes on a later page).",
    )


class ChunkOut(BaseModel):
    chunk_id: str = Field(description="`{source}:{doc_id}:{n}`.")
    n: int = Field(description="Position of the chunk in its document, from 0.")
    content_hash: str = Field(description="Hash of the chunk's text (unchanged text, same hash).")
    text: str = Field(description="The chunk's text as indexed.")


class DocumentOut(BaseModel):
    """A document as this index holds it: its chunks in order and the fields they carry."""

    source: str = Field(description="Where the document comes from.")
    doc_id: str = Field(description="Its id within the source.")
    title: str = Field(description="Its title.")
    updated: str | None = Field(description="RFC 3339 time of its last change, if given.")
    metadata: dict[str, Any] = Field(description="Its metadata, as given.")
    acl: list[str] | None = Field(
        description="The principals of its ACL that the caller holds (the ones that let it"
        " read the document; others are not shown); null: no ACL, the whole tenant reads it."
    )
    chunks: list[ChunkOut] = Field(description="Its chunks in order.")

    @classmethod
    def from_view(cls, view: DocumentView) -> DocumentOut:
        return cls(
            source=view.source,
            doc_id=view.doc_id,
            title=view.title,
            updated=view.updated,
            metadata=view.metadata,
            acl=view.acl,
            chunks=[
                ChunkOut(chunk_id=c.chunk_id, n=c.n, content_hash=c.content_hash, text=c.text)
                for c in view.chunks
            ],
        )


class DocumentListItem(BaseModel):
    source: str = Field(description="Where the document comes from.")
    doc_id: str = Field(description="Its id within the source.")
    title: str = Field(description="Its title.")
    chunks: int = Field(description="How many chunks it has in the index.")
    updated: str | None = Field(description="RFC 3339 time of its last change, if given.")


class DocumentListResponse(BaseModel):
    documents: list[DocumentListItem] = Field(
        description="The caller's tenant's documents it may read, by (source, doc_id)."
    )
    next_cursor: str | None = Field(
        description="Pass it as `cursor` for the next page; null: the listing ends here."
    )


class DeleteByFilterRequest(_Strict):
    filter: FilterIn = Field(
        description="The documents to delete: the filter language of a search, over the"
        " caller's tenant's documents that its principals may read.",
        json_schema_extra=_any_of,
    )
    max_documents: Annotated[
        int, Strict(), Field(ge=1, le=MAX_DELETE_DOCUMENTS), BeforeValidator(_whole_float)
    ] = Field(
        description="The most documents this may delete: if the filter matches more, nothing"
        " is deleted (409).",
    )


class StatsResponse(BaseModel):
    """The caller's tenant only: nothing here counts another tenant's data or writes."""

    tenant: str
    chunks: int
    documents: int
    dense_vectors: int
    lexical_docs: int
    shards: int
    freshness_bound_s: float
    staleness_s: float | None = Field(None, description="Age of this replica's view, when known.")


class ReadyResponse(BaseModel):
    status: Literal["ready", "degraded", "not ready"]
    detail: str


class GenerationReport(BaseModel):
    """This index generation's build, for the operator's promotion decision
    (`ragindex.generations.BuildReport`): no tenant names, no document keys."""

    generation: str = Field(description="The index generation this Router serves.")
    consumed: int = Field(description="docs records its ingest group consumed.")
    end: int = Field(description="docs records in the log.")
    checks: dict[str, str] | None = Field(
        description="caught-up, chunk-counts, self-check: '' passed, else why it failed;"
        " null until the backfill reached the end of docs and the views applied it."
    )
    waiting_on: list[str] = Field(
        default_factory=list,
        description="While the checks wait for the views to apply the backfill: each view"
        " replica still behind and where it stands (views, replica ids and offsets only).",
    )


class Problem(BaseModel):
    """Every error, as RFC 9457 problem details (`application/problem+json`)."""

    type: str = Field(
        description="`urn:ragindex:problem:<code>`: one per kind of error, never reused for"
        " another (the codes are listed in the HTTP API reference)."
    )
    title: str = Field(description="The kind of error in words, the same for every one of it.")
    status: int = Field(description="The HTTP status, repeated.")
    detail: str = Field(description="What is wrong with this request, in one readable line.")
    code: str = Field(description="The last part of `type`, for clients that switch on it.")


def hit_out(result: SearchResult) -> SearchResponse:
    return SearchResponse(
        hits=[
            HitOut(
                chunk_id=h.chunk.chunk_id,
                source=h.chunk.source,
                doc_id=h.chunk.doc_id,
                title=h.chunk.title,
                text=h.chunk.text,
                score=h.score,
                ranks=h.ranks,
            )
            for h in result.hits
        ],
        timings_ms=result.timings_ms,
        warnings=result.warnings,
    )
