"""ragindex.log: the `Log` implementations (the file log on one machine, Kafka in the cluster).

Both pass one contract suite (`ragindex.testing.log`); the throwaway local broker of the tests
and benchmarks is `ragindex.measure.servers.kafka`.
"""

from ragindex.log.file_log import FileLog, LogLocked
from ragindex.log.kafka_log import KafkaLog

__all__ = ["FileLog", "KafkaLog", "LogLocked"]
