"""The Kafka log's topic administration calls (AdminClient), apart from its reads and writes.

Each raises `KafkaException` as the client does; `KafkaLog` says which operation failed
(`BackendUnavailable`).
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource


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
