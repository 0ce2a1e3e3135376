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
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from ragindex.measure.servers import KafkaServer, start_kafka
from ragindex.netutil import free_port

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


def _build_script(flag: str) -> str:
    """What build_k8s.sh prints for `flag` (the script owns the pinned versions)."""
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), flag], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def bin_dir() -> Path:
    """Where build_k8s.sh puts the binaries."""
    return Path(_build_script("--print-bin-dir"))


def kuberay_version() -> str:
    """The pinned KubeRay release (its ray-operator binary, image and CRDs)."""
    return _build_script("--print-kuberay-version")


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


def start_control_plane(
    workdir: Path,
    *,
    address: str = "127.0.0.1",
    service_cidr: str = "10.0.0.0/24",
    pods: bool = False,
) -> KubeCluster:
    """Start etcd, kube-apiserver and kube-controller-manager; returns once /readyz is 200.

    `pods=True` is for a cluster with a kubelet (node.py): the API server on an `address` that
    pods reach, service-account tokens mounted into pods, and every controller (Deployments,
    endpoints, volume binding, ...)."""
    bins = ensure_binaries()
    token = secrets.token_hex(24)
    cert_dir = workdir / "certs"
    cert_dir.mkdir(parents=True)
    sa_key, sa_pub = _write_service_account_keys(cert_dir)
    tokens = workdir / "tokens.csv"
    tokens.write_text(f'{token},{ADMIN_USER},{uuid.uuid4()},"system:masters"\n')
    tokens.chmod(0o600)
    etcd_port, etcd_peer, api_port = free_port(), free_port(), free_port()
    server = f"https://{address}:{api_port}"
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
            f"--bind-address={address}",
            f"--advertise-address={address}",
            f"--secure-port={api_port}",
            f"--cert-dir={cert_dir}",
            f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            f"--service-cluster-ip-range={service_cidr}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            "--allow-privileged=true",
            # Without a kubelet no pod mounts a token, so the admission plugin is only noise;
            # with one, logs and exec reach it at the node's IP (its name resolves nowhere).
            *(
                ["--kubelet-preferred-address-types=InternalIP"]
                if pods
                else ["--disable-admission-plugins=ServiceAccount"]
            ),
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
                # API-only tests need; workload controllers would only create pods nobody runs.
                "--controllers="
                + ("*" if pods else "garbage-collector-controller,namespace-controller"),
                f"--service-account-private-key-file={sa_key}",
                # Published to every namespace as kube-root-ca.crt, which pods' tokens carry.
                f"--root-ca-file={cluster.ca_file}",
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


def install_crds(cluster: KubeCluster, *, ours: bool = True) -> None:
    """Install the vendored third-party CRDs and ours server-side (they are too big for
    client-side apply's annotation), then wait until they are established. `ours=False` leaves
    the RagIndex CRD to the chart."""
    files = [*sorted(THIRD_PARTY_CRDS.glob("*.yaml")), *([RAGINDEX_CRD] if ours else [])]
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`pods` tests run only when asked for by name (`-m pods`): they need root, a prepared
    machine (scripts/setup_pods.sh) and tens of minutes."""
    if "pods" in (config.getoption("markexpr") or ""):
        return
    pods = [item for item in items if item.get_closest_marker("pods")]
    if pods:
        config.hook.pytest_deselected(items=pods)
        items[:] = [item for item in items if not item.get_closest_marker("pods")]


# --- A real node: kubelet, containerd, CNI, kube-proxy, CoreDNS, KubeRay (marker `pods`) ---------
# `scripts/setup_pods.sh` installs the Debian packages (containerd, runc, CNI plugins, iptables),
# builds the node binaries (`build_k8s.sh --node`) and the images (`build_images.sh`). Needs root.
# Addresses live on a link of our own: pods reach the API server there, nothing outside
# the VM does. Ports are free ones, except DNS (53) on that address, which kubelet requires.
NODE_NAME = "ragindex-node"
NODE_LINK = "ragindex-node"
NODE_IP = "10.213.0.1"
POD_CIDR = "10.214.0.0/24"
SERVICE_CIDR = "10.215.0.0/24"
POD_BRIDGE = "ragindex-br0"
NODE_BINARIES = ("kube-scheduler", "kubelet", "kube-proxy", "coredns", "ray-operator")
CONTAINERD_STATE = Path("/run/ragindex-containerd")
CONTAINERD_SOCKET = CONTAINERD_STATE / "containerd.sock"
CACHE = Path(os.environ.get("RAGINDEX_CACHE") or Path.home() / ".cache" / "ragindex")
SANDBOX_IMAGE = "docker.io/ragindex/base:bookworm"
KUBERAY_MANIFEST = Path(__file__).parent / "manifests" / "kuberay.yaml"
NODE_READY_TIMEOUT_S = 180.0


def _images_dir() -> Path:
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "build_images.sh"), "--print-dir"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def _sh(*argv: str, check: bool = True, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


def node_prerequisites() -> list[str]:
    """What is missing for a node on this machine (empty: a node can start)."""
    bins = bin_dir()
    missing = [str(bins / b) for b in NODE_BINARIES if not (bins / b).is_file()]
    missing += [
        tool
        for tool in ("containerd", "ctr", "runc", "iptables", "/usr/lib/cni/bridge")
        if not shutil.which(tool) and not Path(tool).exists()
    ]
    images = _images_dir()
    missing += [
        str(images / f"{n}.tar")
        for n in ("ragindex-base", "ragindex-operator", "ragindex-ray", "ragindex-kuberay")
        if not (images / f"{n}.tar").is_file()
    ]
    if os.geteuid() != 0:
        missing.append("root")
    return missing


def _node_link_up() -> None:
    if _sh("ip", "link", "show", NODE_LINK, check=False).returncode != 0:
        # A bridge without ports stands in for a dummy link (no dummy module on some kernels).
        _sh("ip", "link", "add", NODE_LINK, "type", "bridge")
    _sh("ip", "addr", "replace", f"{NODE_IP}/32", "dev", NODE_LINK)
    _sh("ip", "link", "set", NODE_LINK, "up")


def _write_containerd_config(workdir: Path) -> Path:
    cni_dir = workdir / "cni"
    cni_dir.mkdir()
    (cni_dir / "10-ragindex.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "0.4.0",
                "name": "ragindex",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": POD_BRIDGE,
                        "isGateway": True,
                        "ipMasq": True,
                        "hairpinMode": True,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{"subnet": POD_CIDR}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                            "dataDir": str(workdir / "ipam"),
                        },
                    },
                    {"type": "portmap", "capabilities": {"portMappings": True}},
                ],
            }
        )
    )
    config = workdir / "containerd.toml"
    cri = '[plugins."io.containerd.grpc.v1.cri"'
    config.write_text(
        f"""version = 2
root = "{CACHE / "containerd" / "root"}"
state = "{CONTAINERD_STATE}"
[grpc]
  address = "{CONTAINERD_SOCKET}"
{cri}]
  sandbox_image = "{SANDBOX_IMAGE}"
  # Some VMs drop CAP_SYS_RESOURCE from every process, so no one may lower oom_score_adj (the
  # kubelet asks -998 for sandboxes): clamp it at containerd's own instead of failing runc.
  restrict_oom_score_adj = true
{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{cni_dir}"
"""
    )
    return config


def _ctr(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = ("ctr", "--address", str(CONTAINERD_SOCKET), "-n", "k8s.io", *args)
    return _sh(*argv, check=check, timeout=900.0)


def _import_images() -> None:
    """Import the built images into containerd once per build (keys mark what is in)."""
    images = _images_dir()
    imported = CACHE / "containerd" / "imported"
    imported.mkdir(parents=True, exist_ok=True)
    present = set(_ctr("images", "ls", "-q").stdout.split())
    for tar in sorted(images.glob("*.tar")):
        key = (images / f"{tar.stem}.key").read_text().strip()
        mark = imported / tar.stem
        ref = "docker.io/" + tar.stem.replace("-", "/", 1)
        if mark.exists() and mark.read_text() == key and any(p.startswith(ref) for p in present):
            continue
        _ctr("images", "import", str(tar))
        mark.write_text(key)


def _kubelet_config(workdir: Path, port: int) -> Path:
    path = workdir / "kubelet.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                # The host mounts cgroup v1 controllers; kubelet refuses v1 unless told.
                "failCgroupV1": False,
                "cgroupDriver": "cgroupfs",
                "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
                "address": NODE_IP,
                "port": port,
                "readOnlyPort": 0,
                "healthzPort": 0,
                "authentication": {
                    "anonymous": {"enabled": True},
                    "webhook": {"enabled": False},
                },
                "authorization": {"mode": "AlwaysAllow"},
                "clusterDNS": [NODE_IP],
                "clusterDomain": "cluster.local",
                "resolvConf": "/etc/resolv.conf",
                "failSwapOn": False,
                # Our images exist nowhere else: never garbage-collect them.
                "imageGCHighThresholdPercent": 100,
                "imageGCLowThresholdPercent": 99,
                "evictionHard": {
                    "memory.available": "100Mi",
                    "nodefs.available": "1%",
                    "imagefs.available": "1%",
                },
                "serializeImagePulls": False,
            }
        )
    )
    return path


def _corefile(workdir: Path, kubeconfig: Path) -> Path:
    path = workdir / "Corefile"
    path.write_text(
        f""".:53 {{
    bind {NODE_IP}
    errors
    health 127.0.0.1:{free_port()}
    ready 127.0.0.1:{free_port()}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    forward . /etc/resolv.conf
    cache 10
    loop
}}
"""
    )
    return path


def _wait_for(what: str, check: Callable[[], bool], timeout: float, cluster: KubeCluster) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, proc in cluster.processes.items():
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with {proc.returncode}:\n{_log_tail(cluster.workdir, name)}"
                )
        if check():
            return
        time.sleep(1.0)
    raise RuntimeError(f"{what} not within {timeout:.0f}s")


def start_node(workdir: Path) -> KubeCluster:
    """A single-node cluster whose pods really run: control plane, kube-scheduler, containerd,
    kubelet, kube-proxy and CoreDNS on this machine, with our images imported and KubeRay's
    operator running as a pod."""
    _node_link_up()
    cluster = start_control_plane(workdir, address=NODE_IP, service_cidr=SERVICE_CIDR, pods=True)
    try:
        bins = cluster.bin_dir
        kubeconfig = str(cluster.kubeconfig)
        cluster.processes["kube-scheduler"] = _start(
            "kube-scheduler",
            [
                str(bins / "kube-scheduler"),
                f"--kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
            ],
            workdir,
        )
        CONTAINERD_STATE.mkdir(parents=True, exist_ok=True)
        cluster.processes["containerd"] = _start(
            "containerd",
            ["containerd", "--config", str(_write_containerd_config(workdir))],
            workdir,
        )
        _wait_for(
            "containerd",
            lambda: (
                _sh("ctr", "--address", str(CONTAINERD_SOCKET), "version", check=False).returncode
                == 0
            ),
            60,
            cluster,
        )
        _import_images()
        cluster.processes["kubelet"] = _start(
            "kubelet",
            [
                str(bins / "kubelet"),
                f"--config={_kubelet_config(workdir, free_port())}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={workdir / 'kubelet'}",
                f"--cert-dir={workdir / 'kubelet-pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
            ],
            workdir,
        )
        cluster.processes["kube-proxy"] = _start(
            "kube-proxy",
            [
                str(bins / "kube-proxy"),
                f"--kubeconfig={kubeconfig}",
                f"--hostname-override={NODE_NAME}",
                f"--cluster-cidr={POD_CIDR}",
                "--proxy-mode=iptables",
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--healthz-bind-address=127.0.0.1:{free_port()}",
                "--conntrack-max-per-core=0",
            ],
            workdir,
        )
        cluster.processes["coredns"] = _start(
            "coredns",
            [str(bins / "coredns"), "-conf", str(_corefile(workdir, cluster.kubeconfig))],
            workdir,
        )
        _wait_for(
            f"node {NODE_NAME} Ready",
            lambda: (
                cluster.kubectl(
                    "get",
                    "node",
                    NODE_NAME,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                    check=False,
                ).stdout
                == "True"
            ),
            NODE_READY_TIMEOUT_S,
            cluster,
        )
        install_crds(cluster, ours=False)  # the chart installs ours
        # KubeRay's operator also watches the kinds we do not vendor (RayJob, RayCronJob) and
        # exits when their CRDs are missing: those come from its own source.
        vendored = {p.name for p in THIRD_PARTY_CRDS.glob("*.yaml")}
        kuberay_src = bins.parent / "src" / f"kuberay-{kuberay_version()}" / "config/crd/bases"
        extra = [p for p in sorted(kuberay_src.glob("ray.io_*.yaml")) if p.name not in vendored]
        args = [a for p in extra for a in ("-f", str(p))]
        cluster.kubectl("apply", "--server-side", "--field-manager=ragindex-tests", *args)
        cluster.kubectl("apply", "--server-side", "-f", str(KUBERAY_MANIFEST))
        cluster.kubectl(
            "-n",
            "kuberay",
            "rollout",
            "status",
            "deployment/kuberay-operator",
            "--timeout=300s",
            timeout=330,
        )
    except BaseException:
        stop_node(cluster)
        raise
    return cluster


def _delete_pods(cluster: KubeCluster) -> None:
    """Let the kubelet stop every pod (volumes unmounted, sandboxes torn down by CNI)."""
    cluster.kubectl(
        "delete", "deployments,replicasets,pods", "--all", "-A", "--wait=false", check=False
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        left = cluster.kubectl("get", "pods", "-A", "-o", "name", check=False)
        if left.returncode != 0 or not left.stdout.strip():
            return
        time.sleep(2)


def stop_node(cluster: KubeCluster) -> None:
    """Stop the node and undo what it did to the host: containers, mounts, links, iptables."""
    if "kubelet" in cluster.processes and cluster.processes["kubelet"].poll() is None:
        with contextlib.suppress(Exception):
            _delete_pods(cluster)
    for name in ("coredns", "kube-proxy", "kubelet", "kube-scheduler"):
        if name in cluster.processes:
            _stop(cluster.processes[name])
    if "containerd" in cluster.processes and cluster.processes["containerd"].poll() is None:
        # Whatever the kubelet left running (a failed start): kill and remove the tasks.
        with contextlib.suppress(Exception):
            for cid in _ctr("containers", "ls", "-q").stdout.split():
                _ctr("tasks", "rm", "-f", cid, check=False)
                _ctr("containers", "rm", cid, check=False)
        _stop(cluster.processes["containerd"])
    stop_control_plane(cluster)
    # Mounts the kubelet and containerd made under our directories (secrets, netns, rootfs).
    with open("/proc/self/mounts") as fh:
        mounts = [line.split()[1] for line in fh]
    ours = (
        str(cluster.workdir),
        str(CONTAINERD_STATE),
        str(CACHE / "containerd"),
        "/run/netns/cni-",
    )
    for mount in reversed(mounts):
        if mount.startswith(ours):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
    bins = cluster.bin_dir
    subprocess.run([str(bins / "kube-proxy"), "--cleanup"], capture_output=True, check=False)
    _remove_kube_iptables()
    for link in (POD_BRIDGE, NODE_LINK):
        subprocess.run(["ip", "link", "del", link], capture_output=True, check=False)


def _remove_kube_iptables() -> None:
    """The KUBE-* chains the kubelet adds (kube-proxy --cleanup leaves them), and jumps to them."""
    for table in ("filter", "nat", "mangle"):
        rules = _sh("iptables", "-t", table, "-S", check=False).stdout.splitlines()
        for rule in rules:
            if rule.startswith("-A ") and " -j KUBE-" in rule and not rule.startswith("-A KUBE-"):
                _sh("iptables", "-t", table, "-D", *shlex.split(rule[3:]), check=False)
        chains = [r.split()[1] for r in rules if r.startswith("-N KUBE-")]
        for flag in ("-F", "-X"):
            for chain in chains:
                _sh("iptables", "-t", table, flag, chain, check=False)


@pytest.fixture(scope="session")
def kube_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """A single-node cluster with a real kubelet (marker `pods`); skips nothing: a missing
    prerequisite fails with what to run."""
    missing = node_prerequisites()
    if missing:
        pytest.fail(f"a node needs {missing}: run scripts/setup_pods.sh (as root)")
    cluster = start_node(tmp_path_factory.mktemp("node"))
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
    try:
        yield cluster
    finally:
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous
        stop_node(cluster)


KAFKA_SERVICE_PORT = 9092


@pytest.fixture(scope="session")
def node_kafka(kube_node: KubeCluster) -> Iterator[KafkaServer]:
    """One Kafka broker on the node's address, for `log.mode: external`: pods reach it through
    the Service `kafka` in namespace `kafka` (port 9092; a selector-less Service with an
    EndpointSlice, as for brokers outside the cluster) and then at its advertised address."""
    server = start_kafka(heap_mb=512, host=NODE_IP)
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kafka"}},
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kafka", "namespace": "kafka"},
            "spec": {
                "ports": [{"name": "kafka", "port": KAFKA_SERVICE_PORT, "targetPort": server.port}]
            },
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "kafka-node",
                "namespace": "kafka",
                "labels": {"kubernetes.io/service-name": "kafka"},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [NODE_IP]}],
            "ports": [{"name": "kafka", "port": server.port, "protocol": "TCP"}],
        },
    ]
    try:
        kube_node.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
        yield server
    finally:
        server.stop()
