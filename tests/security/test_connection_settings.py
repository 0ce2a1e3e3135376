"""Connection settings for Elasticsearch and Kafka, as the environment gives them: what each
client gets, and a clear error naming the variable for settings that cannot work (checked when
the settings are loaded and the client is made, before any server is asked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragindex.config import ElasticsearchConnection, KafkaConnection
from ragindex.errors import InvalidInput
from ragindex.lexical import make_client
from ragindex.log import client_config
from ragindex.measure.servers import CertificateAuthority


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(CertificateAuthority(tmp_path_factory.mktemp("ca")).ca_file)


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"RAGINDEX_KAFKA_SECURITY_PROTOCOL": "TLS"}, "RAGINDEX_KAFKA_SECURITY_PROTOCOL"),
        ({"RAGINDEX_KAFKA_SASL_MECHANISM": "PLAIN"}, "RAGINDEX_KAFKA_SASL_MECHANISM"),
        (
            {"RAGINDEX_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"},
            "SASL_SSL needs username and password",
        ),
        (
            {"RAGINDEX_KAFKA_SECURITY_PROTOCOL": "SSL", "RAGINDEX_KAFKA_USERNAME": "u"},
            "only used by SASL",
        ),
        ({"RAGINDEX_KAFKA_CA_FILE": "/ca.pem"}, "ca_file is only used with TLS"),
        (
            {
                "RAGINDEX_KAFKA_USERNAME": "u",
                "RAGINDEX_KAFKA_PASSWORD": "p",
                "RAGINDEX_KAFKA_PASSWORD_FILE": "/p",
            },
            "password and password_file are exclusive",
        ),
    ],
)
def test_kafka_settings_that_cannot_work_are_refused_naming_them(
    environ: dict[str, str], named: str
) -> None:
    with pytest.raises(InvalidInput, match=named):
        KafkaConnection.from_env(environ)


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"RAGINDEX_ES_USERNAME": "app"}, "needs both username and password"),
        ({"RAGINDEX_ES_PASSWORD_FILE": "/p"}, "needs both username and password"),
        (
            {
                "RAGINDEX_ES_USERNAME": "app",
                "RAGINDEX_ES_PASSWORD": "p",
                "RAGINDEX_ES_API_KEY": "k",
            },
            "or an API key, not both",
        ),
        ({"RAGINDEX_ES_VERIFY_CERTS": "maybe"}, "RAGINDEX_ES_VERIFY_CERTS"),
        (
            {"RAGINDEX_ES_CA_FILE": "/ca.pem", "RAGINDEX_ES_VERIFY_CERTS": "false"},
            "the CA would be unused",
        ),
    ],
)
def test_elasticsearch_settings_that_cannot_work_are_refused_naming_them(
    environ: dict[str, str], named: str
) -> None:
    with pytest.raises(InvalidInput, match=named):
        ElasticsearchConnection.from_env(environ)


def test_every_kafka_client_gets_the_security_settings_and_the_password_from_its_file(
    tmp_path: Path, ca_file: str
) -> None:
    password_file = tmp_path / "password"
    password_file.write_text("s3cret\n")
    connection = KafkaConnection.from_env(
        {
            "RAGINDEX_KAFKA_USERNAME": "ragindex",
            "RAGINDEX_KAFKA_PASSWORD_FILE": str(password_file),
            "RAGINDEX_KAFKA_CA_FILE": ca_file,
            "RAGINDEX_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
        }
    )
    assert client_config("b:9093", connection, {"client.id": "x"}) == {
        "bootstrap.servers": "b:9093",
        "security.protocol": "SASL_SSL",  # the default with a username
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "ragindex",
        "sasl.password": "s3cret",
        "ssl.ca.location": ca_file,
        "client.id": "x",
    }
    assert client_config("b:9092") == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "PLAINTEXT",
    }
    assert "s3cret" not in repr(connection)


def test_missing_or_empty_secret_and_ca_files_are_refused_naming_the_variable(
    tmp_path: Path, ca_file: str
) -> None:
    missing = str(tmp_path / "nowhere")
    kafka = KafkaConnection(username="u", password_file=missing)
    with pytest.raises(InvalidInput, match=rf"RAGINDEX_KAFKA_PASSWORD_FILE.*{missing}: No such"):
        client_config("b:9093", kafka)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(InvalidInput, match=r"RAGINDEX_ES_API_KEY_FILE.*is empty"):
        make_client("https://es:9200", connection=ElasticsearchConnection(api_key_file=str(empty)))
    with pytest.raises(InvalidInput, match=r"RAGINDEX_ES_CA_FILE.*No such file"):
        make_client("https://es:9200", connection=ElasticsearchConnection(ca_file=missing))
    with pytest.raises(InvalidInput, match=r"RAGINDEX_ES_CA_FILE.*holds no PEM certificate"):
        make_client("https://es:9200", connection=ElasticsearchConnection(ca_file=str(empty)))
    with pytest.raises(InvalidInput, match=r"RAGINDEX_ES_CA_FILE.*http://es:9200 is not https"):
        make_client("http://es:9200", connection=ElasticsearchConnection(ca_file=ca_file))
    with pytest.raises(InvalidInput, match=r"RAGINDEX_KAFKA_CA_FILE.*No such file"):
        client_config("b:9093", KafkaConnection(security_protocol="SSL", ca_file=missing))
