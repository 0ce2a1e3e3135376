"""Checks every `Log` implementation applies before it changes anything (pure)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ragindex.errors import InvalidInput

# Kafka's rule for topic names, kept by the file log too so a name valid on one backend is
# valid on the other (and safe as a directory name).
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

Records = Sequence[tuple[int, bytes, bytes | None]]


def check_topic_name(topic: str) -> None:
    if not isinstance(topic, str) or not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise InvalidInput(
            f"invalid topic name {topic!r}: use 1-249 characters of [A-Za-z0-9._-], not '.' or '..'"
        )


def check_records(topic: str, records: Records, partitions: int) -> None:
    """Every record is (partition in range, key bytes, value bytes or None for a tombstone)."""
    for i, record in enumerate(records):
        if not isinstance(record, tuple) or len(record) != 3:
            raise InvalidInput(f"record {i} must be a (partition, key, value) tuple")
        partition, key, value = record
        if not isinstance(partition, int) or not 0 <= partition < partitions:
            raise InvalidInput(
                f"record {i}: partition {partition!r} out of range for {topic} ({partitions})"
            )
        if not isinstance(key, bytes) or not key:
            raise InvalidInput(f"record {i}: the key must be non-empty bytes")
        if value is not None and not isinstance(value, bytes):
            raise InvalidInput(f"record {i}: the value must be bytes, or None for a tombstone")


def check_consumed(group: str, consumed: Mapping[tuple[str, int], int]) -> None:
    if not isinstance(group, str) or not group:
        raise InvalidInput("the consumer group must be a non-empty string")
    if not consumed:
        raise InvalidInput("append_and_commit needs consumed offsets to commit; use append")
    for (topic, partition), offset in consumed.items():
        check_topic_name(topic)
        if not isinstance(partition, int) or partition < 0:
            raise InvalidInput(f"consumed partition {partition!r} of {topic} must be an int >= 0")
        if not isinstance(offset, int) or offset < 0:
            raise InvalidInput(f"consumed offset {offset!r} of {topic}/{partition} must be >= 0")
