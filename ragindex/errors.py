"""Errors that cross layer boundaries.

They live in the core so that every layer raises the same types and the HTTP edge can map
them to status codes in one place.
"""


class RagIndexError(Exception):
    """Base class for errors that ragindex raises on purpose."""


class InvalidInput(RagIndexError, ValueError):
    """The caller sent something malformed; nothing was changed."""


class IdentityMismatch(RagIndexError):
    """A vector was made by a different embedding model identity than the index was built with."""


class BackendUnavailable(RagIndexError):
    """A backing server (e.g. Elasticsearch) is down or did not answer within the timeout."""


class OffsetOutOfRange(RagIndexError):
    """The requested log offset was compacted or truncated away: restart from a snapshot."""
