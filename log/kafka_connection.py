"""The one place a Kafka client's settings are made: every producer, consumer and admin client
of the app starts from `client_config`, so TLS and SASL apply to all of them alike.

librdkafka verifies the broker's certificate and host name by default on SSL and SASL_SSL
(`enable.ssl.certificate.verification`, `ssl.endpoint.identification.algorithm=https`): only
the CA is ours to give. The password is read here (from the setting or its file) and goes
nowhere but into the client's configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError

from ragindex.config import KafkaConnection
from ragindex.errors import InvalidInput
from ragindex.netutil.credentials import checked_ca_file, secret

# librdkafka's client-level error codes for a refused login and a failed TLS handshake.
AUTHENTICATION_ERRORS = frozenset(
    {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}
)
TLS_ERRORS = frozenset({KafkaError._SSL})


def client_config(
    bootstrap_servers: str,
    connection: KafkaConnection | None = None,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """librdkafka settings for one client of `bootstrap_servers`: the security settings of
    `connection` (plain text without one), then the client's own `settings`."""
    if not bootstrap_servers:
        raise InvalidInput("Kafka needs bootstrap servers (host:port[,host:port...])")
    conn = connection or KafkaConnection()
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "security.protocol": conn.protocol,
    }
    if conn.protocol.startswith("SASL_"):
        config |= {
            "sasl.mechanism": conn.sasl_mechanism,
            "sasl.username": conn.username,
            "sasl.password": secret(conn, "password"),
        }
    ca_file = checked_ca_file(conn)
    if ca_file is not None:
        config["ssl.ca.location"] = ca_file
    return config | dict(settings or {})
