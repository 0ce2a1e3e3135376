"""TLS and credentials of the backends, rendered from the spec (pure: no cluster needed).

The pods' environment is also read back through the app's own connection settings
(`ElasticsearchConnection.from_env`, `KafkaConnection.from_env`), so what the operator renders
is what the app accepts."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from ragindex.config import ElasticsearchConnection, KafkaConnection, RagIndexSpec
from ragindex.generations import lexical_alias
from ragindex.operator.backend_access import (
    elasticsearch_roles_secret,
    render_elasticsearch_roles_secret,
    render_elasticsearch_user_secret,
)
from ragindex.operator.managed_log import index_topic_prefix
from ragindex.operator.render import named_secrets, render

from .test_operator_render import by_kind, one, pods, serve_config, spec_of

MANAGED = {
    "lexical": {"backend": "elasticsearch"},
    "log": {"mode": "managed"},
}


def containers(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for t in pods(objects) for c in t["spec"]["containers"]]


def env_values(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def app_environ(container: dict[str, Any]) -> dict[str, str]:
    """The environment the app would see, a Secret reference standing for its value."""
    return {
        name: value if isinstance(value, str) else f"<{value['secretKeyRef']['key']}>"
        for name, value in env_values(container).items()
    }


def mounted_files(template: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Path of every mounted Secret key -> (Secret, key), from the pod's volumes and mounts."""
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    found: dict[str, tuple[str, str]] = {}
    for container in template["spec"]["containers"]:
        for mount in container["volumeMounts"]:
            secret = volumes[mount["name"]].get("secret")
            if secret is None or "items" not in secret:
                continue
            assert mount["readOnly"] and "subPath" not in mount, mount
            for item in secret["items"]:
                found[f"{mount['mountPath']}/{item['path']}"] = (secret["secretName"], item["key"])
    return found


def test_managed_elasticsearch_keeps_tls_and_no_pod_gets_the_elastic_user() -> None:
    spec = spec_of(**MANAGED)
    objects = render("idx", "ns", spec, uid="u")
    es = one(objects, "Elasticsearch")["spec"]
    assert "http" not in es  # ECK's self-signed TLS stays on
    assert es["auth"] == {
        "roles": [{"secretName": elasticsearch_roles_secret(spec, "ns", "idx")}],
        "fileRealm": [{"secretName": "idx-es-ragindex-user"}],
    }
    url = serve_config(objects)["applications"][0]["args"]["spec"]["lexical"]["elasticsearchUrl"]
    assert url == "https://idx-es-es-http.ns.svc:9200"
    rayservice = yaml.safe_dump(one(objects, "RayService"))
    assert "es-elastic-user" not in rayservice and "'elastic'" not in rayservice
    for template in pods(objects):
        files = mounted_files(template)
        for container in template["spec"]["containers"]:
            env = app_environ(container)
            conn = ElasticsearchConnection.from_env(env)
            assert conn.username == "<username>" and conn.password is None
            assert files[conn.password_file or ""] == ("idx-es-ragindex-user", "password")
            assert files[conn.ca_file or ""] == ("idx-es-es-http-certs-public", "ca.crt")
            ref = env_values(container)["RAGINDEX_ES_USERNAME"]["secretKeyRef"]
            assert ref == {"name": "idx-es-ragindex-user", "key": "username"}


def test_the_pods_role_reaches_only_the_index_alias_and_its_generations() -> None:
    spec = spec_of(**MANAGED)
    alias = lexical_alias(spec, "ns", "idx")
    roles = render_elasticsearch_roles_secret("idx", "ns", spec, "g1", uid="u")
    assert roles["immutable"] is True and roles["metadata"]["ownerReferences"][0]["uid"] == "u"
    (role,) = yaml.safe_load(roles["stringData"]["roles.yml"]).values()
    assert role == {
        "cluster": ["monitor", "manage_index_templates"],
        "indices": [{"names": [alias, f"{alias}-*"], "privileges": ["all"]}],
    }
    # The Secret may only be created, never updated: another alias is another Secret.
    other = spec_of(
        lexical={"backend": "elasticsearch", "elasticsearchAlias": "docs"}, log={"mode": "managed"}
    )
    assert elasticsearch_roles_secret(other, "ns", "idx") != roles["metadata"]["name"]
    user = render_elasticsearch_user_secret("idx", "ns", "s3cret", "g1", uid="u")
    assert user["type"] == "kubernetes.io/basic-auth"  # ECK's file-realm form
    assert user["metadata"]["name"] == "idx-es-ragindex-user"
    assert user["stringData"]["roles"] in yaml.safe_load(roles["stringData"]["roles.yml"])
    assert user["stringData"]["password"] == "s3cret"


def test_managed_kafka_is_tls_and_scram_through_a_kafka_user_with_acls() -> None:
    spec = spec_of(**MANAGED)
    objects = render("idx", "ns", spec, uid="u")
    kafka = one(objects, "Kafka")["spec"]["kafka"]
    (listener,) = kafka["listeners"]
    assert listener["tls"] is True and listener["authentication"] == {"type": "scram-sha-512"}
    assert kafka["authorization"] == {"type": "simple"}
    user = one(objects, "KafkaUser")
    assert user["metadata"]["name"] == "idx-log-ray"
    assert user["metadata"]["labels"]["strimzi.io/cluster"] == "idx-log"
    assert user["metadata"]["ownerReferences"][0]["uid"] == "u"
    assert user["spec"]["authentication"] == {"type": "scram-sha-512"}
    acls = user["spec"]["authorization"]["acls"]
    topic_acl = next(a for a in acls if a["resource"]["type"] == "topic")
    prefix = index_topic_prefix("ns", "idx")
    assert topic_acl["resource"] == {"type": "topic", "name": prefix, "patternType": "prefix"}
    # Every topic the index has is under that prefix; no other topic is granted.
    assert all(t["spec"]["topicName"].startswith(prefix) for t in by_kind(objects, "KafkaTopic"))
    assert [a for a in acls if a["resource"]["type"] == "topic"] == [topic_acl]
    groups = {a["resource"]["name"] for a in acls if a["resource"]["type"] == "group"}
    assert "ingest." in groups  # the generations' ingest groups, ingest.<generation>
    for template in pods(objects):
        files = mounted_files(template)
        for container in template["spec"]["containers"]:
            env = app_environ(container)
            conn = KafkaConnection.from_env(env)
            assert (conn.protocol, conn.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
            assert conn.username == "idx-log-ray" and conn.password is None
            assert files[conn.password_file or ""] == ("idx-log-ray", "password")
            assert files[conn.ca_file or ""] == ("idx-log-cluster-ca-cert", "ca.crt")
            assert env["RAGINDEX_KAFKA_BOOTSTRAP_SERVERS"] == "idx-log-kafka-bootstrap.ns.svc:9093"


EXTERNAL_ES = {
    "backend": "elasticsearch",
    "elasticsearchUrl": "https://es.search:9200",
    "elasticsearchCaSecret": "es-ca",
}


@pytest.mark.parametrize(
    "credentials, expected",
    [
        ({"elasticsearchCredentialsSecret": "es-user"}, ("es-user", "password")),
        ({"elasticsearchApiKeySecret": "es-key"}, ("es-key", "api-key")),
    ],
)
def test_external_elasticsearch_credentials_and_ca_are_mounted_files(
    credentials: dict[str, str], expected: tuple[str, str]
) -> None:
    spec = spec_of(lexical=EXTERNAL_ES | credentials)
    assert set(named_secrets(spec)) >= {"es-ca", expected[0]}  # each needs the consent label
    objects = render("idx", "ns", spec)
    assert by_kind(objects, "Elasticsearch") == []
    for template in pods(objects):
        files = mounted_files(template)
        (container,) = template["spec"]["containers"]
        conn = ElasticsearchConnection.from_env(app_environ(container))
        secret_file = conn.password_file if conn.username else conn.api_key_file
        assert files[secret_file or ""] == expected
        assert files[conn.ca_file or ""] == ("es-ca", "ca.crt")
        assert conn.password is None and conn.api_key is None  # never a literal value


def test_external_kafka_ca_and_credentials() -> None:
    both = spec_of(
        log={
            "mode": "external",
            "bootstrapServers": "k1:9093",
            "credentialsSecret": "kafka-user",
            "caSecret": "kafka-ca",
        }
    )
    only_ca = spec_of(log={"mode": "external", "bootstrapServers": "k1:9093", "caSecret": "kca"})
    plain = spec_of(log={"mode": "external", "bootstrapServers": "k1:9092"})
    assert "kafka-ca" in named_secrets(both)
    for spec, protocol in ((both, "SASL_SSL"), (only_ca, "SSL"), (plain, "PLAINTEXT")):
        objects = render("idx", "ns", spec)
        template = pods(objects)[0]
        files = mounted_files(template)
        conn = KafkaConnection.from_env(app_environ(template["spec"]["containers"][0]))
        assert conn.protocol == protocol
        if spec.log.ca_secret:
            assert files[conn.ca_file or ""] == (spec.log.ca_secret, "ca.crt")
        else:
            assert conn.ca_file is None and files == {}
    conn = KafkaConnection.from_env(app_environ(containers(render("idx", "ns", both))[0]))
    assert conn.username == "<username>" and conn.password_file is not None


@pytest.mark.parametrize(
    "fields, named",
    [
        (
            {"lexical": {"backend": "elasticsearch", "elasticsearchCaSecret": "c"}},
            "elasticsearchCaSecret",
        ),
        (
            {"lexical": {"backend": "elasticsearch", "elasticsearchApiKeySecret": "k"}},
            "elasticsearchApiKeySecret",
        ),
        (
            {"lexical": EXTERNAL_ES | {"elasticsearchUrl": "http://es:9200"}},
            "elasticsearchCaSecret needs an https://",
        ),
        (
            {
                "lexical": EXTERNAL_ES
                | {"elasticsearchCredentialsSecret": "u", "elasticsearchApiKeySecret": "k"}
            },
            "exclusive",
        ),
        ({"log": {"mode": "managed", "caSecret": "c"}}, "log.caSecret"),
    ],
)
def test_secret_fields_where_they_do_not_apply_are_refused_naming_the_field(
    fields: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValidationError, match=named):
        RagIndexSpec.model_validate({"log": {"mode": "managed"}, "authSecret": "t"} | fields)
