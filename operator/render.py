"""Desired Kubernetes objects of one RagIndex: a pure function of the spec and its generation.

The operator never decides what to create inside an API call (DESIGN.md §3): `render` returns
the full desired set, `apply.py` makes the cluster match it, and `objects_to_prune` says what
to delete. Everything here is a function of data, so the layout is tested without a cluster.

Index generation (`ragindex.generations.index_generation`): a short hash of the fields that
need a rebuild (embedder identity, dense layout, chunking). Vectors of two models never mix
(DESIGN.md invariant 2), so a new generation means a new RayService (and its own
`chunks` and `snapshots` topics) beside the old ones; the stable Service keeps pointing at the
active generation until the new one reports ready, which is the alias swap
at the network level.

Storage: no shared volume. The log (Kafka: a managed Strimzi cluster or external brokers) is the
source of truth and every Ray pod keeps its views on node-local scratch (DESIGN.md §2, §5).
Security: Ray token authentication (KubeRay `authOptions`), a NetworkPolicy per generation, Ray
pods non-root without capabilities or a service-account token, Secrets mounted only when the
spec names them (the operator checks their label before applying; see ownership.py).
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.generations import index_generation
from ragindex.operator.crd import GROUP, KIND, VERSION
from ragindex.serve_config import (
    AUTH_DIR_ENV,
    ES_PASSWORD_ENV,
    ES_USERNAME_ENV,
    GENERATOR_API_KEY_ENV,
    KAFKA_BOOTSTRAP_ENV,
    KAFKA_PASSWORD_ENV,
    KAFKA_USERNAME_ENV,
    deployment_layout,
    render_serve_config,
    to_yaml,
)
from ragindex.topics import MAX_MESSAGE_BYTES, chunks_topic, docs_topic, snapshots_topic

FIELD_MANAGER = "ragindex-operator"
LABEL_INDEX = f"{GROUP}/index"
LABEL_GENERATION = f"{GROUP}/generation"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
SERVE_PORT = 8000
BUILD_REPORT_PATH = "/v1/generation"
DASHBOARD_PORT = 8265
KAFKA_PORT = 9092
AUTH_MOUNT = "/etc/ragindex/auth"
# Ray images (rayproject/ray and ours on top of it) run as the `ray` user.
RAY_UID = 1000
# KubeRay labels every Ray pod with this; it keeps our selectors off ECK and Strimzi pods.
RAY_NODE_LABEL = "ray.io/is-ray-node"
STRIMZI_CLUSTER_LABEL = "strimzi.io/cluster"
KUBERAY_OPERATOR_LABELS = {"app.kubernetes.io/name": "kuberay-operator"}
# KubeRay derives RayCluster and Service names from the RayService name and refuses long ones;
# with "-<generation>" appended the RayService name stays within 47 characters.
MAX_NAME_LENGTH = 38
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")

# Kinds the operator owns, as (apiVersion, kind). Generation-scoped kinds are kept for the
# active generation while a new one starts; the others exist once per index.
CONFIG_MAP = ("v1", "ConfigMap")
SERVICE = ("v1", "Service")
PVC = ("v1", "PersistentVolumeClaim")
NETWORK_POLICY = ("networking.k8s.io/v1", "NetworkPolicy")
RAY_SERVICE = ("ray.io/v1", "RayService")
ELASTICSEARCH = ("elasticsearch.k8s.elastic.co/v1", "Elasticsearch")
KAFKA = ("kafka.strimzi.io/v1", "Kafka")
KAFKA_NODE_POOL = ("kafka.strimzi.io/v1", "KafkaNodePool")
KAFKA_TOPIC = ("kafka.strimzi.io/v1", "KafkaTopic")
# PVC is no longer rendered: it stays listed, and not generation-scoped, so that an upgrade
# prunes the shared claim an older operator created (DESIGN.md §5 has no shared volume).
MANAGED_KINDS = (
    CONFIG_MAP,
    SERVICE,
    PVC,
    NETWORK_POLICY,
    RAY_SERVICE,
    ELASTICSEARCH,
    KAFKA,
    KAFKA_NODE_POOL,
    KAFKA_TOPIC,
)
GENERATION_SCOPED = frozenset({NETWORK_POLICY, RAY_SERVICE, KAFKA_TOPIC})


@dataclass(frozen=True)
class RenderOptions:
    """Operator-wide settings that are not part of a RagIndex spec (image, pod sizes)."""

    image: str = "ragindex/ragindex:0.1.0"
    ray_version: str = "2.60.0"
    elasticsearch_version: str = "9.3.0"
    head_cpus: int = 2
    head_memory: str = "4Gi"
    cpu_worker_cpus: int = 4
    cpu_worker_memory: str = "8Gi"
    gpu_worker_cpus: int = 4
    gpu_worker_memory: str = "16Gi"
    # Storage class of the managed Kafka nodes' claims (ReadWriteOnce); None: the default.
    storage_class: str | None = None
    # Namespace of the KubeRay operator, the one caller admitted to the dashboard port besides
    # the cluster's own pods; None admits a KubeRay operator pod from any namespace.
    kuberay_namespace: str | None = None
    # The CPU request of every Ray pod, when not its CPU count (which stays the limit, so Ray
    # still sees that many CPUs): overcommits small dev/test nodes that cannot fit the counts.
    ray_cpu_request: str | None = None


@dataclass(frozen=True)
class ObjectRef:
    """Identity of a live or desired object, enough to decide pruning."""

    api_version: str
    kind: str
    name: str
    generation: str | None = None

    @property
    def kind_key(self) -> tuple[str, str]:
        return (self.api_version, self.kind)


def validate_name(name: str) -> str:
    """A RagIndex name that every derived object name and label can carry, or InvalidInput."""
    if len(name) > MAX_NAME_LENGTH or not _DNS_LABEL.match(name):
        raise InvalidInput(
            f"RagIndex name {name!r} is not usable: use at most {MAX_NAME_LENGTH} characters of"
            " a-z, 0-9 and '-', starting with a letter (it prefixes the RayService and Service"
            " names)"
        )
    return name


def ray_service_name(name: str, generation: str) -> str:
    return f"{name}-{generation}"


def build_report_url(name: str, namespace: str, generation: str) -> str:
    """A generation's build report, at the Serve Service KubeRay makes for its RayService
    (reachable from the operator: the NetworkPolicy admits anyone to the Serve port)."""
    return (
        f"http://{ray_service_name(name, generation)}-serve-svc.{namespace}.svc:{SERVE_PORT}"
        f"{BUILD_REPORT_PATH}"
    )


def network_policy_name(name: str, generation: str) -> str:
    return f"{ray_service_name(name, generation)}-ray"


def kafka_name(name: str) -> str:
    return f"{name}-log"


def kafka_node_pool_name(name: str) -> str:
    return f"{kafka_name(name)}-pool"


def kafka_bootstrap(name: str, namespace: str) -> str:
    """Strimzi's bootstrap Service of the managed cluster, plain listener."""
    return f"{kafka_name(name)}-kafka-bootstrap.{namespace}.svc:{KAFKA_PORT}"


def ray_pod_labels(name: str, generation: str | None = None) -> dict[str, str]:
    """Selects Ray pods of the index (of one generation when given), never ECK/Strimzi pods."""
    selector = {LABEL_INDEX: name, RAY_NODE_LABEL: "yes"}
    if generation is not None:
        selector[LABEL_GENERATION] = generation
    return selector


def named_secrets(spec: RagIndexSpec) -> list[str]:
    """Every Secret the spec asks the operator to mount or inject (each must carry the label)."""
    names = [spec.auth_secret, spec.log.credentials_secret, spec.generator.api_key_secret]
    return [n for n in names if n]


def check_cluster_spec(spec: RagIndexSpec) -> None:
    """What the cluster runtime needs beyond the model's own rules, or InvalidInput."""
    if spec.log.mode == "embedded":
        raise InvalidInput(
            "log.mode 'embedded' is a file log on one machine: the cluster runtime needs"
            " log.mode 'managed' (a Strimzi Kafka cluster) or 'external' (bootstrapServers)"
        )
    if not spec.auth_secret:
        raise InvalidInput(
            "authSecret is required in the cluster runtime: API tokens live in a Secret (key"
            " tokens.json, label ragindex.dev/secret-for=<RagIndex name>), never in a"
            " generation's scratch storage"
        )


def elasticsearch_name(name: str) -> str:
    return f"{name}-es"


def config_map_name(name: str) -> str:
    return f"{name}-config"


def cluster_endpoint(name: str, namespace: str) -> str:
    """The stable in-cluster URL of the search API (the Service follows the active generation)."""
    return f"http://{name}.{namespace}.svc:{SERVE_PORT}/"


def labels(name: str, generation: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "ragindex",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "index",
        "app.kubernetes.io/part-of": "ragindex",
        LABEL_MANAGED_BY: FIELD_MANAGER,
        LABEL_INDEX: name,
        LABEL_GENERATION: generation,
    }


def owner_reference(name: str, uid: str) -> dict[str, Any]:
    """The RagIndex as controller owner: the garbage collector deletes children with it."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def check_quantity(quantity: str) -> str:
    """An integer Kubernetes quantity such as `10Gi`, or InvalidInput."""
    if not _QUANTITY.match(quantity):
        raise InvalidInput(
            f"storageSize {quantity!r} is not an integer Kubernetes quantity such as '10Gi'"
        )
    return quantity


def _metadata(
    name: str,
    namespace: str,
    index: str,
    generation: str,
    uid: str | None,
    extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": labels(index, generation) | (extra_labels or {}),
    }
    if uid is not None:
        meta["ownerReferences"] = [owner_reference(index, uid)]
    return meta


def managed_elasticsearch(spec: RagIndexSpec) -> bool:
    return spec.lexical.backend == "elasticsearch" and not spec.lexical.elasticsearch_url


def elasticsearch_url(spec: RagIndexSpec, name: str, namespace: str) -> str | None:
    """Where the BM25 leg's Elasticsearch answers: ECK's HTTP Service when managed, the spec's
    URL when external, None for the embedded backend."""
    if spec.lexical.backend != "elasticsearch":
        return None
    if managed_elasticsearch(spec):
        return f"http://{elasticsearch_name(name)}-es-http.{namespace}.svc:9200"
    return spec.lexical.elasticsearch_url


def elasticsearch_password_secret(name: str) -> str:
    """The Secret where ECK writes the `elastic` user's password (key `elastic`)."""
    return f"{elasticsearch_name(name)}-es-elastic-user"


def _serving_spec(spec: RagIndexSpec, name: str, namespace: str) -> RagIndexSpec:
    """The spec the Serve app gets: a managed Elasticsearch is reached at ECK's HTTP Service;
    a generator key from a Secret arrives in the one variable the operator injects."""
    update: dict[str, Any] = {}
    if managed_elasticsearch(spec):
        url = elasticsearch_url(spec, name, namespace)
        update["lexical"] = spec.lexical.model_copy(update={"elasticsearch_url": url})
    if spec.generator.api_key_secret:
        update["generator"] = spec.generator.model_copy(
            update={"api_key_env": GENERATOR_API_KEY_ENV, "api_key_secret": None}
        )
    return spec.model_copy(update=update) if update else spec


def _demand(deployments: Iterable[dict[str, Any]], resource: str) -> tuple[float, float]:
    """(min, max) of a Ray resource that the deployments ask for, over their replica range."""
    low = high = 0.0
    for d in deployments:
        per = float(d["ray_actor_options"][resource])
        scaling = d.get("autoscaling_config")
        lo, hi = (
            (scaling["min_replicas"], scaling["max_replicas"])
            if scaling
            else (d["num_replicas"], d["num_replicas"])
        )
        low += per * lo
        high += per * hi
    return low, high


def _pods(demand: float, per_pod: float) -> int:
    return math.ceil(demand / per_pod - 1e-9) if demand > 0 else 0


def _container(
    name: str,
    options: RenderOptions,
    cpus: int,
    memory: str,
    env: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
    scratch: str,
    gpus: int = 0,
) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": str(cpus), "memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    requests = {
        "cpu": options.ray_cpu_request or str(cpus),
        "memory": memory,
        "ephemeral-storage": scratch,
    }
    return {
        "name": name,
        "image": options.image,
        "resources": {"requests": requests, "limits": limits},
        "env": env,
        "volumeMounts": mounts,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
        },
    }


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _pod_env(spec: RagIndexSpec, name: str, namespace: str) -> list[dict[str, Any]]:
    """Environment of every Ray container; credentials only by reference to a Secret."""
    env: list[dict[str, Any]] = [
        {"name": "RAY_USAGE_STATS_ENABLED", "value": "0"},
        {"name": "OMP_NUM_THREADS", "value": "1"},
    ]
    if managed_elasticsearch(spec):
        # ECK writes the `elastic` user's password into this Secret.
        env += [
            {"name": ES_USERNAME_ENV, "value": "elastic"},
            _secret_env(ES_PASSWORD_ENV, elasticsearch_password_secret(name), "elastic"),
        ]
    if spec.log.mode == "managed":
        env.append({"name": KAFKA_BOOTSTRAP_ENV, "value": kafka_bootstrap(name, namespace)})
    elif spec.log.mode == "external" and spec.log.bootstrap_servers:
        env.append({"name": KAFKA_BOOTSTRAP_ENV, "value": spec.log.bootstrap_servers})
        if spec.log.credentials_secret:
            env += [
                _secret_env(KAFKA_USERNAME_ENV, spec.log.credentials_secret, "username"),
                _secret_env(KAFKA_PASSWORD_ENV, spec.log.credentials_secret, "password"),
            ]
    if spec.generator.api_key_secret:
        env.append(_secret_env(GENERATOR_API_KEY_ENV, spec.generator.api_key_secret, "api-key"))
    if spec.auth_secret:
        env.append({"name": AUTH_DIR_ENV, "value": AUTH_MOUNT})
    return env


def _volumes(spec: RagIndexSpec) -> tuple[list[Any], list[Any]]:
    """Node-local scratch for the views (emptyDir: the pod's lifetime, rebuilt from the log and
    a snapshot, no provisioner and no claim to leak), and the token Secret read-only."""
    volumes: list[dict[str, Any]] = [{"name": "data", "emptyDir": {"sizeLimit": spec.storage_size}}]
    mounts: list[dict[str, Any]] = [{"name": "data", "mountPath": spec.data_dir}]
    if spec.auth_secret:
        volumes.append({"name": "auth", "secret": {"secretName": spec.auth_secret}})
        mounts.append({"name": "auth", "mountPath": AUTH_MOUNT, "readOnly": True})
    return volumes, mounts


# The in-tree autoscaler (a sidecar KubeRay adds to the head pod) patches the RayCluster, so it
# alone needs the service-account token: the pod mounts none by default and this projected
# volume, the same files the kubelet would mount, goes into the autoscaler container only.
_SA_TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
_SA_TOKEN_VOLUME: dict[str, Any] = {
    "name": "autoscaler-token",
    "projected": {
        "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
            {
                "configMap": {
                    "name": "kube-root-ca.crt",
                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                }
            },
            {
                "downwardAPI": {
                    "items": [
                        {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
                    ]
                }
            },
        ]
    },
}


def render_ray_service(
    name: str,
    namespace: str,
    spec: RagIndexSpec,
    generation: str,
    options: RenderOptions,
    uid: str | None = None,
) -> dict[str, Any]:
    """The KubeRay RayService: serveConfigV2 from the core renderer plus the Ray cluster shape."""
    rs_name = ray_service_name(name, generation)
    serve = render_serve_config(
        _serving_spec(spec, name, namespace),
        name=name,
        data_dir=spec.data_dir,
        runtime="cluster",
        port=SERVE_PORT,
    )
    layout = deployment_layout(spec, "cluster")
    on_gpu = [d for d in layout if d["ray_actor_options"]["num_gpus"] > 0]
    on_cpu = [d for d in layout if d["ray_actor_options"]["num_gpus"] == 0]
    env = _pod_env(spec, name, namespace)
    volumes, mounts = _volumes(spec)
    pod_labels = labels(name, generation)
    scratch = spec.storage_size

    def template(container: dict[str, Any], extra_volumes: Iterable[Any] = ()) -> dict[str, Any]:
        return {
            "metadata": {"labels": dict(pod_labels)},
            "spec": {
                "automountServiceAccountToken": False,
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": RAY_UID,
                    "runAsGroup": RAY_UID,
                    "fsGroup": RAY_UID,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [container],
                "volumes": [*volumes, *extra_volumes],
            },
        }

    head = _container(
        "ray-head", options, options.head_cpus, options.head_memory, env, mounts, scratch
    )
    head["ports"] = [
        {"name": "gcs", "containerPort": 6379},
        {"name": "dashboard", "containerPort": 8265},
        {"name": "client", "containerPort": 10001},
        {"name": "serve", "containerPort": SERVE_PORT},
    ]
    cpu_lo, cpu_hi = _demand(on_cpu, "num_cpus")
    cpu_per_pod = options.cpu_worker_cpus
    workers = [
        {
            "groupName": "cpu",
            "replicas": _pods(cpu_lo, cpu_per_pod),
            "minReplicas": _pods(cpu_lo, cpu_per_pod),
            "maxReplicas": max(1, _pods(cpu_hi, cpu_per_pod)),
            "rayStartParams": {},
            "template": template(
                _container(
                    "ray-worker",
                    options,
                    cpu_per_pod,
                    options.cpu_worker_memory,
                    env,
                    mounts,
                    scratch,
                )
            ),
        }
    ]
    if on_gpu:
        per_replica = max(d["ray_actor_options"]["num_gpus"] for d in on_gpu)
        gpus_per_pod = max(1, math.ceil(per_replica))
        gpu_lo, gpu_hi = _demand(on_gpu, "num_gpus")
        workers.append(
            {
                "groupName": "gpu",
                "replicas": _pods(gpu_lo, gpus_per_pod),
                "minReplicas": _pods(gpu_lo, gpus_per_pod),
                "maxReplicas": max(1, _pods(gpu_hi, gpus_per_pod)),
                "rayStartParams": {},
                "template": template(
                    _container(
                        "ray-worker",
                        options,
                        options.gpu_worker_cpus,
                        options.gpu_worker_memory,
                        env,
                        mounts,
                        scratch,
                        gpus=gpus_per_pod,
                    )
                ),
            }
        )
    return {
        "apiVersion": RAY_SERVICE[0],
        "kind": RAY_SERVICE[1],
        "metadata": _metadata(rs_name, namespace, name, generation, uid),
        "spec": {
            "serveConfigV2": to_yaml(serve),
            "rayClusterConfig": {
                "rayVersion": options.ray_version,
                # KubeRay (>= 1.5.1) generates the token into a Secret it owns, sets
                # RAY_AUTH_MODE=token and RAY_AUTH_TOKEN on every Ray container, and sends the
                # token on its own dashboard calls: no job, actor or GCS call without it.
                "authOptions": {"mode": "token"},
                "enableInTreeAutoscaling": True,
                "autoscalerOptions": {
                    "volumeMounts": [
                        {"name": "autoscaler-token", "mountPath": _SA_TOKEN_DIR, "readOnly": True}
                    ]
                },
                "headGroupSpec": {
                    # No Serve replicas on the head: it keeps GCS and the controller responsive.
                    # The dashboard listens on the pod IP because KubeRay's operator deploys the
                    # Serve config and reads its status through the head Service on 8265;
                    # the token and the NetworkPolicy are what guard it.
                    "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0"},
                    "template": template(head, [copy.deepcopy(_SA_TOKEN_VOLUME)]),
                },
                "workerGroupSpecs": workers,
            },
        },
    }


def render_network_policy(
    name: str, namespace: str, generation: str, options: RenderOptions, uid: str | None = None
) -> dict[str, Any]:
    """Ingress to one generation's Ray pods: every port from its own pods (GCS, raylets, object
    transfer, dashboard agent), the dashboard from KubeRay's operator only, Serve from anyone
    (clients reach it through the stable Service). Egress stays open: Kafka, Elasticsearch
    and a generator endpoint are all outside the RayCluster."""
    own = {"podSelector": {"matchLabels": ray_pod_labels(name, generation)}}
    kuberay: dict[str, Any] = {"podSelector": {"matchLabels": dict(KUBERAY_OPERATOR_LABELS)}}
    kuberay["namespaceSelector"] = (
        {"matchLabels": {"kubernetes.io/metadata.name": options.kuberay_namespace}}
        if options.kuberay_namespace
        else {}
    )
    return {
        "apiVersion": NETWORK_POLICY[0],
        "kind": NETWORK_POLICY[1],
        "metadata": _metadata(
            network_policy_name(name, generation), namespace, name, generation, uid
        ),
        "spec": {
            "podSelector": {"matchLabels": ray_pod_labels(name, generation)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [own]},
                {"from": [kuberay], "ports": [{"protocol": "TCP", "port": DASHBOARD_PORT}]},
                {"ports": [{"protocol": "TCP", "port": SERVE_PORT}]},
            ],
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
    """A Strimzi (KRaft, node pools) Kafka cluster and the index's topics, all owned by it.

    Every node is broker and controller. The plain listener admits only this index's Ray pods
    (Strimzi renders the NetworkPolicy from `networkPolicyPeers`). Topics are compacted: the
    log is the corpus, so nothing expires by age; deletes are tombstones kept for
    `tombstoneRetentionHours`.
    """
    log = spec.log
    cluster = kafka_name(name)
    strimzi = {STRIMZI_CLUSTER_LABEL: cluster}
    storage: dict[str, Any] = {"type": "persistent-claim", "size": log.broker_storage_size}
    if options.storage_class:
        storage["class"] = options.storage_class
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
            "metadata": _metadata(cluster, namespace, name, generation, uid),
            "spec": {
                "kafka": {
                    "listeners": [
                        {
                            "name": "plain",
                            "port": KAFKA_PORT,
                            "type": "internal",
                            "tls": False,
                            "networkPolicyPeers": [
                                {"podSelector": {"matchLabels": ray_pod_labels(name)}}
                            ],
                        }
                    ],
                    "config": {**replication, "auto.create.topics.enable": False},
                },
                # The Topic Operator turns the KafkaTopics below into topics.
                "entityOperator": {"topicOperator": {}},
            },
        },
        {
            "apiVersion": KAFKA_NODE_POOL[0],
            "kind": KAFKA_NODE_POOL[1],
            "metadata": _metadata(
                kafka_node_pool_name(name), namespace, name, generation, uid, strimzi
            ),
            "spec": {
                "replicas": log.brokers,
                "roles": ["controller", "broker"],
                "storage": storage,
            },
        },
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
        "min.insync.replicas": log.min_insync_replicas,
        "max.message.bytes": MAX_MESSAGE_BYTES,
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
                "metadata": _metadata(object_name, namespace, name, generation, uid, strimzi),
                "spec": {
                    "topicName": topic,
                    "partitions": partitions,
                    "replicas": log.replication_factor,
                    "config": config,
                },
            }
        )
    return objects


def render(
    name: str,
    namespace: str,
    spec: RagIndexSpec,
    *,
    uid: str | None = None,
    active_generation: str | None = None,
    options: RenderOptions | None = None,
) -> list[dict[str, Any]]:
    """Every object the cluster runtime needs for one RagIndex, owned by it when `uid` is set.

    `active_generation` is the generation now serving (from status); the stable Service keeps
    selecting it until the new generation is ready. None means nothing serves yet.
    """
    validate_name(name)
    check_cluster_spec(spec)
    check_quantity(spec.storage_size)
    opts = options or RenderOptions()
    generation = index_generation(spec)
    serving = active_generation or generation
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": CONFIG_MAP[0],
            "kind": CONFIG_MAP[1],
            "metadata": _metadata(config_map_name(name), namespace, name, generation, uid),
            "data": {
                "spec.json": json.dumps(spec.model_dump(mode="json", by_alias=True), indent=1),
                "generation": generation,
            },
        },
        {
            "apiVersion": SERVICE[0],
            "kind": SERVICE[1],
            "metadata": _metadata(name, namespace, name, generation, uid),
            "spec": {
                "type": "ClusterIP",
                # KubeRay labels pods that serve traffic with ray.io/serve=true.
                "selector": {LABEL_INDEX: name, LABEL_GENERATION: serving, "ray.io/serve": "true"},
                "ports": [{"name": "http", "port": SERVE_PORT, "targetPort": SERVE_PORT}],
            },
        },
    ]
    if spec.log.mode == "managed":
        objects += render_managed_log(name, namespace, spec, generation, opts, uid)
    objects.append(render_network_policy(name, namespace, generation, opts, uid))
    objects.append(render_ray_service(name, namespace, spec, generation, opts, uid))
    if managed_elasticsearch(spec):
        objects.append(
            {
                "apiVersion": ELASTICSEARCH[0],
                "kind": ELASTICSEARCH[1],
                "metadata": _metadata(elasticsearch_name(name), namespace, name, generation, uid),
                "spec": {
                    "version": opts.elasticsearch_version,
                    # Plain HTTP inside the cluster: the Serve app needs no CA bundle.
                    "http": {"tls": {"selfSignedCertificate": {"disabled": True}}},
                    "nodeSets": [
                        {
                            "name": "default",
                            "count": spec.lexical.managed_nodes,
                            "config": {"node.store.allow_mmap": False},
                        }
                    ],
                },
            }
        )
    return objects


def ref_of(obj: dict[str, Any]) -> ObjectRef:
    meta = obj.get("metadata") or {}
    return ObjectRef(
        api_version=obj["apiVersion"],
        kind=obj["kind"],
        name=meta["name"],
        generation=(meta.get("labels") or {}).get(LABEL_GENERATION),
    )


def objects_to_prune(
    existing: Iterable[ObjectRef],
    desired: Iterable[ObjectRef],
    keep_generations: Iterable[str | None] = (),
) -> list[ObjectRef]:
    """Live objects that are no longer desired, except generation-scoped ones still serving."""
    wanted = {(r.kind_key, r.name) for r in desired}
    keep = {g for g in keep_generations if g}
    return [
        r
        for r in existing
        if (r.kind_key, r.name) not in wanted
        and not (r.kind_key in GENERATION_SCOPED and r.generation in keep)
    ]
