"""What a platform team checks in the operator chart: an overridable securityContext (OpenShift
assigns UIDs), install notes that say what is watched and what to do next, Secrets reachable
only where a namespace allows it, and a README that lists every value."""

from __future__ import annotations

import json
import shlex
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from ragindex.app import docs_site

CHART = Path(__file__).resolve().parents[2] / "helm" / "ragindex-operator"
DEFAULT_POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "fsGroup": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}
DEFAULT_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _pod_spec(kube_cluster, *args: str) -> dict[str, Any]:
    out = kube_cluster.helm(
        "template", "rio", str(CHART), "--namespace", "ops",
        "--show-only", "templates/deployment.yaml", *args,
    ).stdout  # fmt: skip
    return yaml.safe_load(out)["spec"]["template"]["spec"]


# --- securityContext ---------------------------------------------------------------------


@pytest.mark.kubernetes
def test_security_context_defaults(kube_cluster) -> None:
    pod = _pod_spec(kube_cluster)
    assert pod["securityContext"] == DEFAULT_POD_SECURITY
    assert pod["containers"][0]["securityContext"] == DEFAULT_CONTAINER_SECURITY


@pytest.mark.kubernetes
def test_security_context_without_fixed_ids_for_openshift(kube_cluster, tmp_path: Path) -> None:
    """Null drops a key, from --set or from a values file alike; the rest stays locked down."""
    nulls = ("runAsUser", "runAsGroup", "fsGroup")
    by_set = _pod_spec(
        kube_cluster, *(a for key in nulls for a in ("--set", f"podSecurityContext.{key}=null"))
    )
    openshift = tmp_path / "openshift.yaml"
    openshift.write_text(yaml.safe_dump({"podSecurityContext": dict.fromkeys(nulls)}))
    by_file = _pod_spec(kube_cluster, "-f", str(openshift))
    for pod in (by_set, by_file):
        assert pod["securityContext"] == {
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        assert pod["containers"][0]["securityContext"] == DEFAULT_CONTAINER_SECURITY
    only_uid = _pod_spec(kube_cluster, "--set", "podSecurityContext.runAsUser=null")
    assert "runAsUser" not in only_uid["securityContext"]
    assert only_uid["securityContext"]["fsGroup"] == 65532


@pytest.mark.kubernetes
def test_security_context_custom_values(kube_cluster) -> None:
    pod = _pod_spec(
        kube_cluster,
        "--set", "podSecurityContext.runAsUser=1001",
        "--set", "podSecurityContext.supplementalGroups={2000}",
        "--set", "securityContext.readOnlyRootFilesystem=false",
    )  # fmt: skip
    assert pod["securityContext"] == {
        **DEFAULT_POD_SECURITY,
        "runAsUser": 1001,
        "supplementalGroups": [2000],
    }
    assert pod["containers"][0]["securityContext"] == {
        **DEFAULT_CONTAINER_SECURITY,
        "readOnlyRootFilesystem": False,
    }


@pytest.mark.kubernetes
def test_security_context_schema_refuses_a_bad_uid(kube_cluster) -> None:
    proc = kube_cluster.helm(
        "template", "rio", str(CHART), "--set", "podSecurityContext.runAsUser=-1", check=False
    )
    assert proc.returncode != 0 and "runAsUser" in proc.stderr, proc.stderr


@pytest.mark.kubernetes
def test_api_server_accepts_the_deployment_without_fixed_ids(kube_cluster) -> None:
    namespace = f"ops-{uuid.uuid4().hex[:6]}"
    kube_cluster.helm(
        "install", "rioo", str(CHART), "--namespace", namespace, "--create-namespace",
        "--set", "crds.install=false", "--set", "podSecurityContext.runAsUser=null",
        "--set", "podSecurityContext.runAsGroup=null", "--set", "podSecurityContext.fsGroup=null",
    )  # fmt: skip
    try:
        stored = json.loads(
            kube_cluster.kubectl(
                "get", "deployment", "rioo-ragindex-operator", "-n", namespace, "-o", "json"
            ).stdout
        )
        pod = stored["spec"]["template"]["spec"]
        assert pod["securityContext"] == {
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
    finally:
        kube_cluster.helm("uninstall", "rioo", "--namespace", namespace)
        kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false")


# --- NOTES.txt ---------------------------------------------------------------------------


def _notes(kube_cluster, release: str, namespace: str, *args: str) -> str:
    """The install notes, as `helm install` prints them (a dry run renders them too)."""
    out = kube_cluster.helm(
        "install", release, str(CHART), "--namespace", namespace, "--dry-run", "-o", "json",
        "--set", "crds.install=false", *args,
    ).stdout  # fmt: skip
    return str(json.loads(out)["info"]["notes"])


@pytest.mark.kubernetes
def test_notes_name_the_watched_namespaces(kube_cluster) -> None:
    notes = _notes(kube_cluster, "rio", "ops", "--set", "operator.watchNamespaces={team-a,team-b}")
    assert "in the namespaces team-a, team-b\nonly" in notes, notes
    assert "every namespace" not in notes
    assert "get and create Secrets in team-a, team-b only" in notes
    assert "rolebinding" not in notes
    assert "kubectl -n team-a apply -f examples/ragindex.yaml" in notes
    one = _notes(kube_cluster, "rio", "ops", "--set", "operator.watchNamespaces={team-a}")
    assert "in the namespace team-a\nonly" in one, one


@pytest.mark.kubernetes
def test_notes_for_every_namespace(kube_cluster) -> None:
    notes = _notes(kube_cluster, "rio", "ops")
    assert "in every namespace into KubeRay\nRayServices" in notes, notes
    assert "may not use Secrets in any namespace yet" in notes
    assert (
        "kubectl -n <namespace> create rolebinding rio-ragindex-operator-secrets \\\n"
        "    --clusterrole=rio-ragindex-operator-secrets"
        " --serviceaccount=ops:rio-ragindex-operator"
    ) in notes
    wide = _notes(kube_cluster, "rio", "ops", "--set", "rbac.clusterWideSecrets=true")
    assert "get and create Secrets in every namespace" in wide, wide
    assert "rolebinding" not in wide
    theirs = _notes(kube_cluster, "rio", "ops", "--set", "rbac.create=false")
    assert "RBAC is yours" in theirs and "rolebinding" not in theirs


def _rolebinding_command(notes: str) -> list[str]:
    """The `kubectl ... create rolebinding` the notes tell a namespace's owner to run."""
    lines = notes.splitlines()
    start = next(i for i, line in enumerate(lines) if "create rolebinding" in line)
    command = lines[start].rstrip("\\") + lines[start + 1]
    return shlex.split(command)


# --- Secrets: namespaced by default --------------------------------------------------------


def _can_i(kube_cluster, sa: str, verb: str, resource: str, namespace: str) -> str:
    proc = kube_cluster.kubectl(
        "auth", "can-i", verb, resource, "--as", sa, "-n", namespace, check=False
    )
    return proc.stdout.strip()


@pytest.mark.kubernetes
def test_every_namespace_install_reads_secrets_only_where_bound(kube_cluster) -> None:
    """Watching every namespace, the operator reconciles everywhere but reads Secrets in no
    namespace until its owner runs the notes' RoleBinding command; cluster-wide only when
    rbac.clusterWideSecrets asks."""
    suffix = uuid.uuid4().hex[:6]
    namespace, team, other = f"ops-{suffix}", f"team-{suffix}", f"other-{suffix}"
    for ns in (team, other):
        kube_cluster.kubectl("create", "namespace", ns)
    notes = kube_cluster.helm(
        "install", "rios", str(CHART), "--namespace", namespace, "--create-namespace",
        "--set", "crds.install=false",
    ).stdout  # fmt: skip
    sa = f"system:serviceaccount:{namespace}:rios-ragindex-operator"
    try:
        for ns in (team, other):
            assert _can_i(kube_cluster, sa, "get", "secrets", ns) == "no", ns
            assert _can_i(kube_cluster, sa, "create", "rayservices.ray.io", ns) == "yes", ns
        kubectl, *args = _rolebinding_command(notes.replace("<namespace>", team))
        assert kubectl == "kubectl"
        kube_cluster.kubectl(*args)
        for verb, ns, allowed in [
            ("get", team, "yes"),
            ("create", team, "yes"),
            ("list", team, "no"),
            ("update", team, "no"),
            ("get", other, "no"),
            ("get", namespace, "no"),
        ]:
            assert _can_i(kube_cluster, sa, verb, "secrets", ns) == allowed, (verb, ns)
        kube_cluster.helm(
            "upgrade", "rios", str(CHART), "--namespace", namespace,
            "--set", "crds.install=false", "--set", "rbac.clusterWideSecrets=true",
        )  # fmt: skip
        assert _can_i(kube_cluster, sa, "get", "secrets", other) == "yes"
        assert _can_i(kube_cluster, sa, "list", "secrets", other) == "no"
    finally:
        kube_cluster.helm("uninstall", "rios", "--namespace", namespace)
        for ns in (namespace, team, other):
            kube_cluster.kubectl("delete", "namespace", ns, "--wait=false")


@pytest.mark.kubernetes
def test_cluster_wide_secrets_with_listed_namespaces_is_refused(kube_cluster) -> None:
    proc = kube_cluster.helm(
        "template", "rio", str(CHART),
        "--set", "operator.watchNamespaces={team-a}", "--set", "rbac.clusterWideSecrets=true",
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "rbac.clusterWideSecrets is for operator.watchNamespaces empty" in proc.stderr


# --- the chart README ------------------------------------------------------------------------


def _properties(node: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property of a JSON schema, nested ones and those of array items included."""
    for key, child in node.get("properties", {}).items():
        where = f"{path}.{key}" if path else key
        yield where, child
        yield from _properties(child, where)
        yield from _properties(child.get("items", {}), f"{where}[]")


def test_every_value_in_the_schema_is_described() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    undescribed = [where for where, node in _properties(schema) if not node.get("description")]
    assert not undescribed, f"values.schema.json properties without a description: {undescribed}"


def test_chart_readme_lists_every_value_and_is_current() -> None:
    readme = (CHART / "README.md").read_text()
    assert readme == docs_site.chart_readme(), "stale chart README: run scripts/gen_docs.py"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    for where, node in _properties(schema):
        if "[]" in where or (node.get("type") == "object" and "properties" in node):
            continue  # listed through its fields
        (row,) = [line for line in readme.splitlines() if line.startswith(f"| `{where}` |")]
        assert node["description"].split()[0] in row, row
        default: Any = values
        for key in where.split("."):
            default = default.get(key) if isinstance(default, dict) else None
        if default is not None:
            assert f"`{json.dumps(default)}`" in row or f'`"{default}"`' in row, row
