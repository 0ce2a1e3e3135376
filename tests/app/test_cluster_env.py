"""What the operator injects into cluster pods is what the app reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragindex.app import auth_dir, elasticsearch_connection
from ragindex.errors import InvalidInput
from ragindex.netutil.credentials import secret
from ragindex.router import TokenVerifier, create_token
from ragindex.serve_config import AUTH_DIR_ENV


def test_tokens_come_from_the_mounted_secret_dir_when_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir, secret_dir = tmp_path / "data", tmp_path / "secret"
    data_dir.mkdir()
    secret_dir.mkdir()
    token = create_token(secret_dir, "acme")
    monkeypatch.delenv(AUTH_DIR_ENV, raising=False)
    assert auth_dir(data_dir) == data_dir
    assert TokenVerifier(auth_dir(data_dir)).tenant_for(token) is None
    monkeypatch.setenv(AUTH_DIR_ENV, str(secret_dir))
    assert TokenVerifier(auth_dir(data_dir)).tenant_for(token) == "acme"


def test_elasticsearch_credentials_need_both_user_and_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RAGINDEX_ES_PASSWORD", raising=False)
    monkeypatch.setenv("RAGINDEX_ES_USERNAME", "elastic")
    with pytest.raises(InvalidInput, match=r"RAGINDEX_ES_.*needs both username and password"):
        elasticsearch_connection()
    monkeypatch.setenv("RAGINDEX_ES_PASSWORD", "s3cret")
    connection = elasticsearch_connection()
    assert (connection.username, secret(connection, "password")) == ("elastic", "s3cret")
    assert "s3cret" not in repr(connection)
