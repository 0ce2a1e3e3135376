"""KafkaLog's client security settings (TLS, SASL SCRAM) as librdkafka config: pure mapping.
(A real SCRAM-SHA-512 broker: test_kafka_log.py,
`test_credentials_reach_a_scram_listener_and_wrong_ones_are_refused`.)"""

from __future__ import annotations

import pytest

from ragindex.errors import InvalidInput
from ragindex.log.kafka_log import client_security


def test_managed_cluster_settings_are_sasl_ssl_with_its_ca() -> None:
    """What the operator gives the Ray pods of a managed (Strimzi) log."""
    assert client_security(
        username="idx-log-ray",
        password="s3cret",
        security_protocol="SASL_SSL",
        ssl_ca_location="/etc/ragindex/kafka-ca/ca.crt",
    ) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "idx-log-ray",
        "sasl.password": "s3cret",
        "ssl.ca.location": "/etc/ragindex/kafka-ca/ca.crt",
    }


def test_defaults() -> None:
    assert client_security() == {}  # plaintext, as on one machine
    assert client_security(username="u", password="p")["security.protocol"] == "SASL_SSL"
    assert client_security(security_protocol="SSL", ssl_ca_location="/ca.pem") == {
        "security.protocol": "SSL",
        "ssl.ca.location": "/ca.pem",
    }
    plain = client_security(username="u", password="p", security_protocol="SASL_PLAINTEXT")
    assert plain["security.protocol"] == "SASL_PLAINTEXT" and "ssl.ca.location" not in plain


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"username": "u"}, "both a Kafka username and a password"),
        ({"security_protocol": "SASL_SSL"}, "needs a username"),
        ({"username": "u", "password": "p", "security_protocol": "SSL"}, "need a SASL protocol"),
        ({"security_protocol": "TLS"}, "not one of"),
        ({"ssl_ca_location": "/ca.pem"}, "needs SSL or SASL_SSL"),
        ({"username": "u", "password": "p", "sasl_mechanism": "GSSAPI"}, "SASL mechanism"),
    ],
)
def test_settings_that_cannot_work_are_refused(settings: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        client_security(**settings)  # type: ignore[arg-type]
