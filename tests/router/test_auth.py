"""Tenant tokens: hashed at rest, atomic writes, re-read on change, tenant only from token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ragindex.errors import InvalidInput
from ragindex.router import Grant, TokenVerifier, create_token, tokens_path
from ragindex.router.auth import (
    TOKEN_ID_RE,
    TokenRefused,
    bearer_token,
    expiry,
    hash_token,
    issue_token,
    legacy_token_id,
    list_tokens,
    parse_duration,
    revoke_token,
)


def test_token_is_stored_only_as_its_hash(tmp_path: Path) -> None:
    token = create_token(tmp_path, "acme")
    text = tokens_path(tmp_path).read_text()
    assert token not in text
    assert json.loads(text)["tokens"][hash_token(token)]["tenant"] == "acme"
    assert len(token) >= 40  # 32 random bytes, urlsafe base64


def test_verifier_maps_tokens_to_their_tenant(tmp_path: Path) -> None:
    a, b = create_token(tmp_path, "acme"), create_token(tmp_path, "globex")
    verifier = TokenVerifier(tmp_path)
    assert verifier.tenant_for(a) == "acme"
    assert verifier.tenant_for(b) == "globex"
    assert verifier.tenant_for("unknown") is None
    assert verifier.tenant_for(None) is None
    assert verifier.tenant_for("") is None


def test_verifier_sees_tokens_minted_after_it_started(tmp_path: Path) -> None:
    verifier = TokenVerifier(tmp_path)
    assert verifier.tenant_for("anything") is None  # no file yet: nobody is let in
    token = create_token(tmp_path, "late")
    assert verifier.tenant_for(token) == "late"
    second = create_token(tmp_path, "later")
    assert verifier.tenant_for(second) == "later"
    assert verifier.tenant_for(token) == "late"


def test_bad_tenant_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    for bad in ("", "Upper", "has space", "a" * 64, "-lead"):
        with pytest.raises(InvalidInput, match="tenant_id"):
            create_token(tmp_path, bad)
    assert not tokens_path(tmp_path).exists()


def test_corrupt_token_file_is_an_error_not_an_open_door(tmp_path: Path) -> None:
    tokens_path(tmp_path).write_text("{not json")
    with pytest.raises(InvalidInput, match="malformed"):
        TokenVerifier(tmp_path).tenant_for("x")
    with pytest.raises(InvalidInput, match="malformed"):
        create_token(tmp_path, "acme")
    assert tokens_path(tmp_path).read_text() == "{not json"


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        (None, None),
        ("", None),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer a b", None),
    ],
)
def test_bearer_header_parsing(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_concurrent_creates_lose_no_token(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from ragindex.router.auth import create_token;"
        "print('\\n'.join(create_token(Path(sys.argv[1]), 't') for _ in range(20)))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE)
        for _ in range(3)
    ]
    tokens = [t for p in procs for t in p.communicate(timeout=60)[0].decode().split()]
    assert len(tokens) == 60
    verifier = TokenVerifier(tmp_path)
    assert all(verifier.tenant_for(t) == "t" for t in tokens)


def test_tokens_carry_principals(tmp_path: Path) -> None:
    eng = create_token(tmp_path, "acme", ["group:eng", "user:ann", "group:eng"])
    plain = create_token(tmp_path, "acme")
    verifier = TokenVerifier(tmp_path)
    assert verifier.grant_for(eng) == Grant("acme", frozenset({"group:eng", "user:ann"}))
    assert verifier.grant_for(plain) == Grant("acme", frozenset())  # documents without an ACL
    assert verifier.grant_for("unknown") is None
    for bad in ["eng", "user:", "user:a b", "team:x"]:
        with pytest.raises(InvalidInput, match="principal"):
            create_token(tmp_path, "acme", [bad])


# --- ids, expiry, list, revoke, and files written before them --------------------------------

NOW = datetime(2030, 12, 2, 12, 0, 0, tzinfo=UTC)  # after the box's clock: issue_token checks
LEGACY_TOKEN = "legacy-token-from-an-older-release"
LEGACY_FILE = {
    # What `ragindex token create` wrote before ids, expiry and names (and a field of its own).
    "tokens": {
        hash_token(LEGACY_TOKEN): {
            "tenant": "acme",
            "principals": ["group:eng"],
            "created": "2026-01-05T10:00:00+00:00",
            "note": "kept as is",
        },
        hash_token("bare"): {"tenant": "globex", "created": "last tuesday"},
    }
}


def test_a_token_file_from_before_ids_and_expiry_keeps_working(tmp_path: Path) -> None:
    tokens_path(tmp_path).write_text(json.dumps(LEGACY_FILE, indent=2))
    verifier = TokenVerifier(tmp_path)
    assert verifier.grant_for(LEGACY_TOKEN) == Grant("acme", frozenset({"group:eng"}))
    assert verifier.grant_for("bare") == Grant("globex")
    listed = {r.tenant: r for r in list_tokens(tokens_path(tmp_path))}
    assert listed["acme"].id == legacy_token_id(hash_token(LEGACY_TOKEN))
    assert listed["acme"].expires is None and listed["globex"].created is None
    # The next write migrates the old entries in place: same ids, fields kept, still valid.
    create_token(tmp_path, "initech")
    data = json.loads(tokens_path(tmp_path).read_text())["tokens"]
    assert data[hash_token(LEGACY_TOKEN)]["id"] == listed["acme"].id
    assert data[hash_token(LEGACY_TOKEN)]["note"] == "kept as is"
    assert data[hash_token("bare")]["id"] == listed["globex"].id
    assert verifier.grant_for(LEGACY_TOKEN) == Grant("acme", frozenset({"group:eng"}))
    # A legacy token is revoked by the id `list` showed before the migration.
    revoke_token(tokens_path(tmp_path), listed["acme"].id)
    assert verifier.grant_for(LEGACY_TOKEN) is None
    assert verifier.grant_for("bare") == Grant("globex")


def test_records_carry_id_created_expiry_and_name(tmp_path: Path) -> None:
    expires = NOW + timedelta(days=30)
    issued = issue_token(
        tokens_path(tmp_path), "acme", ["user:ann"], expires=expires, name="ci", description="x"
    )
    record = issued.record
    assert TOKEN_ID_RE.fullmatch(record.id) and record.id not in issued.token
    assert (record.tenant, record.principals, record.name) == ("acme", ("user:ann",), "ci")
    assert record.expires == expires and record.created is not None
    entry = json.loads(tokens_path(tmp_path).read_text())["tokens"][hash_token(issued.token)]
    assert entry["expires"] == "2031-01-01T12:00:00Z"
    assert entry["id"] == record.id and entry["description"] == "x"


def test_an_expired_token_is_refused_with_its_reason(tmp_path: Path) -> None:
    clock = [NOW]
    verifier = TokenVerifier(tmp_path, clock=lambda: clock[0])
    issued = issue_token(tokens_path(tmp_path), "acme", expires=NOW + timedelta(hours=1))
    assert verifier.check(issued.token) == Grant("acme")
    clock[0] = NOW + timedelta(minutes=59, seconds=59)
    assert verifier.check(issued.token) == Grant("acme")
    clock[0] = NOW + timedelta(hours=1)
    with pytest.raises(TokenRefused, match=rf"{issued.record.id} expired at 2030-12-02T13:00:00Z"):
        verifier.check(issued.token)
    assert verifier.grant_for(issued.token) is None
    for token in ("nope", "", None):
        with pytest.raises(TokenRefused, match="missing or unknown bearer token"):
            verifier.check(token)


def test_revocation_counts_from_the_next_lookup(tmp_path: Path) -> None:
    path = tokens_path(tmp_path)
    keep, drop = issue_token(path, "acme"), issue_token(path, "acme")
    verifier = TokenVerifier(tmp_path)
    assert verifier.grant_for(drop.token) == Grant("acme")
    assert revoke_token(path, drop.record.id) == drop.record
    assert verifier.grant_for(drop.token) is None
    assert verifier.grant_for(keep.token) == Grant("acme")
    assert [r.id for r in list_tokens(path)] == [keep.record.id]


def test_unknown_id_and_bad_expiry_change_nothing(tmp_path: Path) -> None:
    path = tokens_path(tmp_path)
    issue_token(path, "acme")
    before = path.read_text()
    with pytest.raises(InvalidInput, match="no token with id 'abcdefabcdef'"):
        revoke_token(path, "abcdefabcdef")
    with pytest.raises(InvalidInput, match="not in the future"):
        issue_token(path, "acme", expires=datetime(2020, 1, 1, tzinfo=UTC))
    assert path.read_text() == before
    with pytest.raises(InvalidInput, match="does not exist"):
        revoke_token(tmp_path / "none" / "tokens.json", "abcdefabcdef")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400), ("45s", 45), ("2w", 1209600),
     ("1d12h", 129600), (" 3H ", 10800)],
)  # fmt: skip
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)
    assert expiry(text, None, NOW) == NOW + timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "30", "d", "30x", "-1d", "0s", "1.5h", "30 d", "99999w"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(InvalidInput, match="expires-in"):
        parse_duration(text)


def test_expires_at_needs_an_rfc3339_time_with_an_offset_in_the_future() -> None:
    assert expiry(None, "2031-01-31T00:00:00Z", NOW) == datetime(2031, 1, 31, tzinfo=UTC)
    assert expiry(None, "2031-01-31T02:00:00+02:00", NOW) == datetime(2031, 1, 31, tzinfo=UTC)
    assert expiry(None, None, NOW) is None
    for bad in ["2027-01-31", "2027-01-31T00:00:00", "tomorrow", "2027-13-01T00:00:00Z"]:
        with pytest.raises(InvalidInput, match="RFC 3339"):
            expiry(None, bad, NOW)
    with pytest.raises(InvalidInput, match="not in the future"):
        expiry(None, "2030-12-01T00:00:00Z", NOW)
    with pytest.raises(InvalidInput, match="either"):
        expiry("1d", "2027-01-31T00:00:00Z", NOW)


def test_bad_names_descriptions_and_entries_are_refused(tmp_path: Path) -> None:
    path = tokens_path(tmp_path)
    for bad in ["", "-x", "has space", "a" * 64]:
        with pytest.raises(InvalidInput, match="name"):
            issue_token(path, "acme", name=bad)
    with pytest.raises(InvalidInput, match="description"):
        issue_token(path, "acme", description="line\nbreak")
    assert not path.exists()
    for entry in [{"tenant": "acme", "expires": "soon"}, {"tenant": "acme", "id": "XYZ"}]:
        path.write_text(json.dumps({"tokens": {"d": entry}}))
        with pytest.raises(InvalidInput, match="malformed"):
            TokenVerifier(tmp_path).grant_for("x")


def test_a_kubelet_secret_update_is_seen_on_the_next_lookup(tmp_path: Path) -> None:
    """A Secret volume as the kubelet writes it: `tokens.json -> ..data/tokens.json`, `..data`
    a symlink to a timestamped directory that an update replaces by a rename."""

    def publish(text: str, version: int) -> None:
        target = tmp_path / f"..2026_12_02_12_00_0{version}.000000000"
        target.mkdir()
        (target / "tokens.json").write_text(text)
        (tmp_path / "..data_tmp").symlink_to(target.name)
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")

    first, second = "first-token", "second-token"
    data: dict[str, Any] = {"tokens": {hash_token(first): {"tenant": "acme"}}}
    publish(json.dumps(data), 1)
    (tmp_path / "tokens.json").symlink_to("..data/tokens.json")
    verifier = TokenVerifier(tmp_path)
    assert verifier.grant_for(first) == Grant("acme")
    # The same size and, on a coarse clock, the same mtime: a new inode all the same.
    data = {"tokens": {hash_token(second): {"tenant": "acme"}}}
    publish(json.dumps(data), 2)
    assert verifier.grant_for(first) is None
    assert verifier.grant_for(second) == Grant("acme")


def test_listing_shows_no_secret_and_no_digest(tmp_path: Path) -> None:
    issued = issue_token(tokens_path(tmp_path), "acme", ["group:eng"], name="ci")
    shown = json.dumps([r.to_json() for r in list_tokens(tokens_path(tmp_path))])
    assert issued.token not in shown and hash_token(issued.token) not in shown
    assert hash_token(issued.token)[:8] not in shown
    assert json.loads(shown)[0]["id"] == issued.record.id
