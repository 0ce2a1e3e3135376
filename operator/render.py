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
spec names them (the operator checks their label before applying; see ownership.py), and TLS
with scoped users toward Elasticsearch and Kafka (backend_access.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.generations import index_generation
from ragindex.operator.backend_access import elasticsearch_auth
from ragindex.operator.exposure import render_exposure
from ragindex.operator.managed_log import render_managed_log
from ragindex.operator.objects import (
    CONFIG_MAP,
    DASHBOARD_PORT,
    ELASTICSEARCH,
    GENERATION_SCOPED,
    KUBERAY_OPERATOR_LABELS,
    LABEL_GENERATION,
    LABEL_INDEX,
    NETWORK_POLICY,
    SERVE_PORT,
    SERVICE,
    ObjectRef,
    RenderOptions,
    check_quantity,
    config_map_name,
    elasticsearch_name,
    managed_elasticsearch,
    network_policy_name,
    object_metadata,
    ray_pod_labels,
    validate_name,
)
from ragindex.operator.ray_service import render_ray_service
from ragindex.telemetry_names import METRICS_PORT


def named_secrets(spec: RagIndexSpec) -> list[str]:
    """Every Secret the spec asks the operator to mount or inject (each must carry the label)."""
    names = [
        spec.auth_secret,
        spec.log.credentials_secret,
        spec.log.ca_secret,
        spec.lexical.elasticsearch_credentials_secret,
        spec.lexical.elasticsearch_api_key_secret,
        spec.lexical.elasticsearch_ca_secret,
        spec.generator.api_key_secret,
        spec.embedder.source.token_secret,
        spec.reranker.source.token_secret if spec.reranker.enabled else None,
    ]
    return [n for n in names if n]


def render_elasticsearch_node_set(spec: RagIndexSpec) -> dict[str, Any]:
    """The managed Elasticsearch's one nodeSet: its count and config, the container's
    resources (ECK's podTemplate) and the data volume claim, each only when the spec sets it
    (else ECK's defaults: 2Gi memory, a 1Gi claim of the default class)."""
    managed = spec.lexical.managed
    node_set: dict[str, Any] = {
        "name": "default",
        "count": spec.lexical.managed_nodes,
        "config": {"node.store.allow_mmap": False},
    }
    resources = managed.resources.model_dump(mode="json", exclude_defaults=True)
    if resources:
        resources = {k: {q: str(v) for q, v in qs.items()} for k, qs in resources.items()}
        node_set["podTemplate"] = {
            "spec": {"containers": [{"name": "elasticsearch", "resources": resources}]}
        }
    storage = managed.storage
    if storage.size or storage.storage_class_name:
        claim: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": storage.size or "1Gi"}},
        }
        if storage.storage_class_name:
            claim["storageClassName"] = storage.storage_class_name
        # ECK's name for the data volume: a claim by any other name would be a second volume.
        node_set["volumeClaimTemplates"] = [
            {"metadata": {"name": "elasticsearch-data"}, "spec": claim}
        ]
    return node_set


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


def render_network_policy(
    name: str, namespace: str, generation: str, options: RenderOptions, uid: str | None = None
) -> dict[str, Any]:
    """Ingress to one generation's Ray pods: every port from its own pods (GCS, raylets, object
    transfer, dashboard agent), the dashboard from KubeRay's operator only, Serve from anyone
    (clients reach it through the stable Service), the metrics port from the monitoring
    namespace's pods (Prometheus scrapes every pod there). Egress stays open: Kafka, Elasticsearch
    and a generator endpoint are all outside the RayCluster."""
    own = {"podSelector": {"matchLabels": ray_pod_labels(name, generation)}}
    kuberay: dict[str, Any] = {"podSelector": {"matchLabels": dict(KUBERAY_OPERATOR_LABELS)}}
    kuberay["namespaceSelector"] = (
        {"matchLabels": {"kubernetes.io/metadata.name": options.kuberay_namespace}}
        if options.kuberay_namespace
        else {}
    )
    monitoring: dict[str, Any] = {
        "namespaceSelector": (
            {"matchLabels": {"kubernetes.io/metadata.name": options.monitoring_namespace}}
            if options.monitoring_namespace
            else {}
        )
    }
    return {
        "apiVersion": NETWORK_POLICY[0],
        "kind": NETWORK_POLICY[1],
        "metadata": object_metadata(
            network_policy_name(name, generation), namespace, name, generation, uid
        ),
        "spec": {
            "podSelector": {"matchLabels": ray_pod_labels(name, generation)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [own]},
                {"from": [kuberay], "ports": [{"protocol": "TCP", "port": DASHBOARD_PORT}]},
                {"ports": [{"protocol": "TCP", "port": SERVE_PORT}]},
                {"from": [monitoring], "ports": [{"protocol": "TCP", "port": METRICS_PORT}]},
            ],
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
    check_cluster_spec(spec)
    check_quantity(spec.storage_size)
    opts = options or RenderOptions()
    generation = index_generation(spec)
    serving = active_generation or generation
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": CONFIG_MAP[0],
            "kind": CONFIG_MAP[1],
            "metadata": object_metadata(config_map_name(name), namespace, name, generation, uid),
            "data": {
                "spec.json": json.dumps(spec.model_dump(mode="json", by_alias=True), indent=1),
                "generation": generation,
            },
        },
        {
            "apiVersion": SERVICE[0],
            "kind": SERVICE[1],
            "metadata": object_metadata(name, namespace, name, generation, uid),
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
    objects += render_exposure(name, namespace, spec.exposure, generation, uid)
    if managed_elasticsearch(spec):
        objects.append(
            {
                "apiVersion": ELASTICSEARCH[0],
                "kind": ELASTICSEARCH[1],
                "metadata": object_metadata(
                    elasticsearch_name(name), namespace, name, generation, uid
                ),
                "spec": {
                    "version": opts.elasticsearch_version,
                    # ECK's TLS stays on (its own CA, which the pods mount); the pods log in as
                    # the scoped user, never as `elastic`.
                    "auth": elasticsearch_auth(spec, namespace, name),
                    "nodeSets": [render_elasticsearch_node_set(spec)],
                },
            }
        )
    return objects


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
