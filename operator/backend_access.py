"""How an index's Ray pods reach Elasticsearch and Kafka: TLS and credentials, from the spec.

Pure functions of the spec. Secrets reach the pods as mounted files (the password, API key
and CA) and environment variables that name them (`ragindex.config.ElasticsearchConnection`,
`KafkaConnection`), never as literal values; a user name, which is no secret, may be a value.

- Managed Elasticsearch (ECK): TLS stays on with ECK's own CA (`<es>-es-http-certs-public`);
  the pods log in as a file-realm user whose role reaches only the index's alias and its
  generations' indices (`<es>-ragindex-user`, made once by the operator with a random
  password), never as the `elastic` superuser.
- Managed Kafka (Strimzi): the listener is TLS with SCRAM-SHA-512; the pods log in as the
  index's KafkaUser (its password in the Secret the User Operator writes) and trust the
  cluster CA (`<cluster>-cluster-ca-cert`).
- External ones: the Secrets the spec names (credentials or an API key, and a CA).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from ragindex.config import ElasticsearchConnection, KafkaConnection, RagIndexSpec
from ragindex.generations import lexical_alias
from ragindex.hashing import content_hash
from ragindex.operator.objects import (
    CA_KEY,
    CREDENTIALS_MOUNT,
    ELASTICSEARCH_ROLE,
    ELASTICSEARCH_USER,
    KAFKA_SASL_MECHANISM,
    elasticsearch_ca_secret,
    elasticsearch_name,
    elasticsearch_user_secret,
    kafka_cluster_ca_secret,
    kafka_user_name,
    managed_elasticsearch,
    object_metadata,
)

# Mounted Secret files are readable by the Ray user's group (the pods' fsGroup) only.
SECRET_FILE_MODE = 0o440


@dataclass(frozen=True)
class SecretFile:
    """One key of a Secret, mounted as a file in every Ray container."""

    volume: str
    secret: str
    key: str

    @property
    def path(self) -> str:
        return f"{CREDENTIALS_MOUNT}/{self.volume}/{self.key}"


@dataclass(frozen=True)
class Access:
    """A backend's environment (variables whose values are file paths, names or references)
    and the Secret files the variables name."""

    env: tuple[dict[str, Any], ...] = ()
    files: tuple[SecretFile, ...] = ()


def _value(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def _secret_key(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _file(env_name: str, file: SecretFile) -> dict[str, Any]:
    return _value(env_name, file.path)


def elasticsearch_access(spec: RagIndexSpec, name: str) -> Access:
    """What the pods need to log in to the BM25 leg's Elasticsearch and trust its certificate."""
    es = ElasticsearchConnection.env_name
    lexical = spec.lexical
    if lexical.backend != "elasticsearch":
        return Access()
    env: list[dict[str, Any]] = []
    files: list[SecretFile] = []
    if managed_elasticsearch(spec):
        user, ca = elasticsearch_user_secret(name), elasticsearch_ca_secret(name)
        password = SecretFile("elasticsearch-credentials", user, "password")
        ca_file = SecretFile("elasticsearch-ca", ca, CA_KEY)
        env += [
            _secret_key(es("username"), user, "username"),
            _file(es("password_file"), password),
            _file(es("ca_file"), ca_file),
        ]
        return Access(tuple(env), (password, ca_file))
    if lexical.elasticsearch_credentials_secret:
        secret = lexical.elasticsearch_credentials_secret
        password = SecretFile("elasticsearch-credentials", secret, "password")
        env += [
            _secret_key(es("username"), secret, "username"),
            _file(es("password_file"), password),
        ]
        files.append(password)
    if lexical.elasticsearch_api_key_secret:
        secret = lexical.elasticsearch_api_key_secret
        key = SecretFile("elasticsearch-credentials", secret, "api-key")
        env.append(_file(es("api_key_file"), key))
        files.append(key)
    if lexical.elasticsearch_ca_secret:
        ca_file = SecretFile("elasticsearch-ca", lexical.elasticsearch_ca_secret, CA_KEY)
        env.append(_file(es("ca_file"), ca_file))
        files.append(ca_file)
    return Access(tuple(env), tuple(files))


def kafka_access(spec: RagIndexSpec, name: str) -> Access:
    """What the pods need to log in to the log's Kafka and trust its brokers' certificates
    (the bootstrap address is set beside it, in ray_service)."""
    kafka = KafkaConnection.env_name
    log = spec.log
    if log.mode == "managed":
        password = SecretFile("kafka-credentials", kafka_user_name(name), "password")
        ca_file = SecretFile("kafka-ca", kafka_cluster_ca_secret(name), CA_KEY)
        env = (
            _value(kafka("security_protocol"), "SASL_SSL"),
            _value(kafka("sasl_mechanism"), KAFKA_SASL_MECHANISM),
            _value(kafka("username"), kafka_user_name(name)),
            _file(kafka("password_file"), password),
            _file(kafka("ca_file"), ca_file),
        )
        return Access(env, (password, ca_file))
    if log.mode != "external":
        return Access()
    env_list: list[dict[str, Any]] = []
    files: list[SecretFile] = []
    if log.credentials_secret:
        password = SecretFile("kafka-credentials", log.credentials_secret, "password")
        env_list += [
            _value(kafka("security_protocol"), "SASL_SSL"),
            _value(kafka("sasl_mechanism"), KAFKA_SASL_MECHANISM),
            _secret_key(kafka("username"), log.credentials_secret, "username"),
            _file(kafka("password_file"), password),
        ]
        files.append(password)
    elif log.ca_secret:
        env_list.append(_value(kafka("security_protocol"), "SSL"))
    if log.ca_secret:
        ca_file = SecretFile("kafka-ca", log.ca_secret, CA_KEY)
        env_list.append(_file(kafka("ca_file"), ca_file))
        files.append(ca_file)
    return Access(tuple(env_list), tuple(files))


def secret_volumes(files: Iterable[SecretFile]) -> tuple[list[Any], list[Any]]:
    """One read-only Secret volume per directory, holding only the keys named (the whole
    directory is mounted, never a subPath, so the kubelet follows a rotated Secret)."""
    items: dict[tuple[str, str], list[str]] = {}
    for f in files:
        items.setdefault((f.volume, f.secret), []).append(f.key)
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for (volume, secret), keys in items.items():
        volumes.append(
            {
                "name": volume,
                "secret": {
                    "secretName": secret,
                    "items": [{"key": k, "path": k} for k in keys],
                    "defaultMode": SECRET_FILE_MODE,
                },
            }
        )
        mounts.append(
            {"name": volume, "mountPath": f"{CREDENTIALS_MOUNT}/{volume}", "readOnly": True}
        )
    return volumes, mounts


def elasticsearch_roles_yml(spec: RagIndexSpec, namespace: str, name: str) -> str:
    """ECK's `roles.yml` of the pods' role on the managed Elasticsearch: cluster health and
    index templates, and every index privilege on the index's read alias and its generations'
    indices (`<alias>-<generation>`) only."""
    alias = lexical_alias(spec, namespace, name)
    role = {
        "cluster": ["monitor", "manage_index_templates"],
        "indices": [{"names": [alias, f"{alias}-*"], "privileges": ["all"]}],
    }
    return yaml.safe_dump({ELASTICSEARCH_ROLE: role}, sort_keys=True)


def elasticsearch_roles_secret(spec: RagIndexSpec, namespace: str, name: str) -> str:
    """The roles Secret's name, which carries a hash of its content: the operator may only
    create Secrets, so a changed role (another alias) is a new Secret the Elasticsearch names."""
    roles_yml = elasticsearch_roles_yml(spec, namespace, name)
    return f"{elasticsearch_name(name)}-ragindex-roles-{content_hash(roles_yml)[:8]}"


def render_elasticsearch_roles_secret(
    name: str, namespace: str, spec: RagIndexSpec, generation: str, uid: str | None = None
) -> dict[str, Any]:
    """ECK's roles Secret (key `roles.yml`) of the managed Elasticsearch, immutable."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_metadata(
            elasticsearch_roles_secret(spec, namespace, name), namespace, name, generation, uid
        ),
        "type": "Opaque",
        "immutable": True,
        "stringData": {"roles.yml": elasticsearch_roles_yml(spec, namespace, name)},
    }


def render_elasticsearch_user_secret(
    name: str, namespace: str, password: str, generation: str, uid: str | None = None
) -> dict[str, Any]:
    """ECK's file-realm user of the pods: a `kubernetes.io/basic-auth` Secret whose `roles`
    key names the scoped role. Made once; an existing one keeps its password."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_metadata(
            elasticsearch_user_secret(name), namespace, name, generation, uid
        ),
        "type": "kubernetes.io/basic-auth",
        "stringData": {
            "username": ELASTICSEARCH_USER,
            "password": password,
            "roles": ELASTICSEARCH_ROLE,
        },
    }


def elasticsearch_auth(spec: RagIndexSpec, namespace: str, name: str) -> dict[str, Any]:
    """The managed Elasticsearch's `spec.auth`: the scoped role and the pods' user."""
    return {
        "roles": [{"secretName": elasticsearch_roles_secret(spec, namespace, name)}],
        "fileRealm": [{"secretName": elasticsearch_user_secret(name)}],
    }
