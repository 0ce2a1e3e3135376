"""API tokens bound to one tenant and a set of principals, stored hashed in
`<data_dir>/tokens.json` (or the `tokens.json` key of a mounted Secret in the cluster).

The tenant and the principals (`user:alice`, `group:eng`: which documents with an ACL the
token may read; none: only documents without an ACL) of a request come only from its token
(DESIGN.md invariant 1), never from the body; a request may narrow its principals. Only
sha256 digests are stored, so a leaked token file grants nothing. The file is written
atomically (temp file, fsync, rename) under an exclusive lock, so `ragindex token create` and
`revoke` can run while the server serves; the server stats the file on every request and
re-reads it when it changed.

The file: `{"tokens": {"<sha256 hex of the token>": {"id": "3f9c2a7b1d04", "tenant": "acme",
"principals": ["group:eng"], "created": "2026-12-02T13:53:53Z", "expires":
"2027-01-01T00:00:00Z", "name": "ci", "description": "..."}}}`. Only `tenant` is required:
an entry without `id` (written before ids existed) gets one derived from its digest and keeps
working, one without `expires` never expires; the next write adds the derived ids.

This module imports only the standard library and the pure core, so `python -m
ragindex.router.token_tool` runs where torch, FAISS and Ray are not installed."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from ragindex.errors import InvalidInput, RagIndexError
from ragindex.types import validate_principal, validate_tenant

TOKENS_FILE = "tokens.json"
TOKEN_BYTES = 32
_T = TypeVar("_T")


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


@dataclass(frozen=True)
class TokenRecord:
    """One token's non-secret record: what `ragindex token list` shows (never the token nor its
    digest)."""

    id: str
    tenant: str
    principals: tuple[str, ...] = ()
    created: datetime | None = None
    expires: datetime | None = None
    name: str | None = None
    description: str | None = None

    @property
    def grant(self) -> Grant:
        return Grant(self.tenant, frozenset(self.principals))

    def expired(self, now: datetime) -> bool:
        return self.expires is not None and now >= self.expires

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        """The listing form: timestamps in RFC 3339 (UTC), `expired` as of `now`."""
        return {
            "id": self.id,
            "tenant": self.tenant,
            "principals": list(self.principals),
            "created": rfc3339(self.created) if self.created else None,
            "expires": rfc3339(self.expires) if self.expires else None,
            "expired": self.expired(now or datetime.now(UTC)),
            "name": self.name,
            "description": self.description,
        }


@dataclass(frozen=True)
class IssuedToken:
    token: str
    """The secret: shown once, stored only as its digest."""
    record: TokenRecord


class TokenRefused(RagIndexError):
    """A request's bearer token is missing, unknown (never issued or revoked) or expired."""


def rfc3339(moment: datetime) -> str:
    """UTC, whole seconds, `Z`: 2026-12-02T13:53:53Z."""
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def parse_timestamp(value: str, what: str = "expires-at") -> datetime:
    """An RFC 3339 date-time with an offset (`Z` or `+hh:mm`), as an aware UTC datetime."""
    try:
        moment = datetime.fromisoformat(value.strip()) if isinstance(value, str) else None
    except ValueError:
        moment = None
    if moment is None or "T" not in value.upper() or moment.tzinfo is None:
        raise InvalidInput(
            f"{what} {str(value)[:80]!r} is not an RFC 3339 date-time with an offset"
            " (e.g. 2027-01-31T00:00:00Z)"
        )
    return moment.astimezone(UTC)


_DURATION_PART = re.compile(r"(\d{1,9})([smhdw])")
_DURATION_RE = re.compile(r"(?:\d{1,9}[smhdw])+")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_LIFETIME = timedelta(days=3660)


def parse_duration(value: str) -> timedelta:
    """`30d`, `12h`, `90m`, `45s`, `2w`, or a sum such as `1d12h`; more than zero and at most
    ten years."""
    text = value.strip().lower() if isinstance(value, str) else ""
    if not _DURATION_RE.fullmatch(text):
        raise InvalidInput(
            f"expires-in {str(value)[:80]!r} is not a duration: use a number and a unit"
            " s, m, h, d or w (e.g. 30d, 12h, 1d12h)"
        )
    seconds = sum(int(n) * _UNIT_S[unit] for n, unit in _DURATION_PART.findall(text))
    if seconds <= 0:
        raise InvalidInput(f"expires-in {value!r} must be more than zero")
    if seconds > MAX_LIFETIME.total_seconds():
        raise InvalidInput(f"expires-in {value!r} is more than ten years")
    return timedelta(seconds=seconds)


def expiry(
    expires_in: str | None, expires_at: str | None, now: datetime | None = None
) -> datetime | None:
    """When a new token expires: `expires_in` from now, or at `expires_at` (in the future), or
    never (both None)."""
    now = now or datetime.now(UTC)
    if expires_in is not None and expires_at is not None:
        raise InvalidInput("give either expires-in or expires-at, not both")
    if expires_in is not None:
        return (now + parse_duration(expires_in)).replace(microsecond=0)
    if expires_at is not None:
        moment = parse_timestamp(expires_at)
        if moment <= now:
            raise InvalidInput(f"expires-at {expires_at!r} is not in the future")
        if moment - now > MAX_LIFETIME:
            raise InvalidInput(f"expires-at {expires_at!r} is more than ten years away")
        return moment
    return None


TOKEN_ID_RE = re.compile(r"[0-9a-f]{12}")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
MAX_DESCRIPTION_CHARS = 256
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def legacy_token_id(digest: str) -> str:
    """The id of a record written before tokens had ids: derived from its digest (stable, so
    `list` and `revoke` agree before the file is next written), not the digest itself."""
    return hashlib.sha256(f"ragindex-token-id:{digest}".encode()).hexdigest()[:12]


def validate_name(value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise InvalidInput(
            f"name {str(value)[:80]!r} is malformed: use 1-63 characters of A-Z, a-z, 0-9, '.',"
            " '_' or '-', starting with a letter or digit"
        )
    return value


def validate_description(value: str | None) -> str | None:
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or len(value) > MAX_DESCRIPTION_CHARS
        or _CONTROL_RE.search(value)
    ):
        raise InvalidInput(
            f"description must be at most {MAX_DESCRIPTION_CHARS} characters without control"
            " characters"
        )
    return value


def _informational_time(value: Any) -> datetime | None:
    """`created`, which grants nothing: unreadable is unknown, not a corrupt file (`expires`,
    which does, must parse)."""
    try:
        return parse_timestamp(value, "created") if value is not None else None
    except InvalidInput:
        return None


def _record(digest: str, entry: Any) -> TokenRecord:
    if not isinstance(entry, dict):
        raise TypeError(f"entry {digest[:8]}... is not an object")
    token_id = entry.get("id", legacy_token_id(digest))
    if not isinstance(token_id, str) or not TOKEN_ID_RE.fullmatch(token_id):
        raise ValueError(f"entry {digest[:8]}... has a malformed id {token_id!r}")
    principals = entry.get("principals", [])
    if not isinstance(principals, list):
        raise TypeError(f"token {token_id}: principals is not a list")
    created, expires = entry.get("created"), entry.get("expires")
    return TokenRecord(
        id=token_id,
        tenant=validate_tenant(entry["tenant"]),
        principals=tuple(sorted({validate_principal(p) for p in principals})),
        created=_informational_time(created),
        expires=parse_timestamp(expires, "expires") if expires is not None else None,
        name=validate_name(entry.get("name")),
        description=validate_description(entry.get("description")),
    )


def _load(text: str, path: Path | str) -> tuple[dict[str, Any], dict[str, TokenRecord]]:
    """The file's JSON and its records by digest; a corrupt file is an error, never an empty
    (open) store. Records written before ids, expiry and names (a bare `tenant` and
    `principals`) are read as tokens that never expire, with an id derived from the digest."""
    try:
        data: Any = json.loads(text) if text.strip() else {"tokens": {}}
        entries = data["tokens"]
        if not isinstance(entries, dict):
            raise TypeError("tokens is not an object")
        records = {digest: _record(digest, entry) for digest, entry in entries.items()}
        ids = [record.id for record in records.values()]
        if len(set(ids)) != len(ids):
            raise ValueError("two entries share an id")
        return data, records
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise InvalidInput(f"token file {path} is malformed: {err}") from err


def _parse(text: str, path: Path | str) -> dict[str, TokenRecord]:
    return _load(text, path)[1]


def _dump(data: dict[str, Any], records: dict[str, TokenRecord]) -> str:
    """The file's text, every entry with its id (older entries are migrated in place; fields
    this version does not know are kept)."""
    for digest, record in records.items():
        data["tokens"][digest].setdefault("id", record.id)
    return json.dumps(data, indent=2) + "\n"


def issue_in_text(
    text: str,
    tenant_id: str,
    principals: Sequence[str] = (),
    *,
    expires: datetime | None = None,
    name: str | None = None,
    description: str | None = None,
    now: datetime | None = None,
    where: Path | str = "tokens.json",
) -> tuple[str, IssuedToken]:
    """A token file's new text with a fresh token added, and the token (shown once)."""
    tenant_id = validate_tenant(tenant_id)
    granted = sorted({validate_principal(p) for p in principals})
    name, description = validate_name(name), validate_description(description)
    now = (now or datetime.now(UTC)).replace(microsecond=0)
    if expires is not None and expires <= now:
        raise InvalidInput(f"expiry {rfc3339(expires)} is not in the future")
    data, records = _load(text, where)  # refuse to overwrite a corrupt file
    taken = {record.id for record in records.values()}
    token_id = secrets.token_hex(6)
    while token_id in taken:
        token_id = secrets.token_hex(6)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    entry: dict[str, Any] = {
        "id": token_id,
        "tenant": tenant_id,
        "principals": granted,
        "created": rfc3339(now),
    }
    if expires is not None:
        entry["expires"] = rfc3339(expires)
    if name is not None:
        entry["name"] = name
    if description is not None:
        entry["description"] = description
    digest = hash_token(token)
    data["tokens"][digest] = entry
    records[digest] = _record(digest, entry)
    return _dump(data, records), IssuedToken(token, records[digest])


def revoke_in_text(
    text: str, token_id: str, where: Path | str = "tokens.json"
) -> tuple[str, TokenRecord]:
    """A token file's new text without the token `token_id`, and its record; an unknown id is
    an error and changes nothing."""
    data, records = _load(text, where)
    for digest, record in records.items():
        if record.id == token_id:
            del data["tokens"][digest]
            del records[digest]
            return _dump(data, records), record
    raise InvalidInput(f"no token with id {str(token_id)[:80]!r} in {where}")


def list_in_text(text: str, where: Path | str = "tokens.json") -> list[TokenRecord]:
    """The file's records, oldest first (records without a creation time first)."""
    records = list(_parse(text, where).values())
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(records, key=lambda r: (r.created or epoch, r.id))


def _update(path: Path, change: Callable[[str], tuple[str, _T]]) -> _T:
    """Apply `change` to the token file's text under an exclusive lock and write the result
    atomically (temp file, fsync, rename, fsync of the directory)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = path.with_name(path.name + ".lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        text = path.read_text() if path.exists() else ""
        new_text, result = change(text)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "w") as out:
            out.write(new_text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        try:  # mtime strictly increases, so a reader's stat sees every write (same size, reused
            # inode and a coarse clock alike)
            previous = os.stat(path).st_mtime_ns
        except FileNotFoundError:
            previous = 0
        now_ns = time.time_ns()
        os.utime(tmp, ns=(now_ns, max(now_ns, previous + 1)))
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return result


def issue_token(
    path: Path,
    tenant_id: str,
    principals: Sequence[str] = (),
    *,
    expires: datetime | None = None,
    name: str | None = None,
    description: str | None = None,
) -> IssuedToken:
    """Mint a token into the token file at `path`; the token is in the result, shown once."""
    return _update(
        path,
        lambda text: issue_in_text(
            text,
            tenant_id,
            principals,
            expires=expires,
            name=name,
            description=description,
            where=path,
        ),
    )


def revoke_token(path: Path, token_id: str) -> TokenRecord:
    """Remove token `token_id` from the token file at `path`; an unknown id changes nothing."""
    if not path.exists():
        raise InvalidInput(f"no token with id {str(token_id)[:80]!r}: {path} does not exist")
    return _update(path, lambda text: revoke_in_text(text, token_id, path))


def list_tokens(path: Path) -> list[TokenRecord]:
    """The token file's records (none when it does not exist)."""
    return list_in_text(path.read_text(), path) if path.exists() else []


def create_token(
    data_dir: Path,
    tenant_id: str,
    principals: Sequence[str] = (),
    *,
    expires: datetime | None = None,
    name: str | None = None,
    description: str | None = None,
) -> str:
    """Mint a token for one tenant and its principals into `<data_dir>/tokens.json` and return
    the token (shown once)."""
    issued = issue_token(
        tokens_path(data_dir),
        tenant_id,
        principals,
        expires=expires,
        name=name,
        description=description,
    )
    return issued.token


@dataclass(frozen=True)
class _Snapshot:
    stamp: tuple[int, int, int] | None
    records: dict[str, TokenRecord]


UNKNOWN_TOKEN = "missing or unknown bearer token"


class TokenVerifier:
    """Resolves tokens to grants. Every lookup stats the token file (following symlinks, as a
    mounted Secret's `tokens.json` is one) and re-reads it when its mtime, inode or size
    changed, so a token minted or revoked there counts from the next request on; expiry is
    checked against the clock on every request."""

    def __init__(
        self, data_dir: Path, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.path = tokens_path(data_dir)
        self.clock = clock
        self._lock = threading.Lock()
        self._snapshot = _Snapshot(stamp=None, records={})

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_ino, st.st_size)

    def _current(self) -> dict[str, TokenRecord]:
        stamp = self._stamp()
        snapshot = self._snapshot
        if stamp == snapshot.stamp:
            return snapshot.records
        with self._lock:
            records = _parse(self.path.read_text(), self.path) if stamp is not None else {}
            self._snapshot = _Snapshot(stamp=stamp, records=records)
            return records

    def check(self, token: str | None) -> Grant:
        """What this token may read; `TokenRefused` (saying why) for a missing, unknown
        (never issued, or revoked) or expired token."""
        record = self._current().get(hash_token(token)) if token else None
        if record is None:
            raise TokenRefused(UNKNOWN_TOKEN)
        if record.expires is not None and record.expired(self.clock()):
            raise TokenRefused(
                f"bearer token {record.id} expired at {rfc3339(record.expires)}: mint a new one"
            )
        return record.grant

    def grant_for(self, token: str | None) -> Grant | None:
        """What this token may read, or None for a missing, unknown or expired token."""
        try:
            return self.check(token)
        except TokenRefused:
            return None

    def tenant_for(self, token: str | None) -> str | None:
        """The tenant bound to this token, or None for a missing, unknown or expired token."""
        grant = self.grant_for(token)
        return grant.tenant if grant is not None else None
