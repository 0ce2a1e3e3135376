"""Errors that cross layer boundaries.

They live in the core so that every layer raises the same types and the HTTP edge can map
them to status codes in one place.
"""


class RagIndexError(Exception):
    """Base class for errors that ragindex raises on purpose."""


class InvalidInput(RagIndexError, ValueError):
    """The caller sent something malformed; nothing was changed."""


class TooLarge(InvalidInput):
    """The input is well-formed but larger than the index can store (HTTP 413): e.g. a
    document over one log record; nothing was changed."""


class IdentityMismatch(RagIndexError):
    """A vector was made by a different embedding model identity than the index was built with."""


class NotConfigured(InvalidInput):
    """The request is well-formed but asks for what this index is not set up to do (e.g.
    rerank without a reranker): change the request or the index's spec (HTTP 409)."""


class BackendUnavailable(RagIndexError):
    """A backing server (e.g. Elasticsearch) is down or did not answer within the timeout."""


class BackendAccessDenied(BackendUnavailable):
    """A backing server answered but refused our credentials or our permissions: a setting
    to fix (the connection settings name them), not an outage to wait out."""


class OffsetOutOfRange(RagIndexError):
    """The requested log offset was compacted or truncated away: restart from a snapshot."""


class TooManyMatches(RagIndexError):
    """A bounded write (delete by filter) matches more documents than the request allows;
    nothing was changed (HTTP 409): narrow the filter or raise the bound."""
