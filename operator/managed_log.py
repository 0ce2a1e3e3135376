"""The managed log: a Strimzi Kafka cluster (KRaft, node pools) and the index's topics."""

from __future__ import annotations

from typing import Any

from ragindex.config import RagIndexSpec
from ragindex.generations import ingest_group
from ragindex.operator.objects import (
    KAFKA,
    KAFKA_LISTENER,
    KAFKA_NODE_POOL,
    KAFKA_TLS_PORT,
    KAFKA_TOPIC,
    KAFKA_USER,
    STRIMZI_CLUSTER_LABEL,
    RenderOptions,
    kafka_name,
    kafka_node_pool_name,
    kafka_user_name,
    object_metadata,
    ray_pod_labels,
)
from ragindex.topics import (
    MAX_MESSAGE_BYTES,
    OFFSETS_RETENTION_MINUTES,
    PREFIX,
    chunks_topic,
    docs_topic,
    snapshots_topic,
)


def index_topic_prefix(namespace: str, name: str) -> str:
    """What every topic of the index starts with (ragindex.topics names them all so)."""
    return f"{PREFIX}.{namespace}.{name}."


def kafka_acls(namespace: str, name: str) -> list[dict[str, Any]]:
    """What the index's KafkaUser may do on its cluster (`authorization: simple`): everything
    on the index's topics (produce, consume, create, configure, truncate), its consumer groups
    (`ingest.<generation>`, and the app's readers under `ragindex.`) and its transactional ids
    (`ragindex.<group>...`: ingest commits in transactions), plus the cluster operations of an
    idempotent producer and of reading the brokers' offsets retention."""

    def allow(kind: str, resource: str, pattern: str, *operations: str) -> dict[str, Any]:
        return {
            "type": "allow",
            "resource": {"type": kind, "name": resource, "patternType": pattern},
            "operations": list(operations),
        }

    return [
        allow("topic", index_topic_prefix(namespace, name), "prefix", "All"),
        allow("group", ingest_group(""), "prefix", "All"),
        allow("group", f"{PREFIX}.", "prefix", "All"),
        allow("transactionalId", f"{PREFIX}.", "prefix", "All"),
        {
            "type": "allow",
            "resource": {"type": "cluster"},
            "operations": ["IdempotentWrite", "Describe", "DescribeConfigs"],
        },
    ]


def render_kafka_user(
    name: str, namespace: str, generation: str, uid: str | None = None
) -> dict[str, Any]:
    """The Ray pods' SCRAM-SHA-512 user; Strimzi's User Operator writes its password to the
    Secret of the same name (key `password`)."""
    return {
        "apiVersion": KAFKA_USER[0],
        "kind": KAFKA_USER[1],
        "metadata": object_metadata(
            kafka_user_name(name),
            namespace,
            name,
            generation,
            uid,
            {STRIMZI_CLUSTER_LABEL: kafka_name(name)},
        ),
        "spec": {
            "authentication": {"type": "scram-sha-512"},
            "authorization": {"type": "simple", "acls": kafka_acls(namespace, name)},
        },
    }


def render_managed_log(
    name: str,
    namespace: str,
    spec: RagIndexSpec,
    generation: str,
    options: RenderOptions,
    uid: str | None = None,
) -> list[dict[str, Any]]:
    """A Strimzi (KRaft, node pools) Kafka cluster, the index's topics and its user, all owned
    by it.

    Every node is broker and controller. The one listener is TLS (Strimzi's cluster CA) with
    SCRAM-SHA-512 users and `simple` authorization, and admits only this index's Ray pods
    (Strimzi renders the NetworkPolicy from `networkPolicyPeers`). Topics are compacted: the
    log is the corpus, so nothing expires by age; deletes are tombstones kept for
    `tombstoneRetentionHours`.
    """
    log = spec.log
    cluster = kafka_name(name)
    strimzi = {STRIMZI_CLUSTER_LABEL: cluster}
    storage: dict[str, Any] = {"type": "persistent-claim", "size": log.broker_storage_size}
    storage_class = log.broker_storage_class or options.storage_class
    if storage_class:
        storage["class"] = storage_class
    replication = {
        "default.replication.factor": log.replication_factor,
        "min.insync.replicas": log.min_insync_replicas,
        "offsets.topic.replication.factor": log.replication_factor,
        "transaction.state.log.replication.factor": log.replication_factor,
        "transaction.state.log.min.isr": log.min_insync_replicas,
    }
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": KAFKA[0],
            "kind": KAFKA[1],
            "metadata": object_metadata(cluster, namespace, name, generation, uid),
            "spec": {
                "kafka": {
                    "listeners": [
                        {
                            "name": KAFKA_LISTENER,
                            "port": KAFKA_TLS_PORT,
                            "type": "internal",
                            "tls": True,
                            "authentication": {"type": "scram-sha-512"},
                            "networkPolicyPeers": [
                                {"podSelector": {"matchLabels": ray_pod_labels(name)}}
                            ],
                        }
                    ],
                    # The KafkaUser's ACLs are enforced; Strimzi's own operators are superusers.
                    "authorization": {"type": "simple"},
                    "config": {
                        **replication,
                        "auto.create.topics.enable": False,
                        # The ingest groups commit in transactions and never join: Kafka keeps
                        # their offsets this long after the last commit (default 7 days, after
                        # which a restart would re-read all of docs).
                        "offsets.retention.minutes": OFFSETS_RETENTION_MINUTES,
                    },
                },
                # The Topic Operator turns the KafkaTopics below into topics, the User
                # Operator the KafkaUser into a SCRAM user, its ACLs and its password Secret.
                "entityOperator": {"topicOperator": {}, "userOperator": {}},
            },
        },
        {
            "apiVersion": KAFKA_NODE_POOL[0],
            "kind": KAFKA_NODE_POOL[1],
            "metadata": object_metadata(
                kafka_node_pool_name(name), namespace, name, generation, uid, strimzi
            ),
            "spec": {
                "replicas": log.brokers,
                "roles": ["controller", "broker"],
                "storage": storage,
            },
        },
        render_kafka_user(name, namespace, generation, uid),
    ]
    compacted = {
        "cleanup.policy": "compact",
        "min.insync.replicas": log.min_insync_replicas,
        "delete.retention.ms": log.tombstone_retention_hours * 3_600_000,
        "max.message.bytes": MAX_MESSAGE_BYTES,  # the documents the API takes
    }
    # Snapshots are not keyed: each publisher deletes the records behind its newest snapshot,
    # so the topic keeps everything until then (what KafkaLog.ensure_topic creates too).
    kept_until_truncated = {
        "cleanup.policy": "delete",
        "retention.ms": -1,
        "max.message.bytes": MAX_MESSAGE_BYTES,
        "min.insync.replicas": log.min_insync_replicas,
    }
    topics = [
        (f"{name}-docs", docs_topic(namespace, name), log.docs_partitions, compacted),
        (
            f"{name}-chunks-{generation}",
            chunks_topic(namespace, name, generation),
            spec.dense.shards,
            compacted,
        ),
        (
            f"{name}-snapshots-{generation}",
            snapshots_topic(namespace, name, generation),
            spec.dense.shards,
            kept_until_truncated,
        ),
    ]
    for object_name, topic, partitions, config in topics:
        objects.append(
            {
                "apiVersion": KAFKA_TOPIC[0],
                "kind": KAFKA_TOPIC[1],
                "metadata": object_metadata(object_name, namespace, name, generation, uid, strimzi),
                "spec": {
                    "topicName": topic,
                    "partitions": partitions,
                    "replicas": log.replication_factor,
                    "config": config,
                },
            }
        )
    return objects
