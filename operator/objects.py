"""What every object one RagIndex owns shares: its kinds, names, labels, owner reference and
metadata, the operator-wide render options, and the references pruning compares."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.operator.crd import GROUP, KIND, VERSION

FIELD_MANAGER = "ragindex-operator"


LABEL_INDEX = f"{GROUP}/index"


LABEL_GENERATION = f"{GROUP}/generation"


LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"


SERVE_PORT = 8000


BUILD_REPORT_PATH = "/v1/generation"


DASHBOARD_PORT = 8265


# The managed Kafka's one listener: TLS (Strimzi's cluster CA) and SCRAM-SHA-512 users.
KAFKA_TLS_PORT = 9093


KAFKA_LISTENER = "tls"


KAFKA_SASL_MECHANISM = "SCRAM-SHA-512"


ELASTICSEARCH_PORT = 9200


# Where the Ray containers find the backends' credentials and CAs, one directory per mounted
# Secret (the whole directory, never a subPath: the kubelet then follows a rotated Secret).
CREDENTIALS_MOUNT = "/etc/ragindex/credentials"


CA_KEY = "ca.crt"


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


KAFKA_USER = ("kafka.strimzi.io/v1", "KafkaUser")


INGRESS = ("networking.k8s.io/v1", "Ingress")


HTTP_ROUTE = ("gateway.networking.k8s.io/v1", "HTTPRoute")


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
    KAFKA_USER,
    INGRESS,
    HTTP_ROUTE,
)


@dataclass(frozen=True)
class CustomKind:
    """A kind that a CustomResourceDefinition adds, and what to do where it is missing."""

    crd: str
    remedy: str


_STRIMZI = "install Strimzi, or set log.mode external"

# The kinds the operator renders that Kubernetes does not serve by itself: before applying, the
# operator checks their CRDs, so a missing one is named in status rather than as a 404.
CUSTOM_KINDS: dict[tuple[str, str], CustomKind] = {
    RAY_SERVICE: CustomKind("rayservices.ray.io", "install KubeRay's operator and CRDs"),
    ELASTICSEARCH: CustomKind(
        "elasticsearches.elasticsearch.k8s.elastic.co",
        "install ECK, or set lexical.elasticsearchUrl to an external Elasticsearch",
    ),
    KAFKA: CustomKind("kafkas.kafka.strimzi.io", _STRIMZI),
    KAFKA_NODE_POOL: CustomKind("kafkanodepools.kafka.strimzi.io", _STRIMZI),
    KAFKA_TOPIC: CustomKind("kafkatopics.kafka.strimzi.io", _STRIMZI),
    KAFKA_USER: CustomKind("kafkausers.kafka.strimzi.io", _STRIMZI),
    HTTP_ROUTE: CustomKind(
        "httproutes.gateway.networking.k8s.io",
        "install the Gateway API CRDs (standard channel) and a Gateway, or use exposure.ingress",
    ),
}


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
    # Namespace of the Prometheus that scrapes the Ray pods' metrics port (the one caller
    # admitted to it besides the cluster's own pods); None admits any namespace's pods.
    monitoring_namespace: str | None = "monitoring"
    # An OTLP/HTTP endpoint (e.g. http://otel-collector.monitoring:4318) the Ray pods export
    # their traces to, and the share of requests without a sampled `traceparent` they trace;
    # None: no tracing.
    otlp_endpoint: str | None = None
    trace_sampling_ratio: float = 0.01


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


def report_token_secret(name: str) -> str:
    """The Secret holding the credential a generation's Router asks of whoever reads its
    build report (the operator): made by the operator, owned by the RagIndex."""
    return f"{name}-report-token"


REPORT_TOKEN_KEY = "token"


def network_policy_name(name: str, generation: str) -> str:
    return f"{ray_service_name(name, generation)}-ray"


def kafka_name(name: str) -> str:
    return f"{name}-log"


def kafka_node_pool_name(name: str) -> str:
    return f"{kafka_name(name)}-pool"


def kafka_bootstrap(name: str, namespace: str) -> str:
    """Strimzi's bootstrap Service of the managed cluster, TLS listener."""
    return f"{kafka_name(name)}-kafka-bootstrap.{namespace}.svc:{KAFKA_TLS_PORT}"


def kafka_user_name(name: str) -> str:
    """The managed Kafka's user of the index's Ray pods: the KafkaUser, its SCRAM user name,
    and the Secret Strimzi's User Operator writes its password to (key `password`)."""
    return f"{kafka_name(name)}-ray"


def kafka_cluster_ca_secret(name: str) -> str:
    """The Secret Strimzi writes the managed cluster's CA certificate to (key `ca.crt`)."""
    return f"{kafka_name(name)}-cluster-ca-cert"


def ray_pod_labels(name: str, generation: str | None = None) -> dict[str, str]:
    """Selects Ray pods of the index (of one generation when given), never ECK/Strimzi pods."""
    selector = {LABEL_INDEX: name, RAY_NODE_LABEL: "yes"}
    if generation is not None:
        selector[LABEL_GENERATION] = generation
    return selector


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


def object_metadata(
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
        return f"https://{elasticsearch_name(name)}-es-http.{namespace}.svc:{ELASTICSEARCH_PORT}"
    return spec.lexical.elasticsearch_url


def elasticsearch_ca_secret(name: str) -> str:
    """The Secret where ECK publishes the CA of the managed cluster's HTTP certificate (key
    `ca.crt`)."""
    return f"{elasticsearch_name(name)}-es-http-certs-public"


def elasticsearch_user_secret(name: str) -> str:
    """The managed Elasticsearch's user of the index's Ray pods (and of the operator's alias
    switch): a `kubernetes.io/basic-auth` Secret the operator makes once, in ECK's fileRealm."""
    return f"{elasticsearch_name(name)}-ragindex-user"


ELASTICSEARCH_USER = "ragindex"


ELASTICSEARCH_ROLE = "ragindex_index"


def managed_crds(kinds: Iterable[tuple[str, str]] = MANAGED_KINDS) -> set[str]:
    """The CRDs that serve the custom kinds among `kinds`."""
    return {CUSTOM_KINDS[k].crd for k in kinds if k in CUSTOM_KINDS}


def missing_crds(objects: Iterable[dict[str, Any]], installed: Iterable[str]) -> list[str]:
    """One message per custom kind among `objects` whose CRD is not in `installed`."""
    have = set(installed)
    kinds = dict.fromkeys((o["apiVersion"], o["kind"]) for o in objects)
    return [
        f"{kind[1]} ({kind[0]}) needs the CustomResourceDefinition {custom.crd}, which this"
        f" cluster does not have: {custom.remedy}"
        for kind in kinds
        if (custom := CUSTOM_KINDS.get(kind)) and custom.crd not in have
    ]


def ref_of(obj: dict[str, Any]) -> ObjectRef:
    meta = obj.get("metadata") or {}
    return ObjectRef(
        api_version=obj["apiVersion"],
        kind=obj["kind"],
        name=meta["name"],
        generation=(meta.get("labels") or {}).get(LABEL_GENERATION),
    )
