"""A client's secrets and CA, read from the files its connection settings name (the operator
mounts Secrets as files): read when a client is made, so a rotated Secret reaches the next one."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from ragindex.config import ElasticsearchConnection, KafkaConnection
from ragindex.errors import InvalidInput

Connection = ElasticsearchConnection | KafkaConnection


def secret(conn: Connection, field: str) -> str | None:
    """The secret `field` of `conn`, from itself or from the file `<field>_file` names;
    InvalidInput naming the setting when the file cannot be read or is empty."""
    value = getattr(conn, field)
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    path = getattr(conn, f"{field}_file")
    if path is None:
        return None
    named = conn.named(f"{field}_file")
    try:
        content = Path(path).read_text().strip()
    except OSError as err:
        raise InvalidInput(f"{named} {path}: {err.strerror or err}") from err
    if not content:
        raise InvalidInput(f"{named} {path} is empty")
    return content


def checked_ca_file(conn: Connection) -> str | None:
    """`conn.ca_file` once it is known to be a readable PEM file, else InvalidInput naming it."""
    path = getattr(conn, "ca_file", None)
    if path is None:
        return None
    try:
        head = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidInput(f"{conn.named('ca_file')} {path}: {err}") from err
    if "-----BEGIN CERTIFICATE-----" not in head:
        raise InvalidInput(f"{conn.named('ca_file')} {path} holds no PEM certificate")
    return str(path)
