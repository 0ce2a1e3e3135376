"""The RayService of one generation: the Serve config, the head and worker groups sized from
the deployments' demand, the pods' environment, volumes and security context."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from typing import Any

from ragindex.config import RagIndexSpec
from ragindex.operator.objects import (
    AUTH_MOUNT,
    RAY_SERVICE,
    RAY_UID,
    REPORT_TOKEN_KEY,
    SERVE_PORT,
    RenderOptions,
    elasticsearch_password_secret,
    elasticsearch_url,
    kafka_bootstrap,
    labels,
    managed_elasticsearch,
    object_metadata,
    ray_service_name,
    report_token_secret,
)
from ragindex.serve_config import (
    AUTH_DIR_ENV,
    ES_PASSWORD_ENV,
    ES_USERNAME_ENV,
    GENERATOR_API_KEY_ENV,
    KAFKA_BOOTSTRAP_ENV,
    KAFKA_PASSWORD_ENV,
    KAFKA_USERNAME_ENV,
    REPORT_TOKEN_ENV,
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


def _pod_env(
    spec: RagIndexSpec, name: str, namespace: str, options: RenderOptions
) -> list[dict[str, Any]]:
    """Environment of every Ray container; credentials only by reference to a Secret. Every
    ragindex process logs JSON lines, a pod serves its processes' metrics on METRICS_PORT, and
    with an OTLP endpoint Serve traces requests there (ragindex.telemetry)."""
    env: list[dict[str, Any]] = [
        {"name": "RAY_USAGE_STATS_ENABLED", "value": "0"},
        {"name": "OMP_NUM_THREADS", "value": "1"},
        {"name": LOG_FORMAT_ENV, "value": "json"},
        {"name": METRICS_PORT_ENV, "value": str(METRICS_PORT)},
    ]
    if options.otlp_endpoint:  # Serve traces every request through its replicas
        env += [
            {"name": OTLP_ENDPOINT_ENV, "value": options.otlp_endpoint},
            {"name": SERVE_TRACING_EXPORTER_ENV, "value": TRACING_EXPORTER},
            {"name": SERVE_TRACING_SAMPLING_ENV, "value": str(options.trace_sampling_ratio)},
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
    env.append(_secret_env(REPORT_TOKEN_ENV, report_token_secret(name), REPORT_TOKEN_KEY))
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
    env = _pod_env(spec, name, namespace, options)
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
    metrics_port = [{"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"}]

    def worker(container: dict[str, Any]) -> dict[str, Any]:
        """A worker container: its pod's ragindex processes serve their metrics (the head
        runs no replica)."""
        return {**container, "ports": copy.deepcopy(metrics_port)}

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
                worker(
                    _container(
                        "ray-worker",
                        options,
                        cpu_per_pod,
                        options.cpu_worker_memory,
                        env,
                        mounts,
                        scratch,
                    )
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
                    worker(
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
                    )
                ),
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
                    "template": template(head, [copy.deepcopy(_SA_TOKEN_VOLUME)]),
                },
                "workerGroupSpecs": workers,
            },
        },
    }
