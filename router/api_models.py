"""The HTTP API's request and response bodies: the constraints live in these types, so the
OpenAPI document states them and pydantic enforces exactly what it states."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    WithJsonSchema,
)

from ragindex.router.access import (
    Principal,
    ReadScope,
    Timestamp,
)
from ragindex.router.grounded_answer import Count
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


class SearchRequest(ReadScope):
    query: StrictStr = Field(min_length=1, max_length=MAX_QUERY_CHARS, pattern=VISIBLE_PATTERN)
    k: Count | None = Field(None, description="Hits to return (1..100).")
    mode: Literal["hybrid", "dense", "lexical"] = "hybrid"
    rerank: StrictBool | None = Field(None, description="Rerank; default: when configured.")


class HitOut(BaseModel):
    chunk_id: str
    source: str
    doc_id: str
    title: str
    text: str
    score: float
    ranks: dict[str, int] = Field(description="1-based rank of the chunk in each leg.")


class SearchResponse(BaseModel):
    hits: list[HitOut]
    timings_ms: dict[str, float]
    warnings: list[str] = []


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
