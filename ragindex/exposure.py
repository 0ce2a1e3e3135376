"""How a RagIndex's search API is reached from outside the cluster (`RagIndexSpec.exposure`).

The operator always renders a ClusterIP Service per RagIndex, which follows the serving
generation. `exposure` adds at most one route to that Service: an Ingress
(networking.k8s.io/v1), TLS terminated by the ingress controller with the certificate of a
Secret, or a Gateway API HTTPRoute (gateway.networking.k8s.io/v1), attached to a Gateway that
the platform team runs. An HTTPRoute carries no certificate: TLS is the Gateway listener's
(`tls.certificateRefs`), chosen with a parentRef's sectionName.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

# A DNS name, optionally with one leading wildcard label (both kinds accept `*.example.com`).
HOSTNAME_PATTERN = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
PATH_PATTERN = r"^/[^\s]*$"

Hostname = Annotated[str, Field(pattern=HOSTNAME_PATTERN, max_length=253)]


class _Exposure(BaseModel):
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True
    )

    def __hash__(self) -> int:
        # Frozen like the rest of the spec, which is hashed (specs are dict keys), but these
        # hold maps and lists: hash what they say instead.
        return hash(self.model_dump_json())


class IngressExposure(_Exposure):
    """An Ingress to the RagIndex's Service (named like the RagIndex, in its namespace)."""

    host: Hostname | None = Field(
        None,
        description="Host the Ingress answers for, e.g. search.example.com; unset: every host."
        " Required with tlsSecret.",
    )
    class_name: str | None = Field(
        None,
        description="IngressClass that serves it (ingressClassName); unset: the cluster's"
        " default class.",
    )
    path: str = Field(
        "/",
        pattern=PATH_PATTERN,
        description="Path prefix routed to the search API (pathType Prefix).",
    )
    tls_secret: str | None = Field(
        None,
        description="A kubernetes.io/tls Secret in the RagIndex's namespace holding the"
        " certificate for host: the ingress controller terminates TLS with it. The operator"
        " neither reads nor mounts it (so it needs no ragindex.dev/secret-for label).",
    )
    annotations: dict[str, str] = Field(
        default_factory=dict,
        description="Annotations on the Ingress, e.g. for the ingress controller or"
        " cert-manager (cert-manager.io/cluster-issuer).",
    )

    @model_validator(mode="after")
    def _host_for_tls(self) -> IngressExposure:
        if self.tls_secret and not self.host:
            raise ValueError(
                "exposure.ingress.host is required with tlsSecret: the certificate is served"
                " for that host"
            )
        return self


class GatewayParentReference(_Exposure):
    """A Gateway (gateway.networking.k8s.io/v1) the HTTPRoute attaches to."""

    name: str = Field(..., min_length=1, description="Name of the Gateway.")
    namespace: str | None = Field(
        None,
        description="Namespace of the Gateway; unset: the RagIndex's. Its listener's"
        " allowedRoutes must admit routes from the RagIndex's namespace.",
    )
    section_name: str | None = Field(
        None,
        description="The Gateway listener to attach to, e.g. an HTTPS listener whose"
        " tls.certificateRefs hold the certificate; unset: every listener that admits it.",
    )


class HttpRouteExposure(_Exposure):
    """A Gateway API HTTPRoute to the RagIndex's Service. TLS is terminated by the Gateway's
    listener, not configured here."""

    parent_refs: list[GatewayParentReference] = Field(
        ...,
        min_length=1,
        description="Gateways (and listeners, by sectionName) the route attaches to; at least one.",
    )
    hostnames: list[Hostname] = Field(
        default_factory=list,
        description="Hosts the route answers for; empty: those of the listener.",
    )
    path: str = Field(
        "/",
        pattern=PATH_PATTERN,
        description="Path prefix routed to the search API (match type PathPrefix).",
    )


class ExposureSpec(_Exposure):
    """At most one of ingress and httpRoute; neither: only the in-cluster Service."""

    ingress: IngressExposure | None = Field(
        None,
        description="Expose the search API through an Ingress (networking.k8s.io/v1), TLS from"
        " a Secret. Exclusive with httpRoute.",
    )
    http_route: HttpRouteExposure | None = Field(
        None,
        description="Expose the search API through a Gateway API HTTPRoute"
        " (gateway.networking.k8s.io/v1; its CRDs must be installed, else the RagIndex gets"
        " Reconciled=False, CRDMissing). TLS is configured on the Gateway's listener."
        " Exclusive with ingress.",
    )

    @model_validator(mode="after")
    def _one_route(self) -> ExposureSpec:
        if self.ingress is not None and self.http_route is not None:
            raise ValueError(
                "exposure.ingress and exposure.httpRoute are exclusive: expose the index"
                " through one of them"
            )
        return self
