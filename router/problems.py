"""Every API error as RFC 9457 problem details (`application/problem+json`), one stable `type`
per kind of error, so a client can switch on what went wrong without parsing a message.

Pure: the table, and which error or status maps to which entry; the HTTP layer renders them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragindex.errors import (
    BackendUnavailable,
    IdentityMismatch,
    InvalidInput,
    NotConfigured,
    TooLarge,
    TooManyMatches,
)

MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:ragindex:problem:"


@dataclass(frozen=True)
class ProblemKind:
    status: int
    title: str


PROBLEMS: dict[str, ProblemKind] = {
    "invalid-json": ProblemKind(400, "The body is not valid JSON"),
    "invalid-input": ProblemKind(400, "The request's content is refused"),
    "unauthorized": ProblemKind(401, "Missing, unknown, revoked or expired bearer token"),
    "forbidden": ProblemKind(403, "The request asks for a principal its token does not hold"),
    "not-found": ProblemKind(404, "No such resource"),
    "method-not-allowed": ProblemKind(405, "The resource does not take this method"),
    "not-configured": ProblemKind(409, "The index is not set up for this request"),
    "identity-mismatch": ProblemKind(409, "The index was built by another embedding model"),
    "too-many-matches": ProblemKind(
        409, "The filter matches more documents than the request allows; nothing was changed"
    ),
    "too-large": ProblemKind(413, "Larger than the limit"),
    "invalid-request": ProblemKind(422, "The body does not match the schema"),
    "rate-limited": ProblemKind(429, "The tenant is over its concurrency or rate limit"),
    "internal": ProblemKind(500, "Internal error"),
    "unavailable": ProblemKind(503, "The index is opening or a backend is down"),
}
"""code -> status and title; the code is the last part of the `type` URN, and never changes
meaning (a new kind of error gets a new code)."""


def unwrapped(err: BaseException) -> BaseException:
    """The error raised behind the API (Ray wraps a replica's error; `.cause` is the original)."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, BaseException) and cause is not err else err


def code_for_error(err: BaseException) -> str:
    """The problem code of an error raised behind the API."""
    err = unwrapped(err)
    if isinstance(err, IdentityMismatch):
        return "identity-mismatch"
    if isinstance(err, TooManyMatches):
        return "too-many-matches"
    if isinstance(err, NotConfigured):
        return "not-configured"
    if isinstance(err, TooLarge):
        return "too-large"
    if isinstance(err, InvalidInput):
        return "invalid-input"
    if isinstance(err, BackendUnavailable):
        return "unavailable"
    return "internal"


def code_for_status(status: int) -> str:
    """The problem code of an error the HTTP layer raised by status (401, 404, 429, ...)."""
    return next((code for code, kind in PROBLEMS.items() if kind.status == status), "internal")


def problem(code: str, detail: str) -> dict[str, Any]:
    """The problem details body: type, title, status, detail, and the code on its own."""
    kind = PROBLEMS[code]
    return {
        "type": TYPE_PREFIX + code,
        "title": kind.title,
        "status": kind.status,
        "detail": detail,
        "code": code,
    }
