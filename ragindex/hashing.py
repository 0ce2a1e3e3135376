"""Stable chunk ids, content hashes and shard assignment.

Python's built-in hash() is salted per process, so shard routing uses blake2b: the same
chunk lands on the same shard in every process and after every restart.
"""

from __future__ import annotations

import hashlib


def chunk_id(source: str, doc_id: str, n: int) -> str:
    """The stable id of the n-th chunk of a document: `{source}:{doc_id}:{n}`."""
    return f"{source}:{doc_id}:{n}"


def content_hash(text: str) -> str:
    """Hex blake2b-128 of the UTF-8 text: equal text, equal hash, in every process."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def shard_for(tenant_id: str, chunk_id: str, num_shards: int) -> int:
    """Which dense shard owns this chunk (stable across processes and restarts)."""
    if num_shards < 1:
        raise ValueError("num_shards must be >= 1")
    digest = hashlib.blake2b(f"{tenant_id}\x1f{chunk_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % num_shards
