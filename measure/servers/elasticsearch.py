"""Start and stop a throwaway local Elasticsearch for tests and benchmarks.

Elasticsearch refuses to run as root, so when we are root the server runs as a system user
(`ragindex-es`, created on first use). The cached install lives under root's home, which that
user cannot traverse, so every run gets its own directory: the install hard-linked (cheap, same
file system) or copied, a real copy of the config (Elasticsearch writes its keystore there),
and fresh data and log directories. Nothing outlives `stop()`.

With `tls` (a test's own CertificateAuthority) the server runs with security on: HTTPS with a
certificate that CA issued for the loopback names, the `elastic` superuser's password set as
the keystore's `bootstrap.password`, and `scoped_users` (user -> index prefix) made in the file
realm, each with a role that reaches only the indexes, aliases and templates of its prefix:
what an application should get instead of the superuser. Users, roles and API keys kept in the
`.security` index cannot be made here: that index's mapping needs the `pattern_capture` token
filter of analysis-common, which the integration-test distribution does not carry.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragindex.errors import BackendUnavailable
from ragindex.measure.servers.certs import CertificateAuthority
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
    ca_file: Path | None = None  # with TLS: the CA to trust
    superuser_password: str | None = field(default=None, repr=False)  # with security on
    passwords: dict[str, str] = field(default_factory=dict, repr=False)  # of scoped_users
    _stopped: bool = field(default=False, repr=False)

    def is_running(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def request(self, method: str, path: str, body: object = None) -> Any:
        """One JSON request as the superuser (security on) or anonymously (security off); the
        decoded answer, or BackendUnavailable with the server's reason."""
        headers = {"Content-Type": "application/json"}
        if self.superuser_password is not None:
            headers["Authorization"] = _basic("elastic", self.superuser_password)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}{path}", data, headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30, context=_tls_context(self.ca_file)) as r:
                return json.load(r)
        except urllib.error.HTTPError as err:
            raise BackendUnavailable(
                f"Elasticsearch {method} {path}: HTTP {err.code} {err.read()[:2000]!r}"
            ) from err

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


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _tls_context(ca_file: Path | None) -> ssl.SSLContext | None:
    return None if ca_file is None else ssl.create_default_context(cafile=str(ca_file))


def _scoped_role(index_prefix: str) -> dict[str, object]:
    """What the app needs and no more: its own indexes and aliases, index templates, health."""
    return {
        "cluster": ["monitor", "manage_index_templates"],
        "indices": [{"names": [f"{index_prefix}*"], "privileges": ["all"]}],
    }


def _es_tool(run_dir: Path, env: dict[str, str], tool: str, *args: str, stdin: str = "") -> None:
    proc = subprocess.run(
        [str(run_dir / "home" / "bin" / tool), *args],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise BackendUnavailable(f"{tool} {args[0]} failed: {proc.stdout}{proc.stderr}")


def _health(server: EsServer) -> str | None:
    try:
        answer = server.request("GET", "/_cluster/health?wait_for_status=yellow&timeout=1s")
        return str(answer.get("status"))
    except (urllib.error.URLError, OSError, ValueError, BackendUnavailable):
        return None


def _secure(
    run_dir: Path, env: dict[str, str], tls: CertificateAuthority, scoped_users: Mapping[str, str]
) -> tuple[dict[str, str], str, dict[str, str]]:
    """Certificates into the config directory, the superuser's bootstrap password into a new
    keystore, the scoped users into the file realm: the settings that turn security and HTTPS
    on, the superuser's password and the users' passwords."""
    config = run_dir / "config"
    issued = tls.issue("es-http")
    (config / "certs").mkdir()
    for name, source in (
        ("http.crt", issued.cert_file),
        ("http.key", issued.key_file),
        ("ca.crt", issued.ca_file),
    ):
        shutil.copyfile(source, config / "certs" / name)
    superuser_password = secrets.token_urlsafe(18)
    _es_tool(run_dir, env, "elasticsearch-keystore", "create")
    _es_tool(
        run_dir,
        env,
        "elasticsearch-keystore",
        "add",
        "-x",
        "bootstrap.password",
        stdin=superuser_password,
    )
    roles = {f"{user}_role": _scoped_role(prefix) for user, prefix in scoped_users.items()}
    (config / "roles.yml").write_text(json.dumps(roles))  # JSON is YAML
    passwords = {user: secrets.token_urlsafe(18) for user in scoped_users}
    for user, password in passwords.items():
        useradd = ("useradd", user, "-p", password, "-r", f"{user}_role")
        _es_tool(run_dir, env, "elasticsearch-users", *useradd)
    settings = {
        "xpack.security.enabled": "true",
        "xpack.security.http.ssl.enabled": "true",
        "xpack.security.http.ssl.certificate": "certs/http.crt",
        "xpack.security.http.ssl.key": "certs/http.key",
        "xpack.security.http.ssl.certificate_authorities": "certs/ca.crt",
        "xpack.security.transport.ssl.enabled": "false",  # one node, loopback only
    }
    return settings, superuser_password, passwords


def start_elasticsearch(
    heap_mb: int = 512,
    startup_timeout_s: float = 180.0,
    home: Path | None = None,
    tls: CertificateAuthority | None = None,
    scoped_users: Mapping[str, str] | None = None,
) -> EsServer:
    """Start a single-node Elasticsearch on a free loopback port and wait for it: security off,
    or with `tls` security on, HTTPS with a certificate that CA issues, and `scoped_users`
    (user -> index prefix) with passwords in `EsServer.passwords` (module docstring)."""
    es_home = home or ensure_installed()
    java_home = find_java_home()
    run_dir = Path(tempfile.mkdtemp(prefix="ragindex-es-"))
    user = _ensure_user() if os.geteuid() == 0 else None
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
    superuser_password: str | None = None
    passwords: dict[str, str] = {}
    try:
        _link_tree(es_home, run_dir / "home")
        shutil.rmtree(run_dir / "home" / "config")
        shutil.copytree(es_home / "config", run_dir / "config")
        for sub in ("data", "logs", "tmp"):
            (run_dir / sub).mkdir()
        if tls is not None:
            secure, superuser_password, passwords = _secure(run_dir, env, tls, scoped_users or {})
            settings |= secure
        if user is not None:
            for path in [run_dir, *run_dir.rglob("*")]:
                if path.parts[len(run_dir.parts) : len(run_dir.parts) + 1] != ("home",):
                    os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
            os.chmod(run_dir, 0o755)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
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
    scheme = "http" if tls is None else "https"
    server = EsServer(
        f"{scheme}://127.0.0.1:{port}",
        port,
        process,
        run_dir,
        log_path,
        ca_file=None if tls is None else run_dir / "config" / "certs" / "ca.crt",
        superuser_password=superuser_password,
        passwords=passwords,
    )
    deadline = time.monotonic() + startup_timeout_s
    while time.monotonic() < deadline:
        if not server.is_running():
            tail = server.log_tail()
            server.stop()
            raise BackendUnavailable(f"Elasticsearch exited during start-up:\n{tail}")
        if _health(server) in ("yellow", "green"):
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
