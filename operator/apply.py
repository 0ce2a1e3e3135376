"""Make the cluster match the desired objects: server-side apply, then prune by label.

Server-side apply with one field manager and force=True means the operator owns exactly the
fields it renders and a human's `kubectl edit` of them is reverted on the next reconcile, while
fields others own (KubeRay's status, ECK's defaults) are left alone. Pruning lists only the
kinds the operator manages, selected by the index label, and deletes what `render` no longer
wants (`objects_to_prune` decides; this module only does the I/O).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.core.resource import NamespacedResource
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import ConfigMap, PersistentVolumeClaim, Service

from ragindex.operator.crd import GROUP, KIND, PLURAL, VERSION
from ragindex.operator.render import (
    CONFIG_MAP,
    ELASTICSEARCH,
    FIELD_MANAGER,
    LABEL_INDEX,
    LABEL_MANAGED_BY,
    MANAGED_KINDS,
    PVC,
    RAY_SERVICE,
    SERVICE,
    ObjectRef,
    objects_to_prune,
    ref_of,
)

RayService = create_namespaced_resource("ray.io", "v1", "RayService", "rayservices")
Elasticsearch = create_namespaced_resource(
    "elasticsearch.k8s.elastic.co", "v1", "Elasticsearch", "elasticsearches"
)
RagIndex = create_namespaced_resource(GROUP, VERSION, KIND, PLURAL)

RESOURCES: dict[tuple[str, str], type[NamespacedResource]] = {
    CONFIG_MAP: ConfigMap,
    SERVICE: Service,
    PVC: PersistentVolumeClaim,
    RAY_SERVICE: RayService,
    ELASTICSEARCH: Elasticsearch,
}


# A claim's size cannot shrink and grows only on expandable storage classes, so a claim is
# created once per generation and then left alone (a shard-count change keeps its volume).
CREATE_ONLY = frozenset({PVC})


async def apply_objects(client: AsyncClient, objects: Sequence[dict[str, Any]]) -> None:
    """Server-side apply each object in order (config first, workloads last)."""
    for obj in objects:
        ref = ref_of(obj)
        if ref.kind_key in CREATE_ONLY and await _exists(client, ref, obj["metadata"]["namespace"]):
            continue
        await client.apply(codecs.from_dict(obj), field_manager=FIELD_MANAGER, force=True)


async def _exists(client: AsyncClient, ref: ObjectRef, namespace: str) -> bool:
    try:
        await client.get(RESOURCES[ref.kind_key], ref.name, namespace=namespace)
    except ApiError as e:
        if e.status.code == 404:
            return False
        raise
    return True


async def list_managed(
    client: AsyncClient,
    namespace: str,
    index: str,
    kinds: Iterable[tuple[str, str]] = MANAGED_KINDS,
) -> list[ObjectRef]:
    """Live objects of the managed kinds that carry this index's labels.

    A kind whose CRD is not installed (no ECK in a cluster that never needed it) has nothing.
    """
    selector: dict[str, Any] = {LABEL_INDEX: index, LABEL_MANAGED_BY: FIELD_MANAGER}
    found: list[ObjectRef] = []
    for kind in kinds:
        try:
            async for obj in client.list(RESOURCES[kind], namespace=namespace, labels=selector):
                found.append(ref_of(codecs_to_dict(obj, kind)))
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
    desired: Iterable[dict[str, Any]],
    keep_generations: Iterable[str | None] = (),
) -> list[ObjectRef]:
    """Delete managed objects of this index that are not desired; returns what was deleted."""
    existing = await list_managed(client, namespace, index)
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
