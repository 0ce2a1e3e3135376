"""The Kafka log's topic administration calls (AdminClient), apart from its reads and writes.

Each raises `KafkaException` as the client does; `KafkaLog` says which operation failed
(`BackendUnavailable`).
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from ragindex.log.kafka_calls import error_of
from ragindex.topics import MIN_OFFSETS_RETENTION_MINUTES


def partition_count(admin: AdminClient, topic: str, timeout_s: float) -> int | None:
    """The partition count of `topic`, or None if it does not exist."""
    found = admin.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
    if found is None:
        return None
    if found.error is not None:
        if found.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise KafkaException(found.error)
        return None
    return len(found.partitions)


def has_leaders(admin: AdminClient, topic: str, timeout_s: float) -> bool:
    """Whether every partition of `topic` has a leader (a new topic is writable)."""
    try:
        found = admin.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
    except KafkaException:
        return False
    return bool(
        found is not None
        and found.error is None
        and found.partitions
        and all(p.leader >= 0 and p.error is None for p in found.partitions.values())
    )


def topic_config(admin: AdminClient, topic: str, timeout_s: float) -> dict[str, Any]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout_s)
    return {name: entry.value for name, entry in configs.items()}


def set_topic_config(
    admin: AdminClient, topic: str, name: str, value: str, timeout_s: float
) -> None:
    """Set one config of `topic`, leaving the others as they are."""
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(timeout_s)


def broker_config_min(admin: AdminClient, name: str, timeout_s: float) -> int | None:
    """The smallest value of the integer broker config `name` over the cluster's brokers (None
    if no broker reports it)."""
    brokers = admin.list_topics(timeout=timeout_s).brokers
    resources = [ConfigResource(ConfigResource.Type.BROKER, str(b)) for b in sorted(brokers)]
    values = []
    for future in admin.describe_configs(resources).values():
        entry = future.result(timeout_s).get(name)
        if entry is not None and entry.value is not None:
            values.append(int(entry.value))
    return min(values, default=None)


def create_topic(admin: AdminClient, new: NewTopic, timeout_s: float) -> None:
    """Create `new` (one that exists already is fine) and wait until every partition has a
    leader; TimeoutError when they do not within `timeout_s`."""
    try:
        admin.create_topics([new], request_timeout=timeout_s)[new.topic].result()
    except KafkaException as e:
        error = error_of(e)
        if error is None or error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    deadline = time.monotonic() + timeout_s
    while not has_leaders(admin, new.topic, timeout_s):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no leader for every partition of {new.topic}")
        time.sleep(0.05)


def delete_topic(admin: AdminClient, topic: str, timeout_s: float) -> None:
    """Delete `topic` (one already gone is fine) and wait until the metadata no longer lists
    it (deletion spreads through it); TimeoutError when it still does after `timeout_s`."""
    try:
        admin.delete_topics([topic], operation_timeout=timeout_s)[topic].result()
    except KafkaException as e:
        error = error_of(e)
        if error is None or error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise
    deadline = time.monotonic() + timeout_s
    while partition_count(admin, topic, timeout_s) is not None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic} is still listed")
        time.sleep(0.05)


def offsets_retention_warning(admin: AdminClient, timeout_s: float) -> str | None:
    """What to warn about when the brokers keep committed offsets shorter than
    MIN_OFFSETS_RETENTION_MINUTES, else None (also when no broker says). The ingest groups
    commit offsets in transactions and never join, so the broker drops them that long after
    their last commit: an idle spell that long makes the next worker restart re-read `docs`
    from the start."""
    minutes = broker_config_min(admin, "offsets.retention.minutes", timeout_s)
    if minutes is None or minutes >= MIN_OFFSETS_RETENTION_MINUTES:
        return None
    return (
        f"keeps committed offsets only offsets.retention.minutes={minutes}: the ingest groups"
        " commit in transactions and never join, so after that many idle minutes their offsets"
        " expire and the next worker restart will re-read docs from the start; set"
        f" offsets.retention.minutes >= {MIN_OFFSETS_RETENTION_MINUTES} on the brokers (the"
        " operator's managed log sets it)"
    )
