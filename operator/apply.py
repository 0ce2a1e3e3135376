"""Make the cluster match the desired objects: server-side apply, then prune by label.

Server-side apply with one field manager and force=True means the operator owns exactly the
fields it renders and a human's `kubectl edit` of them is reverted on the next reconcile, while
fields others own (KubeRay's status, ECK's defaults) are left alone. Force would also adopt an
object of the same name that someone else made, so `name_conflicts` reads every desired
object's live twin first and the caller applies nothing while one is foreign. Pruning lists only
the kinds the operator manages, selected by the index label and owned by this RagIndex, and
deletes what `render` no longer wants (`objects_to_prune` decides; this module only does I/O).
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterable, Sequence
from typing import Any

from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.core.resource import NamespacedResource
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import ConfigMap, PersistentVolumeClaim, Secret, Service
from lightkube.resources.networking_v1 import Ingress, NetworkPolicy

from ragindex.operator.crd import GROUP, KIND, PLURAL, VERSION
from ragindex.operator.objects import (
    CONFIG_MAP,
    CUSTOM_KINDS,
    ELASTICSEARCH,
    FIELD_MANAGER,
    HTTP_ROUTE,
    INGRESS,
    KAFKA,
    KAFKA_NODE_POOL,
    KAFKA_TOPIC,
    KAFKA_USER,
    LABEL_INDEX,
    LABEL_MANAGED_BY,
    MANAGED_KINDS,
    NETWORK_POLICY,
    PVC,
    RAY_SERVICE,
    REPORT_TOKEN_KEY,
    SERVICE,
    ObjectRef,
    managed_crds,
    object_metadata,
    ref_of,
    report_token_secret,
)
from ragindex.operator.ownership import foreign_object, owned_by, secret_refusal
from ragindex.operator.render import objects_to_prune

RayService = create_namespaced_resource("ray.io", "v1", "RayService", "rayservices")
Elasticsearch = create_namespaced_resource(
    "elasticsearch.k8s.elastic.co", "v1", "Elasticsearch", "elasticsearches"
)
RagIndex = create_namespaced_resource(GROUP, VERSION, KIND, PLURAL)
Kafka = create_namespaced_resource("kafka.strimzi.io", "v1", "Kafka", "kafkas")
KafkaNodePool = create_namespaced_resource(
    "kafka.strimzi.io", "v1", "KafkaNodePool", "kafkanodepools"
)
KafkaTopic = create_namespaced_resource("kafka.strimzi.io", "v1", "KafkaTopic", "kafkatopics")
KafkaUser = create_namespaced_resource("kafka.strimzi.io", "v1", "KafkaUser", "kafkausers")
HTTPRoute = create_namespaced_resource("gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes")

RESOURCES: dict[tuple[str, str], type[NamespacedResource]] = {
    CONFIG_MAP: ConfigMap,
    SERVICE: Service,
    PVC: PersistentVolumeClaim,
    NETWORK_POLICY: NetworkPolicy,
    RAY_SERVICE: RayService,
    ELASTICSEARCH: Elasticsearch,
    KAFKA: Kafka,
    KAFKA_NODE_POOL: KafkaNodePool,
    KAFKA_TOPIC: KafkaTopic,
    KAFKA_USER: KafkaUser,
    INGRESS: Ingress,
    HTTP_ROUTE: HTTPRoute,
}


async def apply_objects(client: AsyncClient, objects: Sequence[dict[str, Any]]) -> None:
    """Server-side apply each object in order (config first, workloads last).

    Call `name_conflicts` first: applying with force adopts whatever holds the name.
    """
    for obj in objects:
        await client.apply(codecs.from_dict(obj), field_manager=FIELD_MANAGER, force=True)


async def _live_metadata(
    client: AsyncClient, res: type[NamespacedResource], name: str, namespace: str
) -> dict[str, Any] | None:
    try:
        obj = await client.get(res, name, namespace=namespace)
    except ApiError as e:
        if e.status.code == 404:
            return None
        raise
    return dict(codecs_to_dict(obj, ("", "")).get("metadata") or {})


async def name_conflicts(
    client: AsyncClient, objects: Sequence[dict[str, Any]], uid: str
) -> list[str]:
    """One message per desired object whose name is held by an object this RagIndex does not
    control; empty when everything may be applied."""
    found = []
    for obj in objects:
        ref = ref_of(obj)
        meta = await _live_metadata(
            client, RESOURCES[ref.kind_key], ref.name, obj["metadata"]["namespace"]
        )
        if meta is not None and (message := foreign_object(ref.kind, meta, uid)):
            found.append(message)
    return found


async def installed_crds(client: AsyncClient, names: Iterable[str]) -> set[str]:
    """Which of the named CustomResourceDefinitions the API server has."""
    found = set()
    for name in names:
        try:
            await client.get(CustomResourceDefinition, name)
        except ApiError as e:
            if e.status.code != 404:
                raise
            continue
        found.add(name)
    return found


async def refused_secrets(
    client: AsyncClient, namespace: str, index: str, names: Sequence[str]
) -> list[str]:
    """One message per Secret named in the spec that the index may not use (absent, or
    without the consent label). Only the metadata is looked at."""
    found = []
    for name in names:
        meta = await _live_metadata(client, Secret, name, namespace)
        if message := secret_refusal(index, name, meta):
            found.append(message)
    return found


async def existing_names(
    client: AsyncClient,
    res: type[NamespacedResource],
    namespace: str,
    names: Iterable[str],
) -> set[str]:
    """Which of the named objects (PersistentVolumeClaims, Secrets) exist in the namespace."""
    return {n for n in names if await _live_metadata(client, res, n, namespace) is not None}


async def list_managed(
    client: AsyncClient,
    namespace: str,
    index: str,
    uid: str,
    kinds: Iterable[tuple[str, str]] = MANAGED_KINDS,
    installed: set[str] | None = None,
) -> list[ObjectRef]:
    """Live objects of the managed kinds that carry this index's labels and are owned by it
    (labels can be copied; the owner's uid cannot).

    A kind whose CRD is not installed (no ECK in a cluster that never needed it) has nothing:
    it is not listed at all, since the API server answers a group it lacks with a bare 404
    page, which lightkube does not turn into an ApiError. `installed` (the CRDs the caller
    already looked up, at least those of `kinds`' custom kinds) saves asking again.
    """
    selector: dict[str, Any] = {LABEL_INDEX: index, LABEL_MANAGED_BY: FIELD_MANAGER}
    kinds = list(kinds)
    if installed is None:
        installed = await installed_crds(client, managed_crds(kinds))
    found: list[ObjectRef] = []
    for kind in kinds:
        if kind in CUSTOM_KINDS and CUSTOM_KINDS[kind].crd not in installed:
            continue
        try:
            async for obj in client.list(RESOURCES[kind], namespace=namespace, labels=selector):
                data = codecs_to_dict(obj, kind)
                if owned_by(data["metadata"], uid):
                    found.append(ref_of(data))
        except ApiError as e:
            if e.status.code != 404:
                raise
    return found


def codecs_to_dict(obj: Any, kind: tuple[str, str]) -> dict[str, Any]:
    """A listed object as a plain dict; list items of typed kinds lack apiVersion and kind."""
    data: dict[str, Any] = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
    data.setdefault("apiVersion", kind[0])
    data.setdefault("kind", kind[1])
    return data


async def delete_refs(client: AsyncClient, namespace: str, refs: Iterable[ObjectRef]) -> None:
    """Delete objects; one that is already gone counts as deleted."""
    for ref in refs:
        try:
            await client.delete(RESOURCES[ref.kind_key], ref.name, namespace=namespace)
        except ApiError as e:
            if e.status.code != 404:
                raise


async def prune(
    client: AsyncClient,
    namespace: str,
    index: str,
    uid: str,
    desired: Iterable[dict[str, Any]],
    keep_generations: Iterable[str | None] = (),
    installed: set[str] | None = None,
) -> list[ObjectRef]:
    """Delete managed objects of this index that are not desired; returns what was deleted.
    `installed`: as for `list_managed`."""
    existing = await list_managed(client, namespace, index, uid, installed=installed)
    doomed = objects_to_prune(existing, [ref_of(o) for o in desired], keep_generations)
    await delete_refs(client, namespace, doomed)
    return doomed


async def read_ray_service(client: AsyncClient, namespace: str, name: str) -> dict[str, Any] | None:
    """The RayService as a dict, or None while it does not exist."""
    try:
        obj = await client.get(RayService, name, namespace=namespace)
    except ApiError as e:
        if e.status.code == 404:
            return None
        raise
    return codecs_to_dict(obj, RAY_SERVICE)


async def secret_value(client: AsyncClient, namespace: str, name: str, key: str) -> str:
    """One key of a Secret (the password ECK generates for a managed Elasticsearch);
    RuntimeError when the key is not there yet."""
    secret = await client.get(Secret, name, namespace=namespace)
    encoded = (secret.data or {}).get(key)
    if encoded is None:
        raise RuntimeError(f"Secret {namespace}/{name} has no key {key!r} yet")
    return base64.b64decode(encoded).decode()


async def ensure_secret(client: AsyncClient, secret: dict[str, Any], uid: str) -> str | None:
    """Create `secret` unless a Secret of its name exists: one made earlier is kept as it is
    (a generated password is never replaced). Returns why not, when that one is not ours."""
    meta = secret["metadata"]
    try:
        await client.create(codecs.from_dict(secret), field_manager=FIELD_MANAGER)
        return None
    except ApiError as e:
        if e.status.code != 409:
            raise
    live = await _live_metadata(client, Secret, meta["name"], meta["namespace"])
    return foreign_object("Secret", live, uid) if live is not None else None


async def ensure_report_token(
    client: AsyncClient, namespace: str, index: str, uid: str
) -> tuple[str | None, str | None]:
    """(the index's report credential, None), making its Secret (owned by the RagIndex, so
    deleted with it) the first time; (None, why) when a Secret of that name is not ours."""
    name = report_token_secret(index)
    try:
        secret = await client.get(Secret, name, namespace=namespace)
    except ApiError as e:
        if e.status.code != 404:
            raise
        token = secrets.token_urlsafe(32)
        meta = object_metadata(name, namespace, index, "", uid)
        try:
            await client.create(
                Secret(
                    metadata=ObjectMeta(**meta),
                    type="Opaque",
                    stringData={REPORT_TOKEN_KEY: token},
                ),
                field_manager=FIELD_MANAGER,
            )
            return token, None
        except ApiError as conflict:
            if conflict.status.code != 409:  # made meanwhile (another round): read it
                raise
            secret = await client.get(Secret, name, namespace=namespace)
    meta = codecs_to_dict(secret, ("", "")).get("metadata") or {}
    if why := foreign_object("Secret", meta, uid):
        return None, why
    encoded = (secret.data or {}).get(REPORT_TOKEN_KEY)
    if encoded is None:
        return None, f"Secret {namespace}/{name} has no key {REPORT_TOKEN_KEY!r}"
    return base64.b64decode(encoded).decode(), None
