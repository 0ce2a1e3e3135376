"""ragindex.log: the `Log` implementations (the file log on one machine, Kafka in the cluster).

Both pass one contract-test suite (tests/log/contract.py). `kafka_server` (a throwaway local
broker for tests and benchmarks) is imported from its module, not from here.
"""

from ragindex.log.file_log import FileLog, LogLocked
from ragindex.log.kafka_log import KafkaLog

__all__ = ["FileLog", "KafkaLog", "LogLocked"]
