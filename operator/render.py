"""Desired Kubernetes objects of one RagIndex: a pure function of the spec and its generation.

The operator never decides what to create inside an API call (DESIGN.md §3): `render` returns
the full desired set, `apply.py` makes the cluster match it, and `objects_to_prune` says what
to delete. Everything here is a function of data, so the layout is tested without a cluster.

Index generation: a short hash of the embedder identity fields of the spec (backend, model,
prefixes). Vectors of two models never mix (DESIGN.md invariant 2), so a new embedder means a
new RayService and a new volume beside the old ones; the stable Service keeps pointing at the
active generation until the new one reports ready, which is the alias swap at the network level.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.hashing import content_hash
from ragindex.operator.crd import GROUP, KIND, VERSION
from ragindex.serve_config import (
    AUTH_DIR_ENV,
    ES_PASSWORD_ENV,
    ES_USERNAME_ENV,
    deployment_layout,
    render_serve_config,
    to_yaml,
)

FIELD_MANAGER = "ragindex-operator"
LABEL_INDEX = f"{GROUP}/index"
LABEL_GENERATION = f"{GROUP}/generation"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
SERVE_PORT = 8000
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
RAY_SERVICE = ("ray.io/v1", "RayService")
ELASTICSEARCH = ("elasticsearch.k8s.elastic.co/v1", "Elasticsearch")
MANAGED_KINDS = (CONFIG_MAP, SERVICE, PVC, RAY_SERVICE, ELASTICSEARCH)
GENERATION_SCOPED = frozenset({PVC, RAY_SERVICE})


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
    storage_class: str | None = None
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


def index_generation(spec: RagIndexSpec) -> str:
    """8 hex characters naming the embedder identity; equal identity, equal generation."""
    e = spec.embedder
    identity = [e.backend, e.model, e.query_prefix, e.passage_prefix]
    return content_hash(json.dumps(identity))[:8]


def ray_service_name(name: str, generation: str) -> str:
    return f"{name}-{generation}"


def data_claim_name(name: str, generation: str) -> str:
    return f"{name}-{generation}-data"


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


def scale_quantity(quantity: str, factor: int) -> str:
    """`10Gi` x 3 -> `30Gi`; only integer quantities, so nothing is rounded silently."""
    match = _QUANTITY.match(quantity)
    if not match:
        raise InvalidInput(
            f"storageSize {quantity!r} is not an integer Kubernetes quantity such as '10Gi'"
        )
    return f"{int(match.group(1)) * factor}{match.group(2) or ''}"


def _metadata(
    name: str, namespace: str, index: str, generation: str, uid: str | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": labels(index, generation),
    }
    if uid is not None:
        meta["ownerReferences"] = [owner_reference(index, uid)]
    return meta


def managed_elasticsearch(spec: RagIndexSpec) -> bool:
    return spec.lexical.backend == "elasticsearch" and not spec.lexical.elasticsearch_url


def _serving_spec(spec: RagIndexSpec, name: str, namespace: str) -> RagIndexSpec:
    """The spec the Serve app gets: a managed Elasticsearch is reached at ECK's HTTP Service."""
    if not managed_elasticsearch(spec):
        return spec
    url = f"http://{elasticsearch_name(name)}-es-http.{namespace}.svc:9200"
    lexical = spec.lexical.model_copy(update={"elasticsearch_url": url})
    return spec.model_copy(update={"lexical": lexical})


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
    gpus: int = 0,
) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": str(cpus), "memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    requests = {"cpu": options.ray_cpu_request or str(cpus), "memory": memory}
    return {
        "name": name,
        "image": options.image,
        "resources": {"requests": requests, "limits": limits},
        "env": env,
        "volumeMounts": mounts,
    }


def _pod_env(spec: RagIndexSpec, name: str) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "RAY_USAGE_STATS_ENABLED", "value": "0"},
        {"name": "OMP_NUM_THREADS", "value": "1"},
    ]
    if managed_elasticsearch(spec):
        # ECK writes the `elastic` user's password into this Secret.
        env += [
            {"name": ES_USERNAME_ENV, "value": "elastic"},
            {
                "name": ES_PASSWORD_ENV,
                "valueFrom": {
                    "secretKeyRef": {
                        "name": f"{elasticsearch_name(name)}-es-elastic-user",
                        "key": "elastic",
                    }
                },
            },
        ]
    if spec.auth_secret:
        env.append({"name": AUTH_DIR_ENV, "value": "/etc/ragindex/auth"})
    return env


def _volumes(spec: RagIndexSpec, name: str, generation: str) -> tuple[list[Any], list[Any]]:
    volumes: list[dict[str, Any]] = [
        {
            "name": "data",
            "persistentVolumeClaim": {"claimName": data_claim_name(name, generation)},
        }
    ]
    mounts: list[dict[str, Any]] = [{"name": "data", "mountPath": spec.data_dir}]
    if spec.auth_secret:
        volumes.append({"name": "auth", "secret": {"secretName": spec.auth_secret}})
        mounts.append({"name": "auth", "mountPath": "/etc/ragindex/auth", "readOnly": True})
    return volumes, mounts


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
    env = _pod_env(spec, name)
    volumes, mounts = _volumes(spec, name, generation)
    pod_labels = labels(name, generation)

    def template(container: dict[str, Any]) -> dict[str, Any]:
        return {
            "metadata": {"labels": dict(pod_labels)},
            "spec": {"containers": [container], "volumes": volumes},
        }

    head = _container("ray-head", options, options.head_cpus, options.head_memory, env, mounts)
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
                    "ray-worker", options, cpu_per_pod, options.cpu_worker_memory, env, mounts
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
                "enableInTreeAutoscaling": True,
                "headGroupSpec": {
                    # No Serve replicas on the head: it keeps GCS and the controller responsive.
                    "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0"},
                    "template": template(head),
                },
                "workerGroupSpecs": workers,
            },
        },
    }


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
    opts = options or RenderOptions()
    generation = index_generation(spec)
    serving = active_generation or generation
    replicas = spec.dense.shards * spec.dense.replicas
    claim_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": scale_quantity(spec.storage_size, replicas)}},
    }
    if opts.storage_class:
        claim_spec["storageClassName"] = opts.storage_class
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
            "apiVersion": PVC[0],
            "kind": PVC[1],
            "metadata": _metadata(
                data_claim_name(name, generation), namespace, name, generation, uid
            ),
            "spec": claim_spec,
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
