"""HTTP API v1: a FastAPI app over any backend that can search, upsert, delete and count.

The app is a factory so that the Serve Router builds it inside its replica (FIELD-NOTES:
FastAPI ingress must be built inside the builder) and tests can run it over real HTTP.
Every error leaves here as a 4xx/5xx JSON body with a `detail` message; bad input never
becomes a 500. Limits are enforced before anything is written (DESIGN.md invariant 7).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator

from ragindex.errors import BackendUnavailable, IdentityMismatch, InvalidInput, RagIndexError
from ragindex.router.answer import Answer, AnswerRequest, AnswerResponse
from ragindex.router.auth import TokenVerifier, bearer_token
from ragindex.router.query import MAX_K, MAX_QUERY_CHARS, SearchResult
from ragindex.types import MAX_DOCUMENT_CHARS, Document

MAX_BATCH_DOCUMENTS = 256
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_WAIT_S = 60.0  # the longest a writer may wait for read-your-writes
API_VERSION = "v1"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Backend(Protocol):
    """What the HTTP layer needs; the Serve Router and the tests implement it."""

    async def search(
        self, tenant_id: str, query: str, k: int | None, mode: str, rerank: bool | None
    ) -> SearchResult: ...

    async def upsert(
        self, tenant_id: str, documents: list[Document], wait_s: float | None
    ) -> dict[str, Any]: ...

    async def delete(
        self, tenant_id: str, source: str, doc_id: str, wait_s: float | None
    ) -> dict[str, Any]: ...

    async def answer(self, tenant_id: str, question: str, k: int) -> Answer: ...

    async def stats(self, tenant_id: str) -> dict[str, Any]: ...

    async def ready(self) -> tuple[bool, str]: ...


# ---------------------------------------------------------------- request / response models


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class DocumentIn(_Strict):
    source: StrictStr = Field(description="Where the document comes from (no ':' '/' or spaces).")
    doc_id: StrictStr = Field(description="Id of the document within its source.")
    title: StrictStr = Field("", description="Title, shown with every hit of the document.")
    text: StrictStr = Field(max_length=MAX_DOCUMENT_CHARS, description="Full text.")
    updated: StrictStr | None = Field(None, description="ISO-8601 time of the last change.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Free-form metadata.")

    @field_validator("updated")
    @classmethod
    def _iso8601(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                datetime.fromisoformat(value)
            except ValueError as err:
                raise ValueError(f"updated must be an ISO-8601 timestamp, got {value!r}") from err
        return value


class UpsertRequest(_Strict):
    documents: list[DocumentIn] = Field(
        min_length=1, max_length=MAX_BATCH_DOCUMENTS, description="Documents to upsert."
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


class SearchRequest(_Strict):
    query: StrictStr = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    k: StrictInt | None = Field(None, ge=1, le=MAX_K, description="Hits to return (1..100).")
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


# ---------------------------------------------------------------- pure decisions


def status_for_error(err: BaseException) -> int:
    """The HTTP status of an error raised behind the API (Ray wraps remote errors)."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException) and cause is not err:
        err = cause
    if isinstance(err, InvalidInput):
        return 400
    if isinstance(err, IdentityMismatch):
        return 409
    if isinstance(err, BackendUnavailable):
        return 503
    return 500


def error_message(err: BaseException) -> str:
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException) and cause is not err:
        err = cause
    return str(err) or type(err).__name__


def validation_message(errors: list[Any]) -> tuple[int, str]:
    """Status and one readable line for a request that failed schema validation."""
    if any(e.get("type") == "json_invalid" for e in errors):
        ctx = next(e for e in errors if e.get("type") == "json_invalid").get("ctx", {})
        return 400, f"request body is not valid JSON: {ctx.get('error', 'parse error')}"
    parts = []
    for e in errors[:5]:
        where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return 422, "invalid request: " + "; ".join(parts) + more


def body_too_large(content_length: str | None, limit: int) -> bool:
    """Whether a declared Content-Length is over the limit (malformed counts as too large)."""
    if content_length is None:
        return False
    try:
        return int(content_length) > limit
    except ValueError:
        return True


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


# ---------------------------------------------------------------- metrics


@dataclass
class Metrics:
    """ASGI middleware counting requests and timing them by route and status.

    Plain ASGI rather than `@app.middleware("http")`: Starlette's BaseHTTPMiddleware runs the
    app in a separate task with stream plumbing, a cost paid on every search.
    """

    app: ASGIApp
    requests: Counter
    latency: Histogram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            # The router records the matched route in the (shared) scope while it handles.
            path = getattr(scope.get("route"), "path", "unmatched")
            self.requests.labels(path, str(status)).inc()
            self.latency.labels(path).observe(time.perf_counter() - start)


# ---------------------------------------------------------------- body size limit


@dataclass
class BodyLimit:
    """ASGI middleware: 413 for a body over the limit, declared or streamed (chunked)."""

    app: ASGIApp
    limit: int

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if body_too_large(declared.decode("latin-1") if declared else None, self.limit):
            await _send_413(send, self.limit)
            return
        seen = 0
        refused = False

        async def limited_receive() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit and not refused:
                    # Answer 413 now and tell the app the client left, so it stops reading.
                    refused = True
                    await _send_413(send, self.limit)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if not refused:
                await send(message)

        await self.app(scope, limited_receive, guarded_send)


async def _send_413(send: Send, limit: int) -> None:
    body = JSONResponse(
        {"detail": f"request body is larger than the limit of {limit} bytes"}, status_code=413
    )
    await send({"type": "http.response.start", "status": 413, "headers": body.raw_headers})
    await send({"type": "http.response.body", "body": body.body})


# ---------------------------------------------------------------- the app


def create_app(
    backend: Backend,
    verifier: TokenVerifier,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """The v1 API over one backend; each app has its own Prometheus registry."""
    registry = registry or CollectorRegistry()
    requests = Counter(
        "ragindex_http_requests",
        "HTTP requests by route and status.",
        ["route", "status"],
        registry=registry,
    )
    latency = Histogram(
        "ragindex_http_request_seconds",
        "HTTP request latency by route.",
        ["route"],
        registry=registry,
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    )
    app = FastAPI(
        title="ragindex",
        version="1",
        description="Hybrid retrieval (dense + BM25, fused by rank) for RAG. Every /v1 call"
        " needs `Authorization: Bearer <token>`; the token decides the tenant.",
    )

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        status, message = validation_message(list(err.errors()))
        return JSONResponse({"detail": message}, status_code=status)

    @app.exception_handler(RagIndexError)
    async def _refused(_: Request, err: RagIndexError) -> JSONResponse:
        return JSONResponse({"detail": error_message(err)}, status_code=status_for_error(err))

    def tenant(authorization: str | None = Header(None)) -> str:
        found = verifier.tenant_for(bearer_token(authorization))
        if found is None:
            raise HTTPException(
                status_code=401,
                detail="missing or unknown bearer token",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return found

    def wait_s(
        wait: bool = Query(
            False, description="Answer only once the writes are searchable everywhere."
        ),
        wait_timeout_s: float = Query(
            MAX_WAIT_S / 2, gt=0, le=MAX_WAIT_S, description="Upper bound of the wait."
        ),
    ) -> float | None:
        return wait_timeout_s if wait else None

    @app.post("/v1/documents", response_model=AcceptedResponse, status_code=202, tags=["documents"])
    async def upsert(
        body: UpsertRequest,
        tenant_id: str = Depends(tenant),
        wait_for: float | None = Depends(wait_s),
    ) -> AcceptedResponse:
        """Upsert a batch: 202 once every document is durable in the log. `?wait=true` answers
        once their chunks are searchable on every shard replica and in BM25 (or the timeout)."""
        docs = [Document(**d.model_dump()) for d in body.documents]
        return AcceptedResponse(**await backend.upsert(tenant_id, docs, wait_for))

    @app.delete(
        "/v1/documents/{source}/{doc_id}",
        response_model=AcceptedResponse,
        status_code=202,
        tags=["documents"],
    )
    async def delete(
        source: str,
        doc_id: str,
        tenant_id: str = Depends(tenant),
        wait_for: float | None = Depends(wait_s),
    ) -> AcceptedResponse:
        """Delete a document through the log; its chunks are tombstoned and never returned."""
        return AcceptedResponse(**await backend.delete(tenant_id, source, doc_id, wait_for))

    @app.post("/v1/search", response_model=SearchResponse, tags=["search"])
    async def search(body: SearchRequest, tenant_id: str = Depends(tenant)) -> SearchResponse:
        """Hybrid (or single-leg) search within the caller's tenant."""
        result = await backend.search(tenant_id, body.query, body.k, body.mode, body.rerank)
        return hit_out(result)

    @app.post("/v1/answer", response_model=AnswerResponse, tags=["answers"])
    async def answer(body: AnswerRequest, tenant_id: str = Depends(tenant)) -> AnswerResponse:
        """A cited answer from the caller's tenant's sources, or `refused: true`."""
        return AnswerResponse.from_answer(await backend.answer(tenant_id, body.question, body.k))

    @app.get("/v1/stats", tags=["ops"])
    async def stats(tenant_id: str = Depends(tenant)) -> dict[str, Any]:
        """Counts for the caller's tenant and the index layout."""
        return await backend.stats(tenant_id)

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"])
    async def readyz() -> JSONResponse:
        """Readiness: views open (503 until then); `degraded` while searches work but writes
        cannot reach the log."""
        ok, reason = await backend.ready()
        return JSONResponse(
            {
                "status": ("ready" if reason == "ok" else "degraded") if ok else "not ready",
                "detail": reason,
            },
            status_code=200 if ok else 503,
        )

    @app.get("/metrics", tags=["ops"], response_class=PlainTextResponse)
    async def metrics() -> Response:
        """Prometheus text exposition of this replica's metrics."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(Metrics, requests=requests, latency=latency)
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    return app
