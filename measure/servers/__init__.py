"""ragindex.measure.servers: throwaway Elasticsearch and Kafka servers on loopback for tests and
benchmarks.

- `EsServer`, `start_elasticsearch`, `running_elasticsearch`;
- `KafkaServer`, `start_kafka`, `running_kafka`;
- `CertificateAuthority`: a throwaway CA whose certificates the servers' TLS (`tls=`) uses.
"""

from typing import TYPE_CHECKING

from ragindex.faces import lazy_face

if TYPE_CHECKING:
    from ragindex.measure.servers.certs import CertificateAuthority
    from ragindex.measure.servers.elasticsearch import (
        EsServer,
        running_elasticsearch,
        start_elasticsearch,
    )
    from ragindex.measure.servers.kafka import KafkaServer, running_kafka, start_kafka

__all__ = [
    "CertificateAuthority",
    "EsServer",
    "KafkaServer",
    "running_elasticsearch",
    "running_kafka",
    "start_elasticsearch",
    "start_kafka",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_face(
        __name__,
        {
            "certs": ["CertificateAuthority"],
            "elasticsearch": ["EsServer", "running_elasticsearch", "start_elasticsearch"],
            "kafka": ["KafkaServer", "running_kafka", "start_kafka"],
        },
    )
