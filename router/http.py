"""HTTP API v1: a FastAPI app over any backend that can search, upsert, delete and count.

The app is a factory so that the Serve Router builds it inside its replica (FIELD-NOTES:
FastAPI ingress must be built inside the builder) and tests can run it over real HTTP.
Every error leaves here as RFC 9457 problem details (`router/problems.py`: a stable `type`
per kind, a `detail` line that says what is wrong); bad input never becomes a 500. Limits
are enforced before anything is written (DESIGN.md invariant 7).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Protocol

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import WithJsonSchema
from starlette.exceptions import HTTPException as StarletteHTTPException

from ragindex.config import LimitsSpec
from ragindex.errors import (
    RagIndexError,
)
from ragindex.router.access import (
    PrincipalNotGranted,
    ReadScope,
    access_for,
)
from ragindex.router.api_models import (
    AcceptedResponse,
    DeleteByFilterRequest,
    DocumentListItem,
    DocumentListResponse,
    DocumentOut,
    GenerationReport,
    Problem,
    ReadyResponse,
    SearchRequest,
    SearchResponse,
    StatsResponse,
    UpsertRequest,
    hit_out,
)
from ragindex.router.auth import Grant, TokenRefused, TokenVerifier
from ragindex.router.documents import (
    DEFAULT_LIST_LIMIT,
    LIST_CURSOR_MAX_CHARS,
    LIST_CURSOR_PATTERN,
    MAX_LIST_LIMIT,
    DocKey,
    DocumentPage,
    Paged,
    decode_list_cursor,
    decode_search_cursor,
    document_view,
    encode_list_cursor,
    encode_search_cursor,
    search_cursor_pattern,
)
from ragindex.router.grounded_answer import Answer, AnswerRequest, AnswerResponse
from ragindex.router.http_problems import (
    AUTH_ERRORS,
    BACKEND_ERRORS,
    BODY_ERRORS,
    READ_ERRORS,
    allowed_methods,
    error_doc,
    problem_response,
    replace_pattern,
    validation_message,
)
from ragindex.router.limits import TenantLimiter
from ragindex.router.middleware import BodyLimit, Metrics, server_timing
from ragindex.router.problems import (
    code_for_error,
    code_for_status,
    unwrapped,
)
from ragindex.router.query import Access, SearchResult
from ragindex.router.ui_page import add_ui
from ragindex.telemetry import annotate_search, exposition, instruments, observe_search
from ragindex.types import (
    ID_PART_PATTERN,
    Chunk,
    Document,
)

MAX_BODY_BYTES = 16 * 1024 * 1024
ANY_GENERATION = "00000000"  # what an app told no generation names in its cursors
MAX_WAIT_S = 60.0  # the longest a writer may wait for read-your-writes
API_VERSION = "v1"


class Backend(Protocol):
    """What the HTTP layer needs; the Serve Router and the tests implement it."""

    async def search(
        self,
        tenant_id: str,
        query: str,
        k: int | None,
        mode: str,
        rerank: bool | None,
        access: Access | None = None,
        paged: Paged | None = None,
    ) -> SearchResult: ...

    async def document(
        self, tenant_id: str, source: str, doc_id: str, access: Access
    ) -> list[Chunk]: ...

    async def list_documents(
        self, tenant_id: str, access: Access, after: DocKey | None, limit: int
    ) -> DocumentPage: ...

    async def delete_matching(
        self, tenant_id: str, access: Access, max_documents: int, wait_s: float | None
    ) -> dict[str, Any]: ...

    async def upsert(
        self, tenant_id: str, documents: list[Document], wait_s: float | None
    ) -> dict[str, Any]: ...

    async def delete(
        self, tenant_id: str, source: str, doc_id: str, wait_s: float | None
    ) -> dict[str, Any]: ...

    async def answer(
        self, tenant_id: str, question: str, k: int, access: Access | None = None
    ) -> Answer: ...

    async def stats(self, tenant_id: str) -> dict[str, Any]: ...

    async def ready(self) -> tuple[bool, str]: ...

    async def generation_report(self) -> dict[str, Any]: ...


# ---------------------------------------------------------------- the app

BEARER = HTTPBearer(auto_error=False, description="A token from `ragindex token create`.")
"""Declares the bearer scheme in the OpenAPI document; a missing token is our 401, not its 403."""
UPSERT_LINKS = {
    # For clients and the stateful contract test: an upserted document can be deleted.
    "DeleteDocument": {
        "operationId": "delete_document",
        "parameters": {
            "source": "$request.body#/documents/0/source",
            "doc_id": "$request.body#/documents/0/doc_id",
        },
    }
}


def create_app(
    backend: Backend,
    verifier: TokenVerifier,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    limits: LimitsSpec | None = None,
    clock: Callable[[], float] = time.monotonic,
    report_token: str | None = None,
    cursor_generation: str | None = None,
) -> FastAPI:
    """The v1 API over one backend, with its own per-tenant limiter (`limits`: the spec's,
    else the defaults); its metrics are the process's (ragindex.telemetry). `report_token`: the
    credential /v1/generation asks of its reader (the cluster's operator); without one, any API
    token. `cursor_generation`: the index generation the backend serves, which its search cursors
    name (and its OpenAPI document's cursor pattern; None: any generation's cursor decodes, for
    the reference docs and tests)."""
    limiter = TenantLimiter(limits or LimitsSpec())
    instrumented = instruments()
    app = FastAPI(
        title="ragindex",
        version="1",
        description="Hybrid retrieval (dense + BM25, fused by rank) for RAG. Every /v1 call"
        " needs `Authorization: Bearer <token>`; the token decides the tenant. A tenant over"
        " its concurrency or rate limit gets 429 with `Retry-After`.",
        # Serve's replica span is the request's: FastAPI's own would start a new trace from the
        # headers (a root, or the caller's child beside the proxy's) and cut the tree in two.
        telemetry={"tracing": False},
    )

    generated_openapi = app.openapi

    def openapi_with_problem() -> dict[str, Any]:
        """FastAPI registers a model only where a response is `application/json`; every
        error here is `application/problem+json`, so its schema is added by hand."""
        doc = generated_openapi()  # cached by FastAPI: the addition is made once
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        if "Problem" not in schemas:
            schemas["Problem"] = Problem.model_json_schema()
            if cursor_generation is not None:  # its cursors: its generation's only
                replace_pattern(
                    doc, search_cursor_pattern(), search_cursor_pattern(cursor_generation)
                )
        return doc

    app.openapi = openapi_with_problem  # type: ignore[method-assign]

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        return problem_response(*validation_message(list(err.errors())))

    @app.exception_handler(RagIndexError)
    async def _refused(_: Request, err: RagIndexError) -> JSONResponse:
        cause = unwrapped(err)
        return problem_response(code_for_error(err), str(cause) or type(cause).__name__)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, err: StarletteHTTPException) -> JSONResponse:
        headers = err.headers
        if err.status_code == 405:  # every method the path takes, not only its first route's
            headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(app, request))}
        return problem_response(code_for_status(err.status_code), str(err.detail), headers)

    @app.exception_handler(Exception)
    async def _internal(_: Request, err: Exception) -> JSONResponse:
        code = code_for_error(err)  # a replica's error may arrive in a wrapper of Ray's
        if code == "internal":  # the message may show internals: it goes to the server's log
            return problem_response(code, f"internal error ({type(unwrapped(err)).__name__})")
        cause = unwrapped(err)
        return problem_response(code, str(cause) or type(cause).__name__)

    async def caller(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
    ) -> AsyncIterator[Grant]:
        """The caller's grant (tenant and principals), admitted by its tenant's limits for the
        length of the request."""
        try:
            found = verifier.check(credentials.credentials if credentials else None)
        except TokenRefused as refused:
            raise HTTPException(
                status_code=401, detail=str(refused), headers={"WWW-Authenticate": "Bearer"}
            ) from None
        admission = limiter.admit(found.tenant, clock())
        if not admission.admitted:
            instrumented.admission_refused.labels(admission.kind).inc()
            raise HTTPException(
                status_code=429,
                detail=admission.reason,
                headers={"Retry-After": str(admission.retry_after_s)},
            )
        try:
            yield found
        finally:
            limiter.release(found.tenant)

    def tenant(grant: Grant = Depends(caller)) -> str:  # noqa: B008 (FastAPI's idiom)
        return grant.tenant

    def reads(scope: ReadScope, grant: Grant) -> Access:
        try:
            return access_for(grant, scope)
        except PrincipalNotGranted as err:
            raise HTTPException(status_code=403, detail=str(err)) from None

    def wait_s(
        wait: bool = Query(
            False, description="Answer only once the writes are searchable everywhere."
        ),
        wait_timeout_s: float = Query(
            MAX_WAIT_S / 2, gt=0, le=MAX_WAIT_S, description="Upper bound of the wait."
        ),
    ) -> float | None:
        return wait_timeout_s if wait else None

    @app.post(
        "/v1/documents",
        response_model=AcceptedResponse,
        status_code=202,
        tags=["documents"],
        operation_id="upsert_documents",
        responses={
            **AUTH_ERRORS,
            **BACKEND_ERRORS,
            **BODY_ERRORS,
            413: error_doc(
                "The body is larger than the limit, or a document is larger than one log record"
                " (names it); nothing of the batch was written."
            ),
            202: {"links": UPSERT_LINKS},
        },
    )
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
        operation_id="delete_document",
        responses={
            **AUTH_ERRORS,
            **BACKEND_ERRORS,
            422: error_doc("A path segment or query parameter is malformed (names it)."),
        },
    )
    async def delete(
        source: Annotated[str, Path(pattern=ID_PART_PATTERN)],
        doc_id: Annotated[str, Path(pattern=ID_PART_PATTERN)],
        tenant_id: str = Depends(tenant),
        wait_for: float | None = Depends(wait_s),
    ) -> AcceptedResponse:
        """Delete a document through the log; its chunks are tombstoned and never returned."""
        return AcceptedResponse(**await backend.delete(tenant_id, source, doc_id, wait_for))

    @app.get(
        "/v1/documents/{source}/{doc_id}",
        response_model=DocumentOut,
        tags=["documents"],
        operation_id="get_document",
        responses={
            **AUTH_ERRORS,
            404: error_doc(
                "No such document in the caller's tenant that its principals may read (the"
                " same answer whether it exists for others or not)."
            ),
            409: BACKEND_ERRORS[409],
            422: error_doc("A path segment is malformed (names it)."),
            503: BACKEND_ERRORS[503],
        },
    )
    async def get_document(
        source: Annotated[str, Path(pattern=ID_PART_PATTERN, description="The source.")],
        doc_id: Annotated[str, Path(pattern=ID_PART_PATTERN, description="The document id.")],
        grant: Grant = Depends(caller),  # noqa: B008 (FastAPI's idiom)
    ) -> DocumentOut:
        """The caller's tenant's document as indexed: its chunks in order with their ids and
        content hashes, its title, metadata and the part of its ACL the caller holds. What the
        index holds: a write shows here once applied (`?wait=true` on the write)."""
        access = reads(ReadScope(), grant)
        chunks = await backend.document(grant.tenant, source, doc_id, access)
        view = document_view(chunks, access.principals)
        if view is None:
            raise HTTPException(
                status_code=404,
                detail=f"no document {source}/{doc_id} that this token may read",
            )
        return DocumentOut.from_view(view)

    @app.get(
        "/v1/documents",
        response_model=DocumentListResponse,
        tags=["documents"],
        operation_id="list_documents",
        responses={
            **AUTH_ERRORS,
            400: error_doc("The cursor is not one this API made (says why)."),
            409: BACKEND_ERRORS[409],
            422: error_doc("A query parameter is malformed (names it)."),
            503: BACKEND_ERRORS[503],
        },
    )
    async def list_documents(
        grant: Grant = Depends(caller),  # noqa: B008 (FastAPI's idiom)
        limit: int = Query(
            DEFAULT_LIST_LIMIT,
            ge=1,
            le=MAX_LIST_LIMIT,
            description=f"Documents per page (1..{MAX_LIST_LIMIT}).",
        ),
        cursor: Annotated[
            str | None,
            Query(
                description="The `next_cursor` of the previous page (opaque: pass it back"
                " unchanged); absent: the first page."
            ),
            # a string when given (a query parameter is never null); its syntax is checked
            # when it is decoded, so that a cursor this API did not make is a 400 saying so
            WithJsonSchema(
                {
                    "type": "string",
                    "maxLength": LIST_CURSOR_MAX_CHARS,
                    "pattern": LIST_CURSOR_PATTERN,
                }
            ),
        ] = None,
    ) -> DocumentListResponse:
        """The caller's tenant's documents that its principals may read, a page at a time in
        (source, doc_id) order: a document written or deleted between pages shows or not,
        none already listed comes again."""
        after = None if cursor is None else decode_list_cursor(cursor)
        access = reads(ReadScope(), grant)
        page = await backend.list_documents(grant.tenant, access, after, limit)
        return DocumentListResponse(
            documents=[
                DocumentListItem(
                    source=d.source,
                    doc_id=d.doc_id,
                    title=d.title,
                    chunks=d.chunks,
                    updated=d.updated,
                )
                for d in page.documents
            ],
            next_cursor=None if page.next_after is None else encode_list_cursor(page.next_after),
        )

    @app.post(
        "/v1/documents/delete",
        response_model=AcceptedResponse,
        status_code=202,
        tags=["documents"],
        operation_id="delete_documents_by_filter",
        responses={
            **AUTH_ERRORS,
            **BACKEND_ERRORS,
            **BODY_ERRORS,
            409: error_doc(
                "The filter matches more documents than `max_documents` (nothing was"
                " deleted), or the index is not set up for the request."
            ),
        },
    )
    async def delete_by_filter(
        body: DeleteByFilterRequest,
        grant: Grant = Depends(caller),  # noqa: B008 (FastAPI's idiom)
        wait_for: float | None = Depends(wait_s),
    ) -> AcceptedResponse:
        """Delete every document of the caller's tenant that the filter matches and its
        principals may read, through the log (one tombstone each), or none if they are more
        than `max_documents`. 202 once the tombstones are durable; `?wait=true` as for
        upserts. What matches is what the index holds when it looks."""
        access = reads(ReadScope.model_construct(filter=body.filter, principals=None), grant)
        done = await backend.delete_matching(grant.tenant, access, body.max_documents, wait_for)
        return AcceptedResponse(**done)

    @app.post(
        "/v1/search",
        response_model=SearchResponse,
        tags=["search"],
        operation_id="search",
        responses={**AUTH_ERRORS, **READ_ERRORS, **BACKEND_ERRORS, **BODY_ERRORS},
    )
    async def search(
        body: SearchRequest,
        response: Response,
        grant: Grant = Depends(caller),  # noqa: B008 (FastAPI's idiom)
    ) -> SearchResponse:
        """Hybrid (or single-leg) search within the caller's tenant, over the chunks its
        principals may read and its `filter` selects (both applied inside every leg).
        `Server-Timing` names what the replica spent: `app` in all, and `hop.<hop>.<part>`
        for each call to another replica (round trip, queued there, service there)."""
        paged = (
            None if body.cursor is None else decode_search_cursor(body.cursor, cursor_generation)
        )
        access = reads(body, grant)
        result = await backend.search(
            grant.tenant, body.query, body.k, body.mode, body.rerank, access, paged
        )
        degraded = bool(result.warnings)
        observe_search(body.mode, result.timings_ms, result.hops_ms, len(result.hits), degraded)
        annotate_search(body.mode, result.timings_ms, len(result.hits), degraded)
        out = hit_out(result)
        if result.hops_ms:
            response.headers.append("server-timing", server_timing(result.hops_ms, "hop."))
        if result.next_paged is not None:
            out.next_cursor = encode_search_cursor(
                cursor_generation or ANY_GENERATION, result.next_paged
            )
        return out

    @app.post(
        "/v1/answer",
        response_model=AnswerResponse,
        tags=["answers"],
        operation_id="answer",
        responses={**AUTH_ERRORS, **READ_ERRORS, **BACKEND_ERRORS, **BODY_ERRORS},
    )
    async def answer(
        body: AnswerRequest,
        grant: Grant = Depends(caller),  # noqa: B008 (FastAPI's idiom)
    ) -> AnswerResponse:
        """A cited answer from the caller's tenant's sources it may read (and its `filter`
        selects), or `refused: true`."""
        access = reads(body, grant)
        started = time.perf_counter()
        answered = await backend.answer(grant.tenant, body.question, body.k, access)
        instrumented.query_stage.labels("answer").observe(time.perf_counter() - started)
        instrumented.answers.labels("refused" if answered.refused else "answered").inc()
        return AnswerResponse.from_answer(answered)

    @app.get(
        "/v1/stats",
        response_model=StatsResponse,
        tags=["ops"],
        operation_id="stats",
        responses={**AUTH_ERRORS, 503: BACKEND_ERRORS[503]},
    )
    async def stats(tenant_id: str = Depends(tenant)) -> StatsResponse:
        """Counts for the caller's tenant and the index layout; nothing about other tenants."""
        return StatsResponse.model_validate(await backend.stats(tenant_id))

    @app.get("/healthz", tags=["ops"], operation_id="healthz")
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["ops"],
        operation_id="readyz",
        response_model=ReadyResponse,
        responses={503: {"model": ReadyResponse, "description": "Not ready yet (says why)."}},
    )
    async def readyz() -> JSONResponse:
        """Readiness: 503 saying what is behind until the views caught up with the log (it
        answers at once meanwhile); `degraded` while searches work but writes cannot reach
        the log."""
        ok, reason = await backend.ready()
        return JSONResponse(
            {
                "status": ("ready" if reason == "ok" else "degraded") if ok else "not ready",
                "detail": reason,
            },
            status_code=200 if ok else 503,
        )

    @app.get(
        "/v1/generation",
        response_model=GenerationReport,
        tags=["ops"],
        operation_id="generation",
        responses={401: AUTH_ERRORS[401], 503: BACKEND_ERRORS[503]},
    )
    async def generation(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
    ) -> GenerationReport:
        """How far this generation's backfill got and whether its promotion checks pass (the
        operator promotes a new generation on this). It names no tenant and no document, but
        making it reads the whole corpus: in the cluster it needs the index's report
        credential (the Secret `<name>-report-token`, which the operator makes and reads),
        elsewhere any API token."""
        given = credentials.credentials if credentials else None
        if report_token is not None:
            if given is None or not hmac.compare_digest(given.encode(), report_token.encode()):
                raise HTTPException(
                    status_code=401,
                    detail="the build report needs this index's report credential",
                    headers={"WWW-Authenticate": "Bearer"},
                )
        else:
            try:
                verifier.check(given)
            except TokenRefused as refused:
                raise HTTPException(
                    status_code=401, detail=str(refused), headers={"WWW-Authenticate": "Bearer"}
                ) from None
        return GenerationReport.model_validate(await backend.generation_report())

    @app.get(
        "/metrics",
        tags=["ops"],
        operation_id="metrics",
        response_class=PlainTextResponse,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    def metrics() -> Response:  # reading every process's metrics: on a thread, not the loop
        """Prometheus text exposition of this node's ragindex processes (in the embedded
        runtime: the Router, Ingest and every view; in the cluster: the pod of the Router
        replica that answered, whose pods are scraped on their metrics port instead)."""
        return Response(exposition(), media_type=CONTENT_TYPE_LATEST)

    add_ui(app)  # the search page: no data of its own, every call it makes carries the token
    app.add_middleware(Metrics)
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    return app
