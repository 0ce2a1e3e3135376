"""The operator's read-alias switch against an Elasticsearch with security on (HTTPS with a CA
the test makes, a file-realm user whose role reaches only one index prefix): the login and CA
the operator reads from the same Secrets as the pods."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import httpx
import pytest

from ragindex.generations import lexical_index_name
from ragindex.measure.servers import CertificateAuthority, EsServer, start_elasticsearch
from ragindex.operator import switch_read_alias

pytestmark = [pytest.mark.elasticsearch, pytest.mark.slow]

USER = "ragindex_operator_test"
PREFIX = "promo_"  # the only indexes and aliases the user's role reaches


@pytest.fixture(scope="module")
def secure_es(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EsServer]:
    ca = CertificateAuthority(tmp_path_factory.mktemp("ca"))
    server = start_elasticsearch(tls=ca, scoped_users={USER: PREFIX})
    yield server
    server.stop()


def test_the_alias_moves_over_https_as_the_scoped_user_and_not_without_the_ca(
    secure_es: EsServer,
) -> None:
    assert secure_es.ca_file is not None
    ca_pem = secure_es.ca_file.read_text()
    login = (USER, secure_es.passwords[USER])
    alias = f"{PREFIX}{uuid.uuid4().hex[:8]}"
    old, new = lexical_index_name(alias, "g1"), lexical_index_name(alias, "g2")
    for index in (old, new):
        secure_es.request("PUT", f"/{index}")
    secure_es.request("POST", "/_aliases", {"actions": [{"add": {"index": old, "alias": alias}}]})

    def targets() -> list[str]:
        return sorted(secure_es.request("GET", f"/_alias/{alias}"))

    # A server certificate no trusted CA signed is refused; so is a wrong password.
    with pytest.raises(httpx.ConnectError):
        asyncio.run(switch_read_alias(secure_es.url, alias, new, login))
    with pytest.raises(httpx.HTTPStatusError) as refused:
        asyncio.run(switch_read_alias(secure_es.url, alias, new, (USER, "wrong"), ca_pem=ca_pem))
    assert refused.value.response.status_code == 401
    assert targets() == [old]

    actions = asyncio.run(switch_read_alias(secure_es.url, alias, new, login, ca_pem=ca_pem))
    assert actions == [
        {"remove": {"index": old, "alias": alias}},
        {"add": {"index": new, "alias": alias}},
    ]
    assert targets() == [new]
    # The role reaches only its prefix: another alias is refused, not created.
    other = f"elsewhere_{uuid.uuid4().hex[:8]}"
    with pytest.raises(httpx.HTTPStatusError) as forbidden:
        asyncio.run(switch_read_alias(secure_es.url, other, new, login, ca_pem=ca_pem))
    assert forbidden.value.response.status_code == 403
