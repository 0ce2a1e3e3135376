"""ragindex.log: the `Log` implementations (the file log on one machine, Kafka in the cluster).

- `FileLog` (`LogLocked` when another process writes it), `KafkaLog`;
- `client_config`: the settings every Kafka client starts from (TLS, SASL).

Both pass one contract suite (`ragindex.testing.log`); the throwaway local broker of the tests
and benchmarks is `ragindex.measure.servers.kafka`.
"""

from typing import TYPE_CHECKING

from ragindex.faces import lazy_face

if TYPE_CHECKING:
    from ragindex.log.file_log import FileLog, LogLocked
    from ragindex.log.kafka_connection import client_config
    from ragindex.log.kafka_log import KafkaLog

__all__ = [
    "FileLog",
    "KafkaLog",
    "LogLocked",
    "client_config",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_face(
        __name__,
        {
            "file_log": ["FileLog", "LogLocked"],
            "kafka_connection": ["client_config"],
            "kafka_log": ["KafkaLog"],
        },
    )
