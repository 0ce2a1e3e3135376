"""How the HTTP layer states problems: a problem-details response per error, the one line a
schema failure becomes, the methods a path takes (for 405's `Allow`), and the error responses
each route declares in the OpenAPI document. The table of problems is `router/problems.py`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.routing import Match

from ragindex.router.problems import MEDIA_TYPE as PROBLEM_MEDIA_TYPE
from ragindex.router.problems import PROBLEMS, problem


def validation_message(errors: list[Any]) -> tuple[str, str]:
    """Problem code and one readable line for a request that failed schema validation."""
    if any(e.get("type") == "json_invalid" for e in errors):
        ctx = next(e for e in errors if e.get("type") == "json_invalid").get("ctx", {})
        return "invalid-json", f"request body is not valid JSON: {ctx.get('error', 'parse error')}"
    parts = []
    for e in errors[:5]:
        where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "invalid-request", "invalid request: " + "; ".join(parts) + more


def problem_response(
    code: str, detail: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        problem(code, detail),
        status_code=PROBLEMS[code].status,
        headers=headers,
        media_type=PROBLEM_MEDIA_TYPE,
    )


def allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """The methods of every route whose path matches the request's (Starlette's 405 names
    only the first route that matched the path)."""
    methods: set[str] = set()
    for route in app.routes:
        match, _ = route.matches({**request.scope, "method": "\x00"})
        if match != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


def replace_pattern(node: Any, old: str, new: str) -> None:
    """Every `pattern` equal to `old` in a JSON schema document becomes `new`, in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and value == old:
                node[key] = new
            else:
                replace_pattern(value, old, new)
    elif isinstance(node, list):
        for item in node:
            replace_pattern(item, old, new)


def error_doc(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "description": description,
        "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }
    if headers:
        out["headers"] = headers
    return out


RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "integer"},
    }
}
READ_ERRORS: dict[int | str, dict[str, Any]] = {
    403: error_doc("The request asks for a principal its token does not hold (names it).")
}
AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: error_doc(
        "Missing, unknown (never issued or revoked) or expired bearer token (says which).",
        {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}},
    ),
    429: error_doc("The tenant is over its concurrency or rate limit.", RETRY_AFTER),
}
BACKEND_ERRORS: dict[int | str, dict[str, Any]] = {
    400: error_doc("The request is well-formed but its content is refused (says why)."),
    409: error_doc(
        "The request asks for what this index is not set up to do (e.g. rerank without a"
        " reranker), or the index was built by another embedding model than this replica runs."
    ),
    503: error_doc("The index is opening or a backend is down; retry shortly."),
}
BODY_ERRORS: dict[int | str, dict[str, Any]] = {
    400: error_doc("The body is not valid JSON, or its content is refused (says why)."),
    413: error_doc("The body is larger than the limit."),
    422: error_doc("The body does not match the schema (names the field)."),
}
