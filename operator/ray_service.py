"""The RayService of one generation: the Serve config, the head and worker groups sized from
the deployments' demand, the pods' environment, volumes and security context."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from typing import Any

from ragindex.config import MODEL_MOUNT_ROOT, ModelSourceSpec, RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.operator.backend_access import elasticsearch_access, kafka_access, secret_volumes
from ragindex.operator.objects import (
    AUTH_MOUNT,
    RAY_SERVICE,
    RAY_UID,
    REPORT_TOKEN_KEY,
    SERVE_PORT,
    RenderOptions,
    elasticsearch_url,
    kafka_bootstrap,
    labels,
    managed_elasticsearch,
    object_metadata,
    ray_service_name,
    report_token_secret,
)
from ragindex.pod_spec import PodTemplate
from ragindex.serve_config import (
    AUTH_DIR_ENV,
    GENERATOR_API_KEY_ENV,
    HAPROXY_INGRESS_ENV,
    INGEST_EMBEDDER,
    KAFKA_BOOTSTRAP_ENV,
    QUERY_EMBEDDER,
    REPORT_TOKEN_ENV,
    RERANKER,
    deployment_layout,
    render_serve_config,
    to_yaml,
)
from ragindex.telemetry_names import (
    LOG_FORMAT_ENV,
    METRICS_PORT,
    METRICS_PORT_ENV,
    METRICS_PORT_NAME,
    OTLP_ENDPOINT_ENV,
    SERVE_TRACING_EXPORTER_ENV,
    SERVE_TRACING_SAMPLING_ENV,
    TRACING_EXPORTER,
)


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
    image: str,
    options: RenderOptions,
    size: tuple[float, str, int],
    pool: PodTemplate,
    env: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
    scratch: str,
) -> dict[str, Any]:
    """A Ray container sized (cpus, memory, gpus) by the operator's flags, with the pool's
    own requests and limits laid over them key by key."""
    cpus, memory, gpus = size
    limits: dict[str, Any] = {"cpu": _quantity(cpus), "memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    requests = {
        "cpu": options.ray_cpu_request or _quantity(cpus),
        "memory": memory,
        "ephemeral-storage": scratch,
    }
    return {
        "name": name,
        "image": image,
        "resources": {
            "requests": requests | _strings(pool.resources.requests),
            "limits": limits | _strings(pool.resources.limits),
        },
        "env": env,
        "volumeMounts": mounts,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
        },
    }


def _quantity(cpus: float) -> str:
    return str(int(cpus)) if float(cpus).is_integer() else f"{round(cpus * 1000)}m"


def _strings(quantities: Mapping[str, str | int]) -> dict[str, str]:
    return {k: str(v) for k, v in quantities.items()}


def cpu_count(quantity: str | int) -> float:
    """CPUs of a Kubernetes CPU quantity (`4`, `3.5`, `3500m`), as Ray counts them."""
    text = str(quantity)
    try:
        return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        raise InvalidInput(f"CPU quantity {text!r} is not a number of CPUs or millicpus") from None


def pool_size(pool: PodTemplate, cpus: float, memory: str, gpus: int = 0) -> tuple[float, str, int]:
    """(cpus, memory, gpus) of one pool's pod: the pool's limits (else requests) where it
    sets them, else the operator's defaults. Ray counts these, so the pod counts follow them."""
    given = {**pool.resources.requests, **pool.resources.limits}
    if "cpu" in given:
        cpus = cpu_count(given["cpu"])
    if "memory" in given:
        memory = str(given["memory"])
    if "nvidia.com/gpu" in given:
        gpus = int(cpu_count(given["nvidia.com/gpu"]))
    return cpus, memory, gpus


def _placement(pool: PodTemplate) -> dict[str, Any]:
    """The pool's scheduling fields of a pod spec, in core/v1 shape (only those set)."""
    out: dict[str, Any] = {}
    if pool.node_selector:
        out["nodeSelector"] = dict(pool.node_selector)
    if pool.tolerations:
        out["tolerations"] = [
            t.model_dump(mode="json", by_alias=True, exclude_defaults=True)
            for t in pool.tolerations
        ]
    if pool.affinity:
        out["affinity"] = copy.deepcopy(pool.affinity)
    if pool.topology_spread_constraints:
        out["topologySpreadConstraints"] = [
            c.model_dump(mode="json", by_alias=True, exclude_none=True)
            for c in pool.topology_spread_constraints
        ]
    if pool.priority_class_name:
        out["priorityClassName"] = pool.priority_class_name
    return out


def _model_volumes(spec: RagIndexSpec) -> tuple[list[Any], list[Any]]:
    """Volume model sources, mounted read-only where models/embedder.py looks for them
    (`/models/<role>`) in every worker pod (the router and ingest load the embedder's
    tokenizer too); the head loads no model."""
    sources: list[tuple[str, ModelSourceSpec]] = [("embedder", spec.embedder.source)]
    if spec.reranker.enabled:
        sources.append(("reranker", spec.reranker.source))
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for role, source in sources:
        if source.kind != "volume":
            continue
        name = f"model-{role}"
        if source.claim_name:
            volumes.append(
                {
                    "name": name,
                    "persistentVolumeClaim": {"claimName": source.claim_name, "readOnly": True},
                }
            )
        else:
            volumes.append(
                {
                    "name": name,
                    "image": {"reference": source.image_reference, "pullPolicy": "IfNotPresent"},
                }
            )
        mounts.append({"name": name, "mountPath": f"{MODEL_MOUNT_ROOT}/{role}", "readOnly": True})
    return volumes, mounts


def _hub_token_secret(spec: RagIndexSpec) -> tuple[bool, str | None]:
    """Whether a model comes from the hub, and the Secret holding its token (one HF_TOKEN per
    pod: the embedder's Secret, else the reranker's)."""
    hub = [
        s
        for s, used in ((spec.embedder.source, True), (spec.reranker.source, spec.reranker.enabled))
        if used and s.kind == "hub"
    ]
    return bool(hub), next((s.token_secret for s in hub if s.token_secret), None)


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _pod_env(
    spec: RagIndexSpec, name: str, namespace: str, options: RenderOptions
) -> list[dict[str, Any]]:
    """Environment of every Ray container; credentials only by reference to a Secret or as the
    path of a mounted Secret file (backend_access.py), never as values. Every
    ragindex process logs JSON lines, a pod serves its processes' metrics on METRICS_PORT,
    HAProxy takes HTTP on the Serve port to the Router replicas (HAPROXY_INGRESS_ENV), and
    with an OTLP endpoint Serve traces requests there (ragindex.telemetry)."""
    env: list[dict[str, Any]] = [
        {"name": "RAY_USAGE_STATS_ENABLED", "value": "0"},
        {"name": "OMP_NUM_THREADS", "value": "1"},
        {"name": LOG_FORMAT_ENV, "value": "json"},
        {"name": METRICS_PORT_ENV, "value": str(METRICS_PORT)},
        *({"name": k, "value": v} for k, v in HAPROXY_INGRESS_ENV.items()),
    ]
    if options.otlp_endpoint:  # Serve traces every request through its replicas
        env += [
            {"name": OTLP_ENDPOINT_ENV, "value": options.otlp_endpoint},
            {"name": SERVE_TRACING_EXPORTER_ENV, "value": TRACING_EXPORTER},
            {"name": SERVE_TRACING_SAMPLING_ENV, "value": str(options.trace_sampling_ratio)},
        ]
    env += elasticsearch_access(spec, name).env
    if spec.log.mode == "managed":
        env.append({"name": KAFKA_BOOTSTRAP_ENV, "value": kafka_bootstrap(name, namespace)})
    elif spec.log.mode == "external" and spec.log.bootstrap_servers:
        env.append({"name": KAFKA_BOOTSTRAP_ENV, "value": spec.log.bootstrap_servers})
    env += kafka_access(spec, name).env
    if spec.generator.api_key_secret:
        env.append(_secret_env(GENERATOR_API_KEY_ENV, spec.generator.api_key_secret, "api-key"))
    if spec.auth_secret:
        env.append({"name": AUTH_DIR_ENV, "value": AUTH_MOUNT})
    hub, token_secret = _hub_token_secret(spec)
    if hub:  # models/embedder.py downloads hub sources; pods without one stay offline
        env.append({"name": "HF_HUB_OFFLINE", "value": "0"})
        if token_secret:
            env.append(_secret_env("HF_TOKEN", token_secret, "token"))
    env.append(_secret_env(REPORT_TOKEN_ENV, report_token_secret(name), REPORT_TOKEN_KEY))
    return env


def _volumes(spec: RagIndexSpec, name: str) -> tuple[list[Any], list[Any]]:
    """Node-local scratch for the views (emptyDir: the pod's lifetime, rebuilt from the log and
    a snapshot, no provisioner and no claim to leak), the token Secret read-only, and the
    backends' credential and CA files."""
    volumes: list[dict[str, Any]] = [{"name": "data", "emptyDir": {"sizeLimit": spec.storage_size}}]
    mounts: list[dict[str, Any]] = [{"name": "data", "mountPath": spec.data_dir}]
    if spec.auth_secret:
        volumes.append({"name": "auth", "secret": {"secretName": spec.auth_secret}})
        mounts.append({"name": "auth", "mountPath": AUTH_MOUNT, "readOnly": True})
    files = [*elasticsearch_access(spec, name).files, *kafka_access(spec, name).files]
    secret_vols, secret_mounts = secret_volumes(files)
    return [*volumes, *secret_vols], [*mounts, *secret_mounts]


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


EMBEDDER_GROUP = "gpu-embedder"


RERANKER_GROUP = "gpu-reranker"


# A GPU pool's pods each offer this much of the pool's marker resource and each replica of
# its deployments asks for one unit: the marker only steers replicas to their pool's pods,
# the GPUs stay what limits how many fit.
POOL_RESOURCE_UNITS = 1000


def _gpu_pools(layout: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The GPU deployments by the worker group (pool) that hosts them."""
    pools: dict[str, list[dict[str, Any]]] = {}
    for d in layout:
        if d["ray_actor_options"]["num_gpus"] == 0:
            continue
        group = RERANKER_GROUP if d["name"] == RERANKER else EMBEDDER_GROUP
        if d["name"] not in (RERANKER, QUERY_EMBEDDER, INGEST_EMBEDDER):
            raise ValueError(f"deployment {d['name']} asks for GPUs but has no GPU pool")
        pools.setdefault(group, []).append(d)
    return pools


def _pin_to_pools(serve: dict[str, Any], pools: Mapping[str, list[dict[str, Any]]]) -> None:
    """Each GPU deployment asks for one unit of its pool's marker resource, so Ray places
    its replicas (and the autoscaler adds pods) in that pool only."""
    group_of = {d["name"]: group for group, ds in pools.items() for d in ds}
    for app in serve["applications"]:
        for d in app["deployments"]:
            if d["name"] in group_of:
                d["ray_actor_options"]["resources"] = {group_of[d["name"]]: 1}


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
    gpu_pools = _gpu_pools(layout)
    _pin_to_pools(serve, gpu_pools)
    on_cpu = [d for d in layout if d["ray_actor_options"]["num_gpus"] == 0]
    env = _pod_env(spec, name, namespace, options)
    volumes, mounts = _volumes(spec, name)
    model_volumes, model_mounts = _model_volumes(spec)
    pod_labels = labels(name, generation)
    scratch = spec.storage_size
    image = spec.image or options.image

    def template(
        container: dict[str, Any], pool: PodTemplate, extra_volumes: Iterable[Any] = ()
    ) -> dict[str, Any]:
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
                **_placement(pool),
            },
        }

    pods = spec.pods
    head = _container(
        "ray-head",
        image,
        options,
        pool_size(pods.head, options.head_cpus, options.head_memory),
        pods.head,
        env,
        mounts,
        scratch,
    )
    head["ports"] = [
        {"name": "gcs", "containerPort": 6379},
        {"name": "dashboard", "containerPort": 8265},
        {"name": "client", "containerPort": 10001},
        {"name": "serve", "containerPort": SERVE_PORT},
    ]
    metrics_port = [{"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"}]

    def worker(size: tuple[float, str, int], pool: PodTemplate) -> dict[str, Any]:
        """A worker pod's template: its ragindex processes serve their metrics (the head runs
        no replica), and the model volumes are mounted (every worker may load a model)."""
        container = _container(
            "ray-worker", image, options, size, pool, env, [*mounts, *model_mounts], scratch
        )
        container["ports"] = copy.deepcopy(metrics_port)
        return template(container, pool, copy.deepcopy(model_volumes))

    cpu_lo, cpu_hi = _demand(on_cpu, "num_cpus")
    cpu_size = pool_size(pods.cpu_workers, options.cpu_worker_cpus, options.cpu_worker_memory)
    # Said to Ray outright: a pool may set only a CPU request, which Ray would not count.
    ray_cpus = max(1, math.floor(cpu_size[0]))
    workers = [
        {
            "groupName": "cpu",
            "replicas": _pods(cpu_lo, ray_cpus),
            "minReplicas": _pods(cpu_lo, ray_cpus),
            "maxReplicas": max(1, _pods(cpu_hi, ray_cpus)),
            "rayStartParams": {"num-cpus": str(ray_cpus)},
            "template": worker(cpu_size, pods.cpu_workers),
        }
    ]
    for group, pool_deployments in gpu_pools.items():
        pool = pods.embedders if group == EMBEDDER_GROUP else pods.rerankers
        per_replica = max(
            1, math.ceil(max(d["ray_actor_options"]["num_gpus"] for d in pool_deployments))
        )
        size = pool_size(pool, options.gpu_worker_cpus, options.gpu_worker_memory, per_replica)
        if size[2] < per_replica:
            field = "embedders" if group == EMBEDDER_GROUP else "rerankers"
            raise InvalidInput(
                f"pods.{field}.resources nvidia.com/gpu is {size[2]}: one {group} pod must hold"
                f" a replica's {per_replica} GPU(s)"
            )
        gpu_lo, gpu_hi = _demand(pool_deployments, "num_gpus")
        workers.append(
            {
                "groupName": group,
                "replicas": _pods(gpu_lo, size[2]),
                "minReplicas": _pods(gpu_lo, size[2]),
                "maxReplicas": max(1, _pods(gpu_hi, size[2])),
                # The pool's marker resource: only its own deployments ask for it.
                "rayStartParams": {"resources": f'"{{\\"{group}\\": {POOL_RESOURCE_UNITS}}}"'},
                "template": worker(size, pool),
            }
        )
    return {
        "apiVersion": RAY_SERVICE[0],
        "kind": RAY_SERVICE[1],
        "metadata": object_metadata(rs_name, namespace, name, generation, uid),
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
                    "template": template(head, pods.head, [copy.deepcopy(_SA_TOKEN_VOLUME)]),
                },
                "workerGroupSpecs": workers,
            },
        },
    }
