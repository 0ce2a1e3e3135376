"""A real Kubernetes control plane for tests, envtest style: etcd + kube-apiserver +
kube-controller-manager on loopback, no kubelet (pods never run; API objects, admission, CEL,
server-side apply and garbage collection are all real).

Fixtures:
- `kube_cluster` (session): the running control plane with the vendored KubeRay/ECK CRDs and our
  RagIndex CRD installed; `KUBECONFIG` points at it for the session (kopf, lightkube).
- `kube_namespace` (function): a fresh namespace, deleted afterwards.

Binaries come from `scripts/build_k8s.sh` (CI runs it first); when missing, the fixture runs it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from ragindex.lexical.es_server import free_port

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build_k8s.sh"
THIRD_PARTY_CRDS = (REPO / ".." / "shared" / "third_party" / "crds").resolve()
RAGINDEX_CRD = REPO / "crds" / "ragindex.dev_ragindexes.yaml"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "helm")
ADMIN_USER = "ragindex-test-admin"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 10.0


@dataclass
class KubeCluster:
    """Handle on the test control plane: where it is, how to authenticate, how to drive it."""

    kubeconfig: Path
    server: str
    token: str
    ca_file: Path
    bin_dir: Path
    workdir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """Environment for a CLI aimed at this cluster only (never the user's own kubeconfig)."""
        env = dict(os.environ)
        env.update(
            KUBECONFIG=str(self.kubeconfig),
            HELM_CACHE_HOME=str(self.workdir / "helm" / "cache"),
            HELM_CONFIG_HOME=str(self.workdir / "helm" / "config"),
            HELM_DATA_HOME=str(self.workdir / "helm" / "data"),
            PATH=f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}",
        )
        return env

    def run(
        self,
        tool: str,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl/helm (or another built tool) with this cluster's kubeconfig."""
        if tool not in BINARIES:
            raise ValueError(f"unknown tool {tool!r}; expected one of {BINARIES}")
        proc = subprocess.run(
            [str(self.bin_dir / tool), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{tool} {' '.join(args)} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc

    def kubectl(self, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        return self.run("kubectl", *args, **kwargs)  # type: ignore[arg-type]

    def helm(self, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        return self.run("helm", *args, **kwargs)  # type: ignore[arg-type]


def bin_dir() -> Path:
    """Where build_k8s.sh puts the binaries (the script owns the pinned versions)."""
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-bin-dir"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def ensure_binaries() -> Path:
    """The bin dir with every binary present, building them when missing (slow, once)."""
    directory = bin_dir()
    if all((directory / b).is_file() for b in BINARIES):
        return directory
    log = directory.parent / "build.log"
    directory.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as fh:
        rc = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=fh, stderr=fh, check=False)
    missing = [b for b in BINARIES if not (directory / b).is_file()]
    if rc.returncode != 0 or missing:
        pytest.fail(
            f"scripts/build_k8s.sh failed (rc {rc.returncode}, missing {missing}); see {log}"
        )
    return directory


def _write_service_account_keys(directory: Path) -> tuple[Path, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = directory / "sa.key"
    public = directory / "sa.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    private.chmod(0o600)
    return private, public


def _kubeconfig(path: Path, server: str, ca_file: Path, token: str) -> None:
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: ragindex-test
  cluster:
    server: {server}
    certificate-authority: {ca_file}
users:
- name: {ADMIN_USER}
  user:
    token: {token}
contexts:
- name: ragindex-test
  context:
    cluster: ragindex-test
    user: {ADMIN_USER}
    namespace: default
current-context: ragindex-test
"""
    )
    path.chmod(0o600)


def _start(name: str, argv: Sequence[str], workdir: Path) -> subprocess.Popen[bytes]:
    """Start one component in its own process group, logging to workdir/<name>.log."""
    log = (workdir / f"{name}.log").open("wb")
    env = dict(os.environ, GOMAXPROCS="2")
    return subprocess.Popen(
        list(argv), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
    )


def _log_tail(workdir: Path, name: str, lines: int = 40) -> str:
    path = workdir / f"{name}.log"
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, wait a bounded time, then SIGKILL."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_TIMEOUT_S)


def _wait_ready(cluster: KubeCluster, deadline: float) -> None:
    """Poll /readyz until the API server is ready, failing fast if a component died."""
    last = "no answer"
    with httpx.Client(verify=False, timeout=2.0) as client:
        while time.monotonic() < deadline:
            for name, proc in cluster.processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {proc.returncode}:\n{_log_tail(cluster.workdir, name)}"
                    )
            with contextlib.suppress(httpx.HTTPError):
                r = client.get(
                    f"{cluster.server}/readyz",
                    headers={"Authorization": f"Bearer {cluster.token}"},
                )
                if r.status_code == 200:
                    return
                last = f"{r.status_code}: {r.text[-500:]}"
            time.sleep(0.25)
    raise RuntimeError(f"kube-apiserver not ready in {START_TIMEOUT_S}s: {last}")


def start_control_plane(workdir: Path) -> KubeCluster:
    """Start etcd, kube-apiserver and kube-controller-manager; returns once /readyz is 200."""
    bins = ensure_binaries()
    token = secrets.token_hex(24)
    cert_dir = workdir / "certs"
    cert_dir.mkdir(parents=True)
    sa_key, sa_pub = _write_service_account_keys(cert_dir)
    tokens = workdir / "tokens.csv"
    tokens.write_text(f'{token},{ADMIN_USER},{uuid.uuid4()},"system:masters"\n')
    tokens.chmod(0o600)
    etcd_port, etcd_peer, api_port = free_port(), free_port(), free_port()
    server = f"https://127.0.0.1:{api_port}"
    cluster = KubeCluster(
        kubeconfig=workdir / "kubeconfig",
        server=server,
        token=token,
        # kube-apiserver writes a self-signed serving cert (with its CA) here for 127.0.0.1.
        ca_file=cert_dir / "apiserver.crt",
        bin_dir=bins,
        workdir=workdir,
    )
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    peer_url = f"http://127.0.0.1:{etcd_peer}"
    cluster.processes["etcd"] = _start(
        "etcd",
        [
            str(bins / "etcd"),
            f"--data-dir={workdir / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
        workdir,
    )
    cluster.processes["kube-apiserver"] = _start(
        "kube-apiserver",
        [
            str(bins / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={api_port}",
            f"--cert-dir={cert_dir}",
            f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
        ],
        workdir,
    )
    try:
        _wait_ready(cluster, time.monotonic() + START_TIMEOUT_S)
        _kubeconfig(cluster.kubeconfig, server, cluster.ca_file, token)
        cluster.processes["kube-controller-manager"] = _start(
            "kube-controller-manager",
            [
                str(bins / "kube-controller-manager"),
                f"--kubeconfig={cluster.kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                # Garbage collection of owned objects and namespace deletion are what the
                # tests need; workload controllers would only create pods nobody runs.
                "--controllers=garbage-collector-controller,namespace-controller",
                f"--service-account-private-key-file={sa_key}",
            ],
            workdir,
        )
    except BaseException:
        stop_control_plane(cluster)
        raise
    return cluster


def stop_control_plane(cluster: KubeCluster) -> None:
    for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
        if name in cluster.processes:
            _stop(cluster.processes[name])


def install_crds(cluster: KubeCluster) -> None:
    """Install the vendored third-party CRDs and ours server-side (they are too big for
    client-side apply's annotation), then wait until they are established."""
    files = [*sorted(THIRD_PARTY_CRDS.glob("*.yaml")), RAGINDEX_CRD]
    args = [a for f in files for a in ("-f", str(f))]
    cluster.kubectl("apply", "--server-side", "--field-manager=ragindex-tests", *args)
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *args, timeout=90)


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """The session's control plane, with KubeRay, ECK and RagIndex CRDs installed."""
    cluster = start_control_plane(tmp_path_factory.mktemp("kube"))
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
    try:
        install_crds(cluster)
        yield cluster
    finally:
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous
        stop_control_plane(cluster)


@pytest.fixture
def kube_namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace for one test; deletion is left to the namespace controller."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    kube_cluster.kubectl("create", "namespace", name)
    yield name
    kube_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
