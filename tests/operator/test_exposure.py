"""spec.exposure: an Ingress (TLS from a Secret) or a Gateway API HTTPRoute to the RagIndex's
Service. Rendered as a pure function of the spec; refused with the field named by pydantic and
by the real API server (CEL); applied, owned and pruned by the operator on the real API server;
and, where the Gateway API's CRDs are absent (as on the test API server), an HTTPRoute gets
Reconciled=False, CRDMissing, naming the CRD, with nothing applied."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kopf.testing import KopfRunner
from lightkube import Client, codecs
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Secret, Service
from lightkube.resources.networking_v1 import Ingress
from lightkube.types import PatchType

from ragindex.config import RagIndexSpec, parse_spec
from ragindex.errors import InvalidInput
from ragindex.operator import OperatorOptions, register
from ragindex.operator.apply import RagIndex
from ragindex.operator.objects import (
    HTTP_ROUTE,
    INGRESS,
    SERVE_PORT,
    ObjectRef,
    missing_crds,
    ref_of,
)
from ragindex.operator.ownership import SECRET_LABEL
from ragindex.operator.render import objects_to_prune, render

T = TypeVar("T")
# The cluster runtime's minimum: a token Secret and a log; external brokers render no Strimzi
# objects, and the embedded BM25 backend no Elasticsearch.
BASE: dict[str, Any] = {
    "authSecret": "tokens",
    "log": {"mode": "external", "bootstrapServers": "kafka.example:9092"},
    "lexical": {"backend": "embedded"},
}
INGRESS_SPEC = {
    "host": "search.example.com",
    "className": "nginx",
    "path": "/search",
    "tlsSecret": "search-tls",
    "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
}
ROUTE_SPEC = {
    "parentRefs": [
        {"name": "public", "namespace": "gateways", "sectionName": "https"},
        {"name": "internal"},
    ],
    "hostnames": ["search.example.com"],
}


def _spec(exposure: dict[str, Any]) -> RagIndexSpec:
    return RagIndexSpec.model_validate({**BASE, "exposure": exposure})


def _by_kind(objects: list[dict[str, Any]], kind: tuple[str, str]) -> list[dict[str, Any]]:
    return [o for o in objects if (o["apiVersion"], o["kind"]) == kind]


# --- pure ----------------------------------------------------------------------------------


def test_no_exposure_renders_only_the_service() -> None:
    objects = render("docs", "team", RagIndexSpec.model_validate(BASE))
    assert not _by_kind(objects, INGRESS) and not _by_kind(objects, HTTP_ROUTE)


def test_ingress_routes_to_the_service_with_tls_from_the_secret() -> None:
    (ingress,) = _by_kind(
        render("docs", "team", _spec({"ingress": INGRESS_SPEC}), uid="u1"), INGRESS
    )
    meta = ingress["metadata"]
    assert (meta["name"], meta["namespace"]) == ("docs", "team")
    assert meta["ownerReferences"][0]["uid"] == "u1"
    assert meta["annotations"] == {"cert-manager.io/cluster-issuer": "letsencrypt"}
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "nginx"
    assert spec["tls"] == [{"hosts": ["search.example.com"], "secretName": "search-tls"}]
    (rule,) = spec["rules"]
    assert rule["host"] == "search.example.com"
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/search", "Prefix")
    assert path["backend"] == {"service": {"name": "docs", "port": {"number": SERVE_PORT}}}
    # Specs are dict keys (generation records): maps and lists in exposure keep them hashable.
    assert hash(_spec({"ingress": INGRESS_SPEC})) == hash(_spec({"ingress": INGRESS_SPEC}))


def test_ingress_without_host_or_tls_answers_every_host_in_plain_http() -> None:
    (ingress,) = _by_kind(render("docs", "team", _spec({"ingress": {}})), INGRESS)
    assert "tls" not in ingress["spec"] and "ingressClassName" not in ingress["spec"]
    assert "annotations" not in ingress["metadata"]
    (rule,) = ingress["spec"]["rules"]
    assert "host" not in rule and rule["http"]["paths"][0]["path"] == "/"


def test_http_route_attaches_to_the_gateways_and_carries_no_certificate() -> None:
    objects = render("docs", "team", _spec({"httpRoute": ROUTE_SPEC}), uid="u1")
    (route,) = _by_kind(objects, HTTP_ROUTE)
    assert not _by_kind(objects, INGRESS)
    assert route["metadata"]["ownerReferences"][0]["uid"] == "u1"
    spec = route["spec"]
    # Unset fields are left out, so the Gateway API's own defaults apply (group, kind, ...).
    assert spec["parentRefs"] == [
        {"name": "public", "namespace": "gateways", "sectionName": "https"},
        {"name": "internal"},
    ]
    assert spec["hostnames"] == ["search.example.com"]
    (rule,) = spec["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert rule["backendRefs"] == [{"name": "docs", "port": SERVE_PORT}]
    assert "tls" not in json.dumps(spec)  # TLS is the Gateway listener's


def test_a_route_left_out_of_the_spec_is_pruned() -> None:
    with_ingress = render("docs", "team", _spec({"ingress": INGRESS_SPEC}))
    without = render("docs", "team", RagIndexSpec.model_validate(BASE))
    doomed = objects_to_prune([ref_of(o) for o in with_ingress], [ref_of(o) for o in without])
    assert doomed == [ObjectRef(INGRESS[0], INGRESS[1], "docs", doomed[0].generation)]


INVALID: dict[str, tuple[dict[str, Any], list[str]]] = {
    "both-routes": (
        {"ingress": {}, "httpRoute": {"parentRefs": [{"name": "gw"}]}},
        ["spec.exposure.httpRoute", "exclusive"],
    ),
    "tls-without-host": (
        {"ingress": {"tlsSecret": "search-tls"}},
        ["spec.exposure.ingress.host", "required with tlsSecret"],
    ),
    "route-without-gateway": (
        {"httpRoute": {"parentRefs": []}},
        ["spec.exposure.httpRoute.parentRefs", "at least one Gateway"],
    ),
    "host-not-a-dns-name": (
        {"ingress": {"host": "Search_Example"}},
        ["spec.exposure.ingress.host", "should match"],
    ),
    "path-not-absolute": (
        {"httpRoute": {"parentRefs": [{"name": "gw"}], "path": "search"}},
        ["spec.exposure.httpRoute.path", "should match"],
    ),
}


@pytest.mark.parametrize("exposure, words", list(INVALID.values()), ids=list(INVALID))
def test_pydantic_refuses_naming_the_field(exposure: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_spec({**BASE, "exposure": exposure})
    # The same field as the API server names (which prefixes `spec.`).
    assert words[0].removeprefix("spec.") in str(refused.value)


def test_missing_crds_names_the_crd_and_what_to_do() -> None:
    objects = render("docs", "team", _spec({"httpRoute": ROUTE_SPEC}))
    (message,) = missing_crds(objects, installed={"rayservices.ray.io"})
    assert "HTTPRoute" in message and "httproutes.gateway.networking.k8s.io" in message
    assert "exposure.ingress" in message
    assert (
        missing_crds(objects, {"rayservices.ray.io", "httproutes.gateway.networking.k8s.io"}) == []
    )
    # Kinds Kubernetes serves itself (Ingress, Service, ...) need no CRD.
    ingress = render("docs", "team", _spec({"ingress": INGRESS_SPEC}))
    assert missing_crds(ingress, installed={"rayservices.ray.io"}) == []


# --- against the real API server -------------------------------------------------------------


def _ragindex(name: str, namespace: str, spec: dict[str, Any]) -> str:
    return json.dumps(
        {
            "apiVersion": "ragindex.dev/v1alpha1",
            "kind": "RagIndex",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )


@pytest.mark.kubernetes
def test_api_server_refuses_exposure_naming_the_field(kube_cluster, kube_namespace) -> None:
    for case, (exposure, words) in INVALID.items():
        name = f"bad-{uuid.uuid4().hex[:6]}"
        proc = kube_cluster.kubectl(
            "create",
            "-f",
            "-",
            input=_ragindex(name, kube_namespace, {**BASE, "exposure": exposure}),
            check=False,
        )
        assert proc.returncode != 0, f"{case}: accepted\n{proc.stdout}"
        for word in words:
            assert word in proc.stderr, f"{case}: {word!r} not in\n{proc.stderr}"


@pytest.mark.kubernetes
def test_kubectl_explain_documents_the_listener_tls(kube_cluster) -> None:
    deadline = time.monotonic() + 60
    while True:
        proc = kube_cluster.kubectl("explain", "ragindex.spec.exposure.httpRoute", check=False)
        if proc.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert proc.returncode == 0, proc.stderr
    assert "listener" in proc.stdout and "parentRefs" in proc.stdout


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def _get(client: Client, res: Any, name: str, namespace: str) -> Any:
    try:
        return client.get(res, name, namespace=namespace)
    except ApiError as e:
        if e.status.code == 404:
            return None
        raise


def _reconciled(client: Client, name: str, namespace: str) -> dict[str, Any]:
    status = dict(client.get(RagIndex, name, namespace=namespace).get("status") or {})
    return next((c for c in status.get("conditions") or [] if c["type"] == "Reconciled"), {})


@pytest.fixture
def client(kube_cluster: Any, kube_namespace: str) -> Iterator[Client]:
    c = Client()
    secret = Secret(
        metadata=ObjectMeta(name="tokens", namespace=kube_namespace, labels={SECRET_LABEL: "web"}),
        stringData={"tokens.json": "{}"},
    )
    c.create(secret, namespace=kube_namespace)
    yield c
    c.close()


@pytest.fixture
def operator(kube_cluster: Any, kube_namespace: str) -> Iterator[KopfRunner]:
    registry = register(
        OperatorOptions(runtime="cluster", poll_interval_s=1.0, refused_retry_s=2.0)
    )
    with KopfRunner(
        ["run", "--standalone", "--namespace", kube_namespace], registry=registry, timeout=60
    ) as runner:
        yield runner
    assert runner.exception is None, runner.output[-3000:]


def _create(client: Client, namespace: str, spec: dict[str, Any]) -> None:
    body = json.loads(_ragindex("web", namespace, spec))
    client.create(codecs.from_dict(body), namespace=namespace)


@pytest.mark.kubernetes
@pytest.mark.slow
def test_an_ingress_is_applied_owned_and_pruned(client, kube_namespace, operator) -> None:
    ns = kube_namespace
    _create(client, ns, {**BASE, "exposure": {"ingress": INGRESS_SPEC}})
    ingress = wait_for("the Ingress", lambda: _get(client, Ingress, "web", ns))
    uid = client.get(RagIndex, "web", namespace=ns).metadata.uid
    assert [o.uid for o in ingress.metadata.ownerReferences] == [uid]
    assert ingress.spec.tls[0].secretName == "search-tls"  # admitted as rendered
    assert ingress.spec.rules[0].http.paths[0].backend.service.name == "web"
    assert _get(client, Service, "web", ns) is not None
    # Removed from the spec: the operator prunes it; the Service stays.
    client.patch(
        RagIndex, "web", {"spec": {"exposure": {"ingress": None}}}, namespace=ns,
        patch_type=PatchType.MERGE,
    )  # fmt: skip
    wait_for("the Ingress pruned", lambda: _get(client, Ingress, "web", ns) is None)
    assert _get(client, Service, "web", ns) is not None


@pytest.mark.kubernetes
@pytest.mark.slow
def test_an_http_route_without_the_gateway_api_is_refused_naming_the_crd(
    kube_cluster, client, kube_namespace, operator
) -> None:
    ns = kube_namespace
    crds = kube_cluster.kubectl("get", "crd", "-o", "name").stdout
    assert "gateway.networking.k8s.io" not in crds  # the test API server has no Gateway API
    _create(client, ns, {**BASE, "exposure": {"httpRoute": ROUTE_SPEC}})
    refused = wait_for(
        "Reconciled=False", lambda: (c := _reconciled(client, "web", ns)).get("reason") and c
    )
    assert (refused["status"], refused["reason"]) == ("False", "CRDMissing")
    assert "httproutes.gateway.networking.k8s.io" in refused["message"]
    assert "HTTPRoute" in refused["message"]
    # Refused before applying anything: no config, no Service.
    assert _get(client, ConfigMap, "web-config", ns) is None
    assert _get(client, Service, "web", ns) is None
    # Exposed through an Ingress instead, it reconciles.
    client.patch(
        RagIndex, "web", {"spec": {"exposure": {"httpRoute": None, "ingress": {}}}},
        namespace=ns, patch_type=PatchType.MERGE,
    )  # fmt: skip
    wait_for("the Ingress", lambda: _get(client, Ingress, "web", ns))
    applied = wait_for(
        "Reconciled=True", lambda: (c := _reconciled(client, "web", ns))["status"] == "True" and c
    )
    assert applied["reason"] == "Applied"
