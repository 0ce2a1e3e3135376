"""The operator chart: lints, renders least-privilege RBAC and a locked-down Deployment, and
installs into the real test API server (no kubelet: the API objects are what is checked)."""

from __future__ import annotations

import json
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from ragindex.operator import CRD_NAME, render_crd
from ragindex.operator.__main__ import parse_args

pytestmark = pytest.mark.kubernetes

CHART = Path(__file__).resolve().parents[2] / "helm" / "ragindex-operator"
ENVIRONMENTS = ["values.yaml", "values-dev.yaml", "values-prod.yaml"]


def _render(kube_cluster, *args: str) -> dict[tuple[str, str], dict[str, Any]]:
    out = kube_cluster.helm("template", "rio", str(CHART), "--namespace", "ops", *args).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _one(objs: dict[tuple[str, str], dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for (k, _), o in objs.items() if k == kind]
    assert len(found) == 1, f"{kind}: {len(found)} objects"
    return found[0]


@pytest.mark.parametrize("values", ENVIRONMENTS)
def test_lint_passes_for_every_environment(kube_cluster, values: str) -> None:
    proc = kube_cluster.helm("lint", "--strict", str(CHART), "-f", str(CHART / values))
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize(
    "override, words",
    [
        (["--set", "replicaCount=0"], ["replicaCount", "minimum"]),
        (["--set", "image.pullPolicy=Sometimes"], ["pullPolicy"]),
        (["--set", "operator.runtime=local"], ["runtime"]),
        (["--set", "replicaz=2"], ["replicaz"]),
    ],
    ids=["zero-replicas", "bad-pull-policy", "local-runtime", "typo"],
)
def test_values_schema_refuses_bad_values(kube_cluster, override, words) -> None:
    proc = kube_cluster.helm("template", "rio", str(CHART), *override, check=False)
    assert proc.returncode != 0
    for word in words:
        assert word in proc.stderr, proc.stderr


def test_default_render(kube_cluster) -> None:
    objs = _render(kube_cluster)
    assert {k for k, _ in objs} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "CustomResourceDefinition",
    }
    crd = objs[("CustomResourceDefinition", CRD_NAME)]
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # The chart's CRD survives Helm's YAML round trip unchanged.
    assert crd["spec"] == render_crd()["spec"]

    deployment = _one(objs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["port"] == "health"
    assert container["args"][:2] == ["--runtime=cluster", "--all-namespaces"]
    assert not any(a.startswith("--peering") for a in container["args"])
    assert not any(a.startswith("--kuberay-namespace") for a in container["args"])
    assert pod["serviceAccountName"] == _one(objs, "ServiceAccount")["metadata"]["name"]


def test_rbac_is_least_privilege(kube_cluster) -> None:
    objs = _render(kube_cluster)
    rules = objs[("ClusterRole", "rio-ragindex-operator")]["rules"]
    granted = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted == {
        ("ragindex.dev", "ragindexes"),
        ("ragindex.dev", "ragindexes/status"),
        ("ragindex.dev", "ragindexes/finalizers"),
        ("ray.io", "rayservices"),
        ("elasticsearch.k8s.elastic.co", "elasticsearches"),
        ("kafka.strimzi.io", "kafkas"),
        ("kafka.strimzi.io", "kafkanodepools"),
        ("kafka.strimzi.io", "kafkatopics"),
        ("kafka.strimzi.io", "kafkausers"),
        ("networking.k8s.io", "networkpolicies"),
        ("networking.k8s.io", "ingresses"),
        ("gateway.networking.k8s.io", "httproutes"),
        ("", "configmaps"),
        ("", "services"),
        ("", "persistentvolumeclaims"),
        ("", "events"),
        ("events.k8s.io", "events"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("", "namespaces"),
    }
    # Secrets are a ClusterRole of their own, bound by nobody until a namespace's owner does.
    (secrets,) = objs[("ClusterRole", "rio-ragindex-operator-secrets")]["rules"]
    bound = {b["roleRef"]["name"] for (kind, _), b in objs.items() if kind == "ClusterRoleBinding"}
    assert bound == {"rio-ragindex-operator"}
    for rule in [*rules, secrets]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
        if "customresourcedefinitions" in rule["resources"]:
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
        if "secrets" in rule["resources"]:
            # Labels of the Secrets a spec names, by name, and the report credential's Secret
            # made once: no enumeration, no change to an existing Secret.
            assert rule["resources"] == ["secrets"] and rule["verbs"] == ["get", "create"], rule
        if "persistentvolumeclaims" in rule["resources"]:
            # A model's claim checked by name; pruning legacy claims.
            assert set(rule["verbs"]) == {"get", "list", "delete"}, rule


NAMESPACED_RESOURCES = {
    "ragindexes",
    "rayservices",
    "elasticsearches",
    "kafkas",
    "networkpolicies",
    "configmaps",
    "services",
    "secrets",
}


def test_watched_namespaces_get_roles_and_no_cluster_wide_secret_read(kube_cluster) -> None:
    """Listing the namespaces moves every namespaced rule, Secret `get` among them, from the
    ClusterRole into a Role + RoleBinding per namespace; the ClusterRole keeps reads of
    cluster-scoped objects only, and the operator watches exactly those namespaces."""
    out = kube_cluster.helm(
        "template", "rio", str(CHART), "--namespace", "ops",
        "--set", "operator.watchNamespaces={team-a,team-b}", "--set", "replicaCount=2",
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(out) if d]

    def namespaces_of(kind: str) -> set[str]:
        return {d["metadata"]["namespace"] for d in docs if d["kind"] == kind}

    (cluster_role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    cluster_resources = {r for rule in cluster_role["rules"] for r in rule["resources"]}
    assert cluster_resources == {"customresourcedefinitions", "namespaces"}
    for rule in cluster_role["rules"]:
        assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
    assert namespaces_of("Role") == namespaces_of("RoleBinding") == {"team-a", "team-b"}
    for role in (d for d in docs if d["kind"] == "Role"):
        granted = {r for rule in role["rules"] for r in rule["resources"]}
        assert granted >= NAMESPACED_RESOURCES
        (secrets,) = [rule for rule in role["rules"] if "secrets" in rule["resources"]]
        assert secrets["resources"] == ["secrets"] and secrets["verbs"] == ["get", "create"]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--all-namespaces" not in args
    _options, parsed = parse_args(args)
    assert parsed.namespace == ["team-a", "team-b"] and not parsed.all_namespaces
    # Several replicas elect a leader through a KopfPeering in each watched namespace.
    assert namespaces_of("KopfPeering") == {"team-a", "team-b"}
    assert not [d for d in docs if d["kind"] == "ClusterKopfPeering"]


def test_prod_render_enables_peering(kube_cluster) -> None:
    objs = _render(kube_cluster, "-f", str(CHART / "values-prod.yaml"))
    deployment = _one(objs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    peering = _one(objs, "ClusterKopfPeering")["metadata"]["name"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--peering={peering}" in args
    # The chart's arguments are ones the operator's own parser accepts.
    _options, parsed = parse_args(args)
    assert parsed.peering == peering
    pinned = _render(kube_cluster, "--set", "operator.kuberayNamespace=ray-system")
    args = _one(pinned, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    options, _ = parse_args(args)
    assert options.render.kuberay_namespace == "ray-system"
    assert _one(objs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    rules = objs[("ClusterRole", "rio-ragindex-operator")]["rules"]
    groups = {g for rule in rules for g in rule["apiGroups"]}
    assert {"kopf.dev", "coordination.k8s.io"} <= groups


def test_install_creates_the_objects_and_uninstall_keeps_the_crd(kube_cluster) -> None:
    namespace = f"ops-{uuid.uuid4().hex[:6]}"
    release = "rio"
    # The session fixture installed the CRD already; label it so Helm adopts it, as an
    # operator upgrade from a plain `kubectl apply` of crds/ would.
    kube_cluster.kubectl(
        "label", "crd", CRD_NAME, "app.kubernetes.io/managed-by=Helm", "--overwrite"
    )
    kube_cluster.kubectl(
        "annotate",
        "crd",
        CRD_NAME,
        f"meta.helm.sh/release-name={release}",
        f"meta.helm.sh/release-namespace={namespace}",
        "--overwrite",
    )
    kube_cluster.helm(
        "install",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--create-namespace",
        "-f",
        str(CHART / "values-dev.yaml"),
    )
    try:
        deployment = json.loads(
            kube_cluster.kubectl(
                "get", "deployment", "rio-ragindex-operator", "-n", namespace, "-o", "json"
            ).stdout
        )
        assert (
            deployment["spec"]["template"]["spec"]["serviceAccountName"] == "rio-ragindex-operator"
        )
        kube_cluster.kubectl("get", "serviceaccount", "rio-ragindex-operator", "-n", namespace)
        kube_cluster.kubectl("get", "clusterrole,clusterrolebinding", "rio-ragindex-operator")
        # RBAC really grants what the operator needs, and nothing beyond it.
        sa = f"system:serviceaccount:{namespace}:rio-ragindex-operator"
        for verb, resource, allowed in [
            ("patch", "ragindexes.ragindex.dev/status", "yes"),
            ("create", "rayservices.ray.io", "yes"),
            ("delete", "elasticsearches.elasticsearch.k8s.elastic.co", "yes"),
            # Watching every namespace, Secrets only where a RoleBinding allows them.
            ("get", "secrets", "no"),
            ("list", "secrets", "no"),
            ("watch", "secrets", "no"),
            ("create", "secrets", "no"),
            ("patch", "secrets", "no"),
            ("update", "secrets", "no"),
            ("delete", "secrets", "no"),
            ("create", "persistentvolumeclaims", "no"),
            ("delete", "persistentvolumeclaims", "yes"),
            ("get", "persistentvolumeclaims", "yes"),
            ("create", "kafkatopics.kafka.strimzi.io", "yes"),
            ("create", "networkpolicies.networking.k8s.io", "yes"),
            ("delete", "ingresses.networking.k8s.io", "yes"),
            ("create", "pods", "no"),
            ("delete", "customresourcedefinitions", "no"),
        ]:
            proc = kube_cluster.kubectl(
                "auth", "can-i", verb, resource, "--as", sa, "-n", "default", check=False
            )
            assert proc.stdout.strip() == allowed, (verb, resource, proc.stdout, proc.stderr)
        crd = json.loads(kube_cluster.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert crd["metadata"]["labels"]["app.kubernetes.io/instance"] == release
    finally:
        kube_cluster.helm("uninstall", release, "--namespace", namespace)
    gone = kube_cluster.kubectl(
        "get", "deployment", "rio-ragindex-operator", "-n", namespace, check=False
    )
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    # resource-policy keep: the CRD, and every RagIndex with it, outlives the release.
    kube_cluster.kubectl("get", "crd", CRD_NAME)
    kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def test_install_watching_namespaces_reads_secrets_only_there(kube_cluster) -> None:
    suffix = uuid.uuid4().hex[:6]
    namespace, watched, other = f"ops-{suffix}", f"team-{suffix}", f"other-{suffix}"
    for ns in (watched, other):
        kube_cluster.kubectl("create", "namespace", ns)
    kube_cluster.helm(
        "install", "riow", str(CHART), "--namespace", namespace, "--create-namespace",
        "--set", "crds.install=false", "--set", f"operator.watchNamespaces={{{watched}}}",
    )  # fmt: skip
    try:
        sa = f"system:serviceaccount:{namespace}:riow-ragindex-operator"
        for verb, resource, ns, allowed in [
            ("get", "secrets", watched, "yes"),
            ("list", "secrets", watched, "no"),
            ("get", "secrets", other, "no"),
            ("get", "secrets", namespace, "no"),
            ("create", "rayservices.ray.io", watched, "yes"),
            ("create", "rayservices.ray.io", other, "no"),
            ("patch", "ragindexes.ragindex.dev/status", watched, "yes"),
            ("list", "ragindexes.ragindex.dev", other, "no"),
            ("list", "customresourcedefinitions", "", "yes"),
        ]:
            where = ["-n", ns] if ns else []
            proc = kube_cluster.kubectl(
                "auth", "can-i", verb, resource, "--as", sa, *where, check=False
            )
            assert proc.stdout.strip() == allowed, (verb, resource, ns, proc.stdout, proc.stderr)
    finally:
        kube_cluster.helm("uninstall", "riow", "--namespace", namespace)
        for ns in (namespace, watched, other):
            kube_cluster.kubectl("delete", "namespace", ns, "--wait=false")


def test_prod_install_with_peering(kube_cluster) -> None:
    namespace = f"ops-{uuid.uuid4().hex[:6]}"
    kube_cluster.helm(
        "install",
        "riop",
        str(CHART),
        "--namespace",
        namespace,
        "--create-namespace",
        "-f",
        str(CHART / "values-prod.yaml"),
        "--set",
        "crds.install=false",
    )
    try:
        kube_cluster.kubectl("get", "crd", "clusterkopfpeerings.kopf.dev")
        kube_cluster.kubectl("get", "clusterkopfpeering", "riop-ragindex-operator")
        kube_cluster.kubectl(
            "get", "poddisruptionbudget", "riop-ragindex-operator", "-n", namespace
        )
    finally:
        kube_cluster.helm("uninstall", "riop", "--namespace", namespace)
        kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false")


# --- the images the chart and the operator refer to (Docker cannot run here) -------------

DOCKER = CHART.parents[1] / "docker"


@pytest.mark.parametrize("dockerfile", ["operator.Dockerfile", "ray.Dockerfile"])
def test_dockerfiles_copy_every_package_folder(dockerfile: str) -> None:
    """setuptools refuses to build ragindex if a folder named in package-dir is missing."""
    pyproject = tomllib.loads((CHART.parents[1] / "pyproject.toml").read_text())
    folders = set(pyproject["tool"]["setuptools"]["package-dir"].values())
    text = (DOCKER / dockerfile).read_text()
    copied = {line.split()[-2].rstrip("/") for line in text.splitlines() if line.startswith("COPY")}
    assert folders <= copied, folders - copied


def test_operator_image_installs_no_heavy_dependency() -> None:
    text = (DOCKER / "operator.Dockerfile").read_text()
    install = text[text.index("RUN pip install") : text.index("COPY ragindex/")]
    for heavy in ("torch", "faiss", "ray", "sentence-transformers", "FlagEmbedding"):
        assert heavy not in install
    assert "--no-deps" in text and "USER 65532" in text


@pytest.mark.kubernetes
def test_ray_image_defaults_to_the_chart_app_version(kube_cluster) -> None:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]

    def image_flag(*args: str) -> str:
        (container,) = _one(_render(kube_cluster, *args), "Deployment")["spec"]["template"]["spec"][
            "containers"
        ]
        (flag,) = [a for a in container["args"] if a.startswith("--image=")]
        return str(flag)

    assert image_flag() == f"--image=ghcr.io/ragindex/ray:{app_version}"
    assert image_flag("--set", "operator.rayImageRepository=reg.local/ray") == (
        f"--image=reg.local/ray:{app_version}"
    )
    assert image_flag("--set", "operator.rayImage=reg.local/ray:pinned") == (
        "--image=reg.local/ray:pinned"
    )
