"""ragindex.router: the query path and the HTTP API, free of Ray (the Serve deployment that hosts
it is `ragindex.app.serve.router_deployment`).

- `QueryEngine`, `SearchResult`, `Access`, `engine_ms`: hybrid search (dense + BM25, RRF,
  optional rerank) under a tenant's access scope, and its stage timings;
- `with_query_cache`: query embeddings cached per model;
- `AnswerService`, `Answer`, `AnswerRequest`, `AnswerResponse`, `SourceRef`: grounded answers
  (`grounded_answer`), from `assemble_context`, a generator (`make_generator`,
  `ExtractiveGenerator`, `OpenAICompatibleGenerator`, `Generator`) and the grounding check
  (`check_answer`, `content_terms`, `coverage`);
- `create_app`, `Backend`: the FastAPI app over a backend; `TenantLimiter`: per-tenant limits;
- `TokenVerifier`, `Grant`, `create_token`, `tokens_path`: API tokens (`auth`; the standalone
  token tool is `python -m ragindex.router.token_tool`);
- `FailoverPolicy`, `Fault`, `next_try`: when a call fails over (the pure policy; the Ray handle
  calls that follow it are `ragindex.app.serve.handle_failover`);
- `views_behind`, `ViewReport`: which view replicas have not applied a write yet (none: applied);
- `merge_summaries`, `page_documents`, `DocumentPage`, `bounded_deletes`: reading documents
  back and the bounded delete by filter; `Paged`: what earlier pages of a search returned
  (`documents`: also the search and list cursors).
"""

from typing import TYPE_CHECKING

from ragindex.faces import lazy_face

if TYPE_CHECKING:
    from ragindex.router.applied import ViewReport, views_behind
    from ragindex.router.auth import Grant, TokenVerifier, create_token, tokens_path
    from ragindex.router.context import assemble_context
    from ragindex.router.documents import (
        DocumentPage,
        Paged,
        bounded_deletes,
        merge_summaries,
        page_documents,
    )
    from ragindex.router.failover import FailoverPolicy, Fault, next_try
    from ragindex.router.generators import (
        ExtractiveGenerator,
        Generator,
        OpenAICompatibleGenerator,
        make_generator,
    )
    from ragindex.router.grounded_answer import (
        Answer,
        AnswerRequest,
        AnswerResponse,
        AnswerService,
        SourceRef,
    )
    from ragindex.router.grounding import check_answer, content_terms, coverage
    from ragindex.router.http import Backend, create_app
    from ragindex.router.limits import TenantLimiter
    from ragindex.router.query import Access, QueryEngine, SearchResult, engine_ms
    from ragindex.router.query_cache import with_query_cache

__all__ = [
    "Access",
    "Answer",
    "AnswerRequest",
    "AnswerResponse",
    "AnswerService",
    "Backend",
    "DocumentPage",
    "ExtractiveGenerator",
    "FailoverPolicy",
    "Fault",
    "Generator",
    "Grant",
    "OpenAICompatibleGenerator",
    "Paged",
    "QueryEngine",
    "SearchResult",
    "SourceRef",
    "TenantLimiter",
    "TokenVerifier",
    "ViewReport",
    "assemble_context",
    "bounded_deletes",
    "check_answer",
    "content_terms",
    "coverage",
    "create_app",
    "create_token",
    "engine_ms",
    "make_generator",
    "merge_summaries",
    "next_try",
    "page_documents",
    "tokens_path",
    "views_behind",
    "with_query_cache",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_face(
        __name__,
        {
            "applied": ["ViewReport", "views_behind"],
            "auth": ["Grant", "TokenVerifier", "create_token", "tokens_path"],
            "context": ["assemble_context"],
            "documents": [
                "DocumentPage",
                "Paged",
                "bounded_deletes",
                "merge_summaries",
                "page_documents",
            ],
            "failover": ["FailoverPolicy", "Fault", "next_try"],
            "generators": [
                "ExtractiveGenerator",
                "Generator",
                "OpenAICompatibleGenerator",
                "make_generator",
            ],
            "grounded_answer": [
                "Answer",
                "AnswerRequest",
                "AnswerResponse",
                "AnswerService",
                "SourceRef",
            ],
            "grounding": ["check_answer", "content_terms", "coverage"],
            "http": ["Backend", "create_app"],
            "limits": ["TenantLimiter"],
            "query": ["Access", "QueryEngine", "SearchResult", "engine_ms"],
            "query_cache": ["with_query_cache"],
        },
    )
