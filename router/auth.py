"""API tokens bound to one tenant and a set of principals, stored hashed in
`<data_dir>/tokens.json`.

The tenant and the principals (`user:alice`, `group:eng`: which documents with an ACL the
token may read; none: only documents without an ACL) of a request come only from its token
(DESIGN.md invariant 1), never from the body; a request may narrow its principals. Only
sha256 digests are stored, so a leaked token file grants nothing. The file is written
atomically (temp file, fsync, rename) under an exclusive lock, so `ragindex token create` can
run while the server serves; the server re-reads the file when it changes.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ragindex.errors import InvalidInput
from ragindex.types import validate_principal, validate_tenant

TOKENS_FILE = "tokens.json"
TOKEN_BYTES = 32


def tokens_path(data_dir: Path) -> Path:
    return data_dir / TOKENS_FILE


def hash_token(token: str) -> str:
    """The stored form of a token: hex sha256 of its UTF-8 bytes."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None when absent/other."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


@dataclass(frozen=True)
class Grant:
    """What a token may read: one tenant, and documents whose ACL names one of `principals`
    (documents without an ACL are the whole tenant's)."""

    tenant: str
    principals: frozenset[str] = frozenset()


def _parse(text: str, path: Path) -> dict[str, Grant]:
    """Map token digest -> grant; a corrupt file is an error, never an empty (open) store."""
    try:
        data: Any = json.loads(text) if text.strip() else {"tokens": {}}
        entries = data["tokens"]
        return {
            digest: Grant(
                entry["tenant"],
                frozenset(validate_principal(p) for p in entry.get("principals", [])),
            )
            for digest, entry in entries.items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise InvalidInput(f"token file {path} is malformed: {err}") from err


def create_token(data_dir: Path, tenant_id: str, principals: Sequence[str] = ()) -> str:
    """Mint a token for one tenant and its principals, store its digest, and return the
    token (shown once)."""
    tenant_id = validate_tenant(tenant_id)
    granted = sorted({validate_principal(p) for p in principals})
    data_dir.mkdir(parents=True, exist_ok=True)
    path = tokens_path(data_dir)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    lock_path = data_dir / (TOKENS_FILE + ".lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        text = path.read_text() if path.exists() else ""
        _parse(text, path)  # refuse to overwrite a corrupt file
        data = json.loads(text) if text.strip() else {"tokens": {}}
        data["tokens"][hash_token(token)] = {
            "tenant": tenant_id,
            "principals": granted,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        tmp = path.with_name(f".{TOKENS_FILE}.{os.getpid()}.tmp")
        with open(tmp, "w") as out:
            json.dump(data, out, indent=2)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
        dir_fd = os.open(data_dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return token


@dataclass(frozen=True)
class _Snapshot:
    stamp: tuple[int, int, int] | None
    grants: dict[str, Grant]


class TokenVerifier:
    """Resolves tokens to tenants; re-reads the token file whenever its stat changes."""

    def __init__(self, data_dir: Path) -> None:
        self.path = tokens_path(data_dir)
        self._lock = threading.Lock()
        self._snapshot = _Snapshot(stamp=None, grants={})

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_ino, st.st_size)

    def _current(self) -> dict[str, Grant]:
        stamp = self._stamp()
        snapshot = self._snapshot
        if stamp == snapshot.stamp:
            return snapshot.grants
        with self._lock:
            grants = _parse(self.path.read_text(), self.path) if stamp is not None else {}
            self._snapshot = _Snapshot(stamp=stamp, grants=grants)
            return grants

    def grant_for(self, token: str | None) -> Grant | None:
        """What this token may read, or None for a missing or unknown token."""
        if not token:
            return None
        return self._current().get(hash_token(token))

    def tenant_for(self, token: str | None) -> str | None:
        """The tenant bound to this token, or None for a missing or unknown token."""
        grant = self.grant_for(token)
        return grant.tenant if grant is not None else None
