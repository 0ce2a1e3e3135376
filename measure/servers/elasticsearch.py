"""Start and stop a throwaway local Elasticsearch for tests and benchmarks.

Elasticsearch refuses to run as root, so when we are root the server runs as a system user
(`ragindex-es`, created on first use). The cached install lives under root's home, which that
user cannot traverse, so every run gets its own directory: the install hard-linked (cheap, same
file system) or copied, a real copy of the config (Elasticsearch writes its keystore there),
and fresh data and log directories. Nothing outlives `stop()`.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ragindex.errors import BackendUnavailable
from ragindex.netutil import free_port

ES_VERSION = "8.19.21"
ES_USER = "ragindex-es"
JDK_CANDIDATES = (
    "/usr/lib/jvm/temurin-25-jdk-amd64",
    "/usr/lib/jvm/java-21-openjdk-amd64",
    "/usr/lib/jvm/java-17-openjdk-amd64",
)
_FETCH_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fetch_elasticsearch.sh"


def cache_dir() -> Path:
    """Where slow downloads live; never inside the repository."""
    root = os.environ.get("RAGINDEX_CACHE") or str(Path.home() / ".cache" / "ragindex")
    return Path(root) / "elasticsearch"


def ensure_installed() -> Path:
    """Return the Elasticsearch home, fetching it with the project script if needed."""
    override = os.environ.get("RAGINDEX_ES_HOME")
    if override:
        return Path(override)
    home = cache_dir() / f"elasticsearch-{ES_VERSION}"
    if (home / ".ragindex-complete").exists():
        return home
    if not _FETCH_SCRIPT.exists():
        raise BackendUnavailable(
            f"Elasticsearch {ES_VERSION} is not installed at {home} and {_FETCH_SCRIPT} is missing"
        )
    proc = subprocess.run(
        ["bash", str(_FETCH_SCRIPT)], capture_output=True, text=True, timeout=1200, check=False
    )
    if proc.returncode != 0:
        raise BackendUnavailable(f"fetching Elasticsearch failed: {proc.stderr[-2000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def find_java_home() -> str:
    """ES_JAVA_HOME if set, else the first installed JDK that this Elasticsearch supports."""
    configured = os.environ.get("ES_JAVA_HOME")
    if configured:
        return configured
    for candidate in JDK_CANDIDATES:
        if Path(candidate, "bin", "java").exists():
            return candidate
    raise BackendUnavailable(f"no JDK 17+ found; set ES_JAVA_HOME (looked in {JDK_CANDIDATES})")


def _ensure_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(ES_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", ES_USER],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(ES_USER)


def _link_tree(src: Path, dst: Path) -> None:
    """Hard-link a read-only tree (falls back to copying across file systems)."""

    def link_or_copy(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, symlinks=True, copy_function=link_or_copy)


@dataclass
class EsServer:
    """A running local Elasticsearch; `stop()` ends it and removes its files."""

    url: str
    port: int
    process: subprocess.Popen[bytes]
    run_dir: Path
    log_path: Path
    _stopped: bool = field(default=False, repr=False)

    def is_running(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> None:
        """Terminate the whole process group, wait a bounded time, then kill."""
        if self._stopped:
            return
        self._stopped = True
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        shutil.rmtree(self.run_dir, ignore_errors=True)


def _health(url: str) -> str | None:
    try:
        with urllib.request.urlopen(
            f"{url}/_cluster/health?wait_for_status=yellow&timeout=1s", timeout=3
        ) as resp:
            return str(json.load(resp).get("status"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def start_elasticsearch(
    heap_mb: int = 512, startup_timeout_s: float = 180.0, home: Path | None = None
) -> EsServer:
    """Start a single-node, security-off Elasticsearch on a free loopback port and wait for it."""
    es_home = home or ensure_installed()
    java_home = find_java_home()
    run_dir = Path(tempfile.mkdtemp(prefix="ragindex-es-"))
    user = _ensure_user() if os.geteuid() == 0 else None
    try:
        _link_tree(es_home, run_dir / "home")
        shutil.rmtree(run_dir / "home" / "config")
        shutil.copytree(es_home / "config", run_dir / "config")
        for sub in ("data", "logs", "tmp"):
            (run_dir / sub).mkdir()
        if user is not None:
            for path in [run_dir, *run_dir.rglob("*")]:
                if path.parts[len(run_dir.parts) : len(run_dir.parts) + 1] != ("home",):
                    os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
            os.chmod(run_dir, 0o755)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(run_dir),
        "ES_JAVA_HOME": java_home,
        "ES_PATH_CONF": str(run_dir / "config"),
        "ES_TMPDIR": str(run_dir / "tmp"),
        "ES_JAVA_OPTS": f"-Xms{heap_mb}m -Xmx{heap_mb}m -XX:ActiveProcessorCount=2",
    }
    settings = {
        "cluster.name": "ragindex-test",
        "node.name": "node-1",
        "discovery.type": "single-node",
        "xpack.security.enabled": "false",
        "http.host": "127.0.0.1",
        "http.port": str(port),
        "transport.host": "127.0.0.1",
        "transport.port": str(free_port()),
        "path.data": str(run_dir / "data"),
        "path.logs": str(run_dir / "logs"),
        "cluster.routing.allocation.disk.threshold_enabled": "false",
    }
    cmd = [str(run_dir / "home" / "bin" / "elasticsearch")]
    for key, value in settings.items():
        cmd += ["-E", f"{key}={value}"]
    log_path = run_dir / "stdout.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            cmd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            user=user.pw_uid if user else None,
            group=user.pw_gid if user else None,
            extra_groups=[] if user else None,
        )
    server = EsServer(f"http://127.0.0.1:{port}", port, process, run_dir, log_path)
    deadline = time.monotonic() + startup_timeout_s
    while time.monotonic() < deadline:
        if not server.is_running():
            tail = server.log_tail()
            server.stop()
            raise BackendUnavailable(f"Elasticsearch exited during start-up:\n{tail}")
        if _health(server.url) in ("yellow", "green"):
            return server
        time.sleep(0.5)
    tail = server.log_tail()
    server.stop()
    raise BackendUnavailable(f"Elasticsearch not healthy after {startup_timeout_s:.0f}s:\n{tail}")


@contextlib.contextmanager
def running_elasticsearch(**kwargs: object) -> Iterator[EsServer]:
    """Context manager form of start_elasticsearch for benchmarks and scripts."""
    server = start_elasticsearch(**kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()
