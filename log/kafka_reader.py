"""A Kafka log's reader of one partition: an assigned read_committed consumer, where it is, and
what it knows of the partition's end (see `KafkaLog` on why the end is not only the EOF event)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ragindex.errors import OffsetOutOfRange
from ragindex.log.kafka_calls import OUT_OF_RANGE_ERRORS
from ragindex.types import LogRecord


@dataclass
class PartitionReader:
    consumer: Consumer
    lock: threading.Lock
    next_offset: int = -1
    at_end: bool = False
    answered: bool = False  # a fetch at this position answered: its cached end offset counts

    def fetched_to_end(self, topic: str, partition: int) -> bool:
        """Whether the records before the end offset the consumer's last fetch at this position
        brought were all delivered: at most the last transaction's commit marker is left."""
        if not self.answered:
            return False
        _, end = self.consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
        return end >= 0 and self.next_offset >= end - 1

    def fetch(
        self, topic: str, partition: int, max_records: int, wait_s: float, timeout_s: float
    ) -> list[LogRecord]:
        """Records until `max_records` or the partition's end; at the end with none yet, wait
        up to `wait_s` for one. Getting to the end is bounded by `timeout_s` (`TimeoutError`);
        a fatal client error raises its `KafkaException`.

        The end is known from the consumer's partition-EOF event, emitted once each time it
        catches up; `at_end` remembers it across calls until a new record arrives, so a reader
        polling at the end is answered at once (from what the background fetcher brought)."""
        start = time.monotonic()
        out: list[LogRecord] = []
        polled = False
        while len(out) < max_records:
            now = time.monotonic()
            if self.at_end or self.fetched_to_end(topic, partition):
                wait = start + wait_s - now
                if out or (polled and wait <= 0):
                    break
            else:
                wait = start + timeout_s - now
                if wait <= 0:
                    self.next_offset = -1  # unknown position: re-assign next time
                    raise TimeoutError(f"no end of {topic}/{partition} within {timeout_s:.0f}s")
            msg = self.consumer.poll(max(0.0, min(wait, 0.5)))
            polled = True
            if msg is None:
                continue
            room = max_records - len(out) - 1
            for m in [msg, *(self.consumer.consume(room, 0) if room > 0 else [])]:
                error, offset = m.error(), m.offset()
                if error is None and offset is not None:
                    out.append(LogRecord(partition, offset, m.key() or b"", m.value()))
                    self.next_offset, self.at_end, self.answered = offset + 1, False, True
                elif error is None:
                    continue
                elif error.code() == KafkaError._PARTITION_EOF:
                    self.at_end = self.answered = True
                elif error.code() in OUT_OF_RANGE_ERRORS:
                    self.next_offset = -1
                    raise OffsetOutOfRange(
                        f"{topic}/{partition}: offset out of range: {error.str()}; "
                        "restart from a snapshot or the start"
                    )
                elif error.fatal():
                    raise KafkaException(error)
        return out
