"""The app against servers with security on, both started here with a CA the test makes: an
Elasticsearch with HTTPS and a user whose role reaches only one index prefix, and a Kafka with
a SASL_SSL listener and a SCRAM-SHA-512 user. Settings come from the environment, secrets
from files, as the operator mounts them. The data plane's path (the ingest worker writes the
chunks topic, the views read it into FAISS and Elasticsearch) ingests and searches; a wrong
password is refused with an error that names what failed and writes nothing; a server whose
certificate no trusted CA signed is refused."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragindex.app import elasticsearch_connection
from ragindex.app.serve.data_plane import ensure_topics, open_log
from ragindex.app.serve.query_side import LocalQuerySide
from ragindex.config import ElasticsearchConnection, KafkaConnection, RagIndexSpec
from ragindex.errors import BackendAccessDenied, BackendUnavailable, InvalidInput
from ragindex.ingest import IngestWorker
from ragindex.lexical import ElasticsearchIndex, make_client
from ragindex.log import KafkaLog
from ragindex.measure.servers import (
    CertificateAuthority,
    EsServer,
    KafkaServer,
    start_elasticsearch,
    start_kafka,
)
from ragindex.measure.servers.kafka import SASL_USERNAME
from ragindex.models import SerializedEmbedder
from ragindex.protocols import Embedder
from ragindex.records import doc_key, encode_document
from ragindex.serve_config import KAFKA_BOOTSTRAP_ENV
from ragindex.topics import partition_for_key, plane_topics
from ragindex.types import Document

pytestmark = [pytest.mark.kafka, pytest.mark.elasticsearch, pytest.mark.slow]

APP_USER = "ragindex_app"
PREFIX = "secured_"  # the only indexes the app's role reaches
TENANT = "acme"
WRONG_PASSWORD = "not-the-password-7f3a"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def untrusted_ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("other-ca"), "someone else's CA")


@pytest.fixture(scope="module")
def secure_es(ca: CertificateAuthority) -> Iterator[EsServer]:
    server = start_elasticsearch(tls=ca, scoped_users={APP_USER: PREFIX})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def secure_kafka(ca: CertificateAuthority) -> Iterator[KafkaServer]:
    server = start_kafka(tls=ca)
    yield server
    server.stop()


def _secret_file(directory: Path, name: str, content: str) -> str:
    path = directory / name
    path.write_text(content + "\n")  # as a mounted Secret often ends: the newline is dropped
    path.chmod(0o600)
    return str(path)


def _es_connection(password: str, ca_file: Path | None) -> ElasticsearchConnection:
    return ElasticsearchConnection(
        username=APP_USER, password=password, ca_file=None if ca_file is None else str(ca_file)
    )


def _kafka_connection(password: str, ca_file: Path | None) -> KafkaConnection:
    return KafkaConnection(
        security_protocol="SASL_SSL",
        username=SASL_USERNAME,
        password=password,
        ca_file=None if ca_file is None else str(ca_file),
    )


def _alias() -> str:
    return f"{PREFIX}{uuid.uuid4().hex[:8]}"


def _es_indices(es: EsServer, alias: str) -> list[str]:
    """The indexes of `alias`, as the superuser sees them (the app's user may not look)."""
    found = es.request("GET", f"/_cat/indices/{alias}*?format=json&expand_wildcards=all")
    return [str(index["index"]) for index in found]


def test_the_data_plane_ingests_and_searches_through_tls_and_credentials(
    secure_es: EsServer,
    secure_kafka: KafkaServer,
    minilm: Embedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert secure_es.ca_file is not None and secure_kafka.ca_file is not None
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    env = {
        KAFKA_BOOTSTRAP_ENV: secure_kafka.sasl_ssl_bootstrap,
        "RAGINDEX_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "RAGINDEX_KAFKA_USERNAME": SASL_USERNAME,
        "RAGINDEX_KAFKA_PASSWORD_FILE": _secret_file(
            secrets_dir, "kafka-password", secure_kafka.sasl_password
        ),
        "RAGINDEX_KAFKA_CA_FILE": str(secure_kafka.ca_file),
        "RAGINDEX_ES_USERNAME": APP_USER,
        "RAGINDEX_ES_PASSWORD_FILE": _secret_file(
            secrets_dir, "es-password", secure_es.passwords[APP_USER]
        ),
        "RAGINDEX_ES_CA_FILE": str(secure_es.ca_file),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert secure_es.passwords[APP_USER] not in repr(elasticsearch_connection())
    alias, name = _alias(), f"sec{uuid.uuid4().hex[:6]}"
    spec = RagIndexSpec.model_validate(
        {
            "log": {"docsPartitions": 2},
            "dense": {"shards": 1},
            "lexical": {
                "backend": "elasticsearch",
                "elasticsearchUrl": secure_es.url,
                "elasticsearchAlias": alias,
            },
        }
    )
    topics = plane_topics(spec, name, "default")
    log_ = open_log(tmp_path)  # Kafka, from the environment
    assert isinstance(log_, KafkaLog)
    ensure_topics(log_, topics)
    docs = [
        Document("manual", "boilers", "Boiler maintenance", "Descale the boiler every spring."),
        Document("manual", "turbines", "Turbine blades", "Inspect turbine blades for cracks."),
        Document("manual", "pumps", "Pump seals", "Replace worn pump seals before winter."),
    ]
    keys = [doc_key(TENANT, d.source, d.doc_id) for d in docs]
    log_.append(
        topics.docs,
        [(partition_for_key(k, 2), k, encode_document(d)) for k, d in zip(keys, docs, strict=True)],
    )
    worker = IngestWorker(log_, topics, SerializedEmbedder(minilm), spec.chunking, range(2))
    while worker.poll(64):
        pass
    side = LocalQuerySide(spec, tmp_path, name, "default", tmp_path / "side")
    side.embedder = SerializedEmbedder(minilm)
    assert side.try_open()
    side.refresh()
    for mode in ("lexical", "hybrid"):
        hits = side.search(TENANT, "turbine blades cracks", 3, mode, False).hits
        assert hits and hits[0].chunk.doc_id == "turbines", (mode, hits)
        assert "lexical" in hits[0].ranks, hits[0].ranks  # Elasticsearch answered
    assert _es_indices(secure_es, alias)  # the app's user made its generation's index
    log_.close()


def test_a_wrong_password_is_refused_naming_what_failed_and_writes_nothing(
    secure_es: EsServer, secure_kafka: KafkaServer
) -> None:
    alias = _alias()
    wrong_es = make_client(secure_es.url, 5.0, _es_connection(WRONG_PASSWORD, secure_es.ca_file))
    with pytest.raises(
        BackendAccessDenied, match=r"wrong credentials.*unable to authenticate"
    ) as es_err:
        ElasticsearchIndex.open(wrong_es, alias, timeout_s=5.0)
    assert WRONG_PASSWORD not in str(es_err.value)
    assert _es_indices(secure_es, alias) == []
    # A right password for a user whose role does not reach the index: refused as well.
    other = make_client(
        secure_es.url,
        5.0,
        _es_connection(secure_es.passwords[APP_USER], secure_es.ca_file),
    )
    outside = f"elsewhere_{uuid.uuid4().hex[:8]}"
    with pytest.raises(BackendAccessDenied, match=r"not permitted.*indices:admin/create"):
        ElasticsearchIndex.open(other, outside, timeout_s=5.0)
    assert _es_indices(secure_es, outside) == []

    topic = f"wrong.{uuid.uuid4().hex[:8]}"
    wrong = KafkaLog(
        secure_kafka.sasl_ssl_bootstrap,
        connection=_kafka_connection(WRONG_PASSWORD, secure_kafka.ca_file),
        timeout_s=3.0,
    )
    with pytest.raises(
        BackendAccessDenied, match=r"SASL authentication.*invalid credentials"
    ) as kafka_err:
        wrong.ensure_topic(topic, 1, compacted=True)
    assert WRONG_PASSWORD not in str(kafka_err.value)
    wrong.close()
    right = KafkaLog(
        secure_kafka.sasl_ssl_bootstrap,
        connection=_kafka_connection(secure_kafka.sasl_password, secure_kafka.ca_file),
        timeout_s=5.0,
    )
    with pytest.raises(InvalidInput, match="no topic"):
        right.partitions(topic)
    right.close()


def test_a_server_no_trusted_ca_signed_is_refused(
    secure_es: EsServer, secure_kafka: KafkaServer, untrusted_ca: CertificateAuthority
) -> None:
    password = secure_es.passwords[APP_USER]
    for ca_file in (untrusted_ca.ca_file, None):  # another CA; the system's CAs
        client = make_client(secure_es.url, 5.0, _es_connection(password, ca_file))
        with pytest.raises(
            BackendUnavailable, match=r"TLS handshake failed.*certificate verify failed"
        ):
            ElasticsearchIndex.open(client, _alias(), timeout_s=5.0)
    untrusted = KafkaLog(
        secure_kafka.sasl_ssl_bootstrap,
        connection=_kafka_connection(secure_kafka.sasl_password, untrusted_ca.ca_file),
        timeout_s=3.0,
    )
    with pytest.raises(
        BackendUnavailable, match=r"certificate verify failed.*RAGINDEX_KAFKA_CA_FILE"
    ):
        untrusted.partitions("docs")
    untrusted.close()
