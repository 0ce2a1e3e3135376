"""Tenant tokens: hashed at rest, atomic writes, re-read on change, tenant only from token."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragindex.errors import InvalidInput
from ragindex.router.auth import (
    Grant,
    TokenVerifier,
    bearer_token,
    create_token,
    hash_token,
    tokens_path,
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
