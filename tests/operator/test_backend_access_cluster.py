"""TLS and credentials of the backends, on the real API server with the operator in-process.

The harness has the vendored ECK and Strimzi CRDs but none of their controllers, so what is
checked is what the operator makes: the Secrets it creates (owned, kept across reconciles),
the KafkaUser, and the Ray pods' environment and mounts as the API server stored them.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret

from ragindex.config import RagIndexSpec
from ragindex.generations import index_generation
from ragindex.operator.apply import Elasticsearch, KafkaUser, RayService
from ragindex.operator.backend_access import elasticsearch_roles_secret
from ragindex.operator.objects import ray_service_name
from ragindex.operator.ownership import SECRET_LABEL

from . import test_operator_cluster as cluster
from .test_operator_cluster import (
    CLUSTER,
    condition,
    create_index,
    get_or_none,
    patch_spec,
    plain,
    served_spec,
    status_of,
    token_secret_for,
    wait_for,
)

# The cluster tests' fixtures (pytest finds them by name here): the operator in-process and
# a client of the real API server.
client = cluster.client
operator = cluster.operator
reports = cluster.reports

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow]


def ray_containers(ray_service: Any) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) of every Ray group of a RayService."""
    cluster = ray_service["spec"]["rayClusterConfig"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    return [(g["template"]["spec"], c) for g in groups for c in g["template"]["spec"]["containers"]]


def secret_files(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Mounted path -> (Secret, key) of every Secret key the container sees as a file."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    return {
        f"{m['mountPath']}/{item['path']}": (secret["secretName"], item["key"])
        for m in container["volumeMounts"]
        if (secret := volumes[m["name"]].get("secret")) and m.get("readOnly")
        for item in secret.get("items") or []
    }


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def labelled_secret(client: Client, ns: str, index: str, name: str, data: dict[str, str]) -> None:
    meta = ObjectMeta(name=name, namespace=ns, labels={SECRET_LABEL: index})
    client.create(Secret(metadata=meta, stringData=data), namespace=ns)


def test_managed_backends_get_a_scoped_user_tls_and_mounted_secrets(
    client: Client, kube_namespace: str, operator: Any
) -> None:
    ns = kube_namespace
    spec = {**CLUSTER, "lexical": {"backend": "elasticsearch"}, "authSecret": "sec-tokens"}
    token_secret_for(client, ns, "sec", "sec-tokens")
    uid = create_index(client, ns, "sec", spec).metadata.uid
    parsed = RagIndexSpec.model_validate(spec)
    rs_name = ray_service_name("sec", index_generation(parsed))
    rs = plain(wait_for("RayService", lambda: get_or_none(client, RayService, rs_name, ns)))

    # The Secrets the operator made, owned by the RagIndex, and the Elasticsearch naming them.
    roles_name = elasticsearch_roles_secret(parsed, ns, "sec")
    user = plain(client.get(Secret, "sec-es-ragindex-user", namespace=ns))
    roles = plain(client.get(Secret, roles_name, namespace=ns))
    kafka_user = plain(client.get(KafkaUser, "sec-log-ray", namespace=ns))
    for owned in (user, roles, kafka_user):
        (owner,) = owned["metadata"]["ownerReferences"]
        assert (owner["uid"], owner["kind"], owner["controller"]) == (uid, "RagIndex", True)
    assert user["type"] == "kubernetes.io/basic-auth"
    password = base64.b64decode(user["data"]["password"]).decode()
    assert len(password) >= 24
    assert base64.b64decode(user["data"]["username"]).decode() == "ragindex"
    assert roles["immutable"] is True
    es = plain(client.get(Elasticsearch, "sec-es", namespace=ns))["spec"]
    assert es["auth"]["fileRealm"] == [{"secretName": "sec-es-ragindex-user"}]
    assert es["auth"]["roles"] == [{"secretName": roles_name}]
    assert "http" not in es  # ECK's TLS stays on
    assert kafka_user["spec"]["authentication"] == {"type": "scram-sha-512"}
    assert kafka_user["metadata"]["labels"]["strimzi.io/cluster"] == "sec-log"

    # No `elastic` password in any Ray container; the password and CAs arrive as files.
    assert "es-elastic-user" not in yaml.safe_dump(rs)
    for pod, container in ray_containers(rs):
        env, files = env_of(container), secret_files(pod, container)
        assert "RAGINDEX_ES_PASSWORD" not in env and "RAGINDEX_KAFKA_PASSWORD" not in env
        assert files[env["RAGINDEX_ES_PASSWORD_FILE"]] == ("sec-es-ragindex-user", "password")
        assert files[env["RAGINDEX_ES_CA_FILE"]] == ("sec-es-es-http-certs-public", "ca.crt")
        assert files[env["RAGINDEX_KAFKA_PASSWORD_FILE"]] == ("sec-log-ray", "password")
        assert files[env["RAGINDEX_KAFKA_CA_FILE"]] == ("sec-log-cluster-ca-cert", "ca.crt")
        assert env["RAGINDEX_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
        assert env["RAGINDEX_KAFKA_BOOTSTRAP_SERVERS"] == f"sec-log-kafka-bootstrap.{ns}.svc:9093"

    # A second reconcile (a serve change) keeps the password Secret exactly as it was.
    patch_spec(client, ns, "sec", {"fusion": {"topK": 5}})
    wait_for(
        "serveConfigV2 with topK 5",
        lambda: served_spec(client.get(RayService, rs_name, namespace=ns))["fusion"]["topK"] == 5,
    )
    again = plain(client.get(Secret, "sec-es-ragindex-user", namespace=ns))
    assert again["metadata"]["resourceVersion"] == user["metadata"]["resourceVersion"]
    assert again["data"] == user["data"]


def test_a_foreign_secret_holding_the_user_name_is_not_taken_over(
    client: Client, kube_namespace: str, operator: Any
) -> None:
    ns = kube_namespace
    meta = ObjectMeta(name="held-es-ragindex-user", namespace=ns)
    client.create(Secret(metadata=meta, stringData={"password": "theirs"}), namespace=ns)
    token_secret_for(client, ns, "held", "held-tokens")
    spec = {**CLUSTER, "lexical": {"backend": "elasticsearch"}, "authSecret": "held-tokens"}
    create_index(client, ns, "held", spec)
    status = wait_for(
        "NameConflict",
        lambda: (
            condition(s := status_of(client, "held", ns), "Reconciled").get("reason")
            == "NameConflict"
            and s
        ),
    )
    assert (
        f"Secret {ns}/held-es-ragindex-user already exists"
        in (condition(status, "Reconciled")["message"])
    )
    theirs = plain(client.get(Secret, "held-es-ragindex-user", namespace=ns))
    assert base64.b64decode(theirs["data"]["password"]).decode() == "theirs"
    assert "ownerReferences" not in theirs["metadata"]
    assert get_or_none(client, Elasticsearch, "held-es", ns) is None  # nothing applied


def test_external_backends_mount_the_named_secrets_once_labelled(
    client: Client, kube_namespace: str, operator: Any
) -> None:
    ns = kube_namespace
    token_secret_for(client, ns, "ext", "ext-tokens")
    labelled_secret(client, ns, "ext", "es-key", {"api-key": "aWQ6a2V5"})
    labelled_secret(client, ns, "ext", "es-ca", {"ca.crt": "-----BEGIN CERTIFICATE-----"})
    labelled_secret(client, ns, "ext", "kafka-user", {"username": "u", "password": "p"})
    # Not labelled for the index: the operator refuses to mount it.
    client.create(
        Secret(metadata=ObjectMeta(name="kafka-ca", namespace=ns), stringData={"ca.crt": "x"}),
        namespace=ns,
    )
    spec = {
        "authSecret": "ext-tokens",
        "lexical": {
            "backend": "elasticsearch",
            "elasticsearchUrl": "https://es.search:9200",
            "elasticsearchApiKeySecret": "es-key",
            "elasticsearchCaSecret": "es-ca",
        },
        "log": {
            "mode": "external",
            "bootstrapServers": "kafka.streams:9093",
            "credentialsSecret": "kafka-user",
            "caSecret": "kafka-ca",
        },
    }
    create_index(client, ns, "ext", spec)
    status = wait_for(
        "SecretRefused",
        lambda: (
            condition(s := status_of(client, "ext", ns), "Reconciled").get("reason")
            == "SecretRefused"
            and s
        ),
    )
    assert (
        f"Secret kafka-ca lacks the label {SECRET_LABEL}=ext"
        in (condition(status, "Reconciled")["message"])
    )

    client.patch(Secret, "kafka-ca", {"metadata": {"labels": {SECRET_LABEL: "ext"}}}, namespace=ns)
    rs_name = ray_service_name("ext", index_generation(RagIndexSpec.model_validate(spec)))
    rs = plain(wait_for("RayService", lambda: get_or_none(client, RayService, rs_name, ns), 90))
    for pod, container in ray_containers(rs):
        env, files = env_of(container), secret_files(pod, container)
        assert files[env["RAGINDEX_ES_API_KEY_FILE"]] == ("es-key", "api-key")
        assert files[env["RAGINDEX_ES_CA_FILE"]] == ("es-ca", "ca.crt")
        assert files[env["RAGINDEX_KAFKA_PASSWORD_FILE"]] == ("kafka-user", "password")
        assert files[env["RAGINDEX_KAFKA_CA_FILE"]] == ("kafka-ca", "ca.crt")
        assert env["RAGINDEX_KAFKA_USERNAME"] == {
            "secretKeyRef": {"name": "kafka-user", "key": "username"}
        }
    # The operator makes no Secret for an external Elasticsearch.
    assert get_or_none(client, Secret, "ext-es-ragindex-user", ns) is None
