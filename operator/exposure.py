"""The route from outside the cluster to a RagIndex's Service (spec.exposure): an Ingress or a
Gateway API HTTPRoute, rendered as a pure function of the spec like every other object
(render.py). Both point at the stable Service, so they follow the serving generation without
being rendered again; neither is generation-scoped."""

from __future__ import annotations

from typing import Any

from ragindex.exposure import ExposureSpec, HttpRouteExposure, IngressExposure
from ragindex.operator.objects import HTTP_ROUTE, INGRESS, SERVE_PORT, object_metadata


def render_ingress(
    name: str, namespace: str, ingress: IngressExposure, generation: str, uid: str | None
) -> dict[str, Any]:
    """An Ingress to the Service `name`, TLS for its host from tlsSecret when set."""
    metadata = object_metadata(name, namespace, name, generation, uid)
    if ingress.annotations:
        metadata["annotations"] = dict(ingress.annotations)
    backend = {"service": {"name": name, "port": {"number": SERVE_PORT}}}
    rule: dict[str, Any] = {
        "http": {"paths": [{"path": ingress.path, "pathType": "Prefix", "backend": backend}]}
    }
    if ingress.host:
        rule["host"] = ingress.host
    spec: dict[str, Any] = {"rules": [rule]}
    if ingress.class_name:
        spec["ingressClassName"] = ingress.class_name
    if ingress.tls_secret and ingress.host:
        spec["tls"] = [{"hosts": [ingress.host], "secretName": ingress.tls_secret}]
    return {"apiVersion": INGRESS[0], "kind": INGRESS[1], "metadata": metadata, "spec": spec}


def render_http_route(
    name: str, namespace: str, route: HttpRouteExposure, generation: str, uid: str | None
) -> dict[str, Any]:
    """An HTTPRoute from the given Gateways to the Service `name` (TLS is the listener's)."""
    spec: dict[str, Any] = {
        "parentRefs": [
            ref.model_dump(mode="json", by_alias=True, exclude_none=True)
            for ref in route.parent_refs
        ],
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": route.path}}],
                "backendRefs": [{"name": name, "port": SERVE_PORT}],
            }
        ],
    }
    if route.hostnames:
        spec["hostnames"] = list(route.hostnames)
    return {
        "apiVersion": HTTP_ROUTE[0],
        "kind": HTTP_ROUTE[1],
        "metadata": object_metadata(name, namespace, name, generation, uid),
        "spec": spec,
    }


def render_exposure(
    name: str, namespace: str, exposure: ExposureSpec, generation: str, uid: str | None
) -> list[dict[str, Any]]:
    """The Ingress or HTTPRoute the spec asks for; nothing when it asks for neither."""
    if exposure.ingress is not None:
        return [render_ingress(name, namespace, exposure.ingress, generation, uid)]
    if exposure.http_route is not None:
        return [render_http_route(name, namespace, exposure.http_route, generation, uid)]
    return []
