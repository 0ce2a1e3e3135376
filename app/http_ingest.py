"""Post documents to a running server's `POST /v1/documents`, batch by batch: what `ragindex
ingest --url` and `ragindex demo` do.

A batch the server could not take for now (a connection error, 429 with Retry-After, 502/503/504)
is sent again after a bounded backoff; a refusal (400, 401, 413, ...) stops at once with the
server's message. Writes are idempotent (a document is keyed by source and doc_id, and an
unchanged one is not re-embedded), so a stopped run is resumed by running it again, or with
`--skip N` past the N documents it reported acknowledged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from ragindex.errors import BackendUnavailable, InvalidInput, RagIndexError
from ragindex.types import Document

RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
ATTEMPTS = 6
"""Tries per batch before the run stops (backoff 1, 2, 4, 8, 16 s, or the server's Retry-After)."""
MAX_BACKOFF_S = 30.0


def document_json(doc: Document) -> dict[str, Any]:
    """A Document as the API's DocumentIn."""
    body: dict[str, Any] = {
        "source": doc.source,
        "doc_id": doc.doc_id,
        "title": doc.title,
        "text": doc.text,
        "updated": doc.updated,
        "metadata": doc.metadata,
    }
    if doc.acl is not None:
        body["acl"] = list(doc.acl)
    return body


def backoff_s(attempt: int, retry_after: str | None) -> float:
    """Seconds before try `attempt + 1`: the server's Retry-After when it sent one, else
    doubling from 1 s; never more than MAX_BACKOFF_S."""
    if retry_after is not None and retry_after.strip().isdigit():
        return min(float(retry_after.strip()), MAX_BACKOFF_S)
    return min(2.0 ** (attempt - 1), MAX_BACKOFF_S)


def _problem(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    return f"HTTP {response.status_code}: {' '.join(str(detail).split())[:500]}"


class IngestStopped(RagIndexError):
    """A run stopped part way: `acknowledged` documents are durable in the log."""

    def __init__(self, message: str, acknowledged: int, cause: RagIndexError) -> None:
        super().__init__(message)
        self.acknowledged = acknowledged
        self.cause = cause


def post_documents(
    client: httpx.Client,
    documents: Sequence[Document],
    *,
    batch: int,
    skip: int = 0,
    wait: bool = False,
    progress: Callable[[int], None] = lambda n: None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Post `documents` after the first `skip` in batches; returns how many of them are now
    acknowledged (all), or raises IngestStopped saying how many were before it stopped. With
    `wait`, each batch's answer comes once it is searchable on every replica."""
    if batch < 1:
        raise InvalidInput(f"--batch must be at least 1, got {batch}")
    if not 0 <= skip <= len(documents):
        raise InvalidInput(f"--skip must be between 0 and {len(documents)}, got {skip}")
    params = {"wait": "true", "wait_timeout_s": "60"} if wait else {}
    done = skip
    for start in range(skip, len(documents), batch):
        chunk = documents[start : start + batch]
        try:
            _post_batch(client, [document_json(d) for d in chunk], params, sleep)
        except RagIndexError as err:
            first = chunk[0]
            raise IngestStopped(
                f"stopped at document {start + 1} of {len(documents)}"
                f" ({first.source}/{first.doc_id}): {err}; {done} acknowledged before it"
                f" (run again, or add --skip {done}, to continue)",
                done,
                err,
            ) from err
        done += len(chunk)
        progress(len(chunk))
    return done


def _post_batch(
    client: httpx.Client,
    body: list[dict[str, Any]],
    params: dict[str, str],
    sleep: Callable[[float], None],
) -> None:
    for attempt in range(1, ATTEMPTS + 1):
        retry_after = None
        try:
            response = client.post("/v1/documents", json={"documents": body}, params=params)
        except httpx.TransportError as err:
            problem = f"{type(err).__name__}: {err}"
        else:
            if response.status_code < 300:
                return
            if response.status_code not in RETRYABLE_STATUS:
                raise InvalidInput(_problem(response))
            problem, retry_after = _problem(response), response.headers.get("Retry-After")
        if attempt == ATTEMPTS:
            raise BackendUnavailable(f"{problem} ({ATTEMPTS} tries)")
        sleep(backoff_s(attempt, retry_after))
