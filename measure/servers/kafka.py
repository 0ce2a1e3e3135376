"""Start and stop a throwaway local Apache Kafka broker (KRaft, one node) for tests and benchmarks.

The jars come from Maven Central through `scripts/fetch_kafka.sh` (cached). A run directory gets
a `server.properties` with the broker and controller roles on free loopback ports, every
replication factor and min.isr at 1 (one broker) and no initial rebalance delay; the storage is
formatted with a random cluster id (`--standalone`). Besides PLAINTEXT, a SASL_PLAINTEXT
listener takes the SCRAM-SHA-512 user made at format time, and with `tls` (a test's own
CertificateAuthority) a SASL_SSL listener takes it too, over a certificate that CA issued for
the loopback names (a PEM keystore). `stop_broker()` / `start_broker()` stop the
broker and start it again on the same ports and data (a broker outage in a test); `stop()`
ends it and removes its files.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from ragindex.errors import BackendUnavailable
from ragindex.log import client_config
from ragindex.measure.servers.certs import CertificateAuthority
from ragindex.netutil import free_port, port_open
from ragindex.topics import OFFSETS_RETENTION_MINUTES

KAFKA_VERSION = "4.4.0"
SASL_MECHANISM = "SCRAM-SHA-512"
SASL_USERNAME = "ragindex"
JDK_CANDIDATES = (
    "/usr/lib/jvm/java-17-openjdk-amd64",
    "/usr/lib/jvm/java-21-openjdk-amd64",
    "/usr/lib/jvm/temurin-25-jdk-amd64",
)
_FETCH_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fetch_kafka.sh"


def ensure_installed() -> Path:
    """The directory holding Kafka's `lib/`, fetched with the project script if needed."""
    root = os.environ.get("RAGINDEX_CACHE") or str(Path.home() / ".cache" / "ragindex")
    home = Path(root) / "kafka" / KAFKA_VERSION
    if (home / ".ragindex-complete").exists():
        return home
    if not _FETCH_SCRIPT.exists():
        raise BackendUnavailable(f"Kafka {KAFKA_VERSION} is not at {home}; {_FETCH_SCRIPT} missing")
    proc = subprocess.run(
        ["bash", str(_FETCH_SCRIPT)], capture_output=True, text=True, timeout=1200, check=False
    )
    if proc.returncode != 0:
        raise BackendUnavailable(f"fetching Kafka failed: {proc.stderr[-2000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def find_java() -> str:
    """`$JAVA_HOME/bin/java` if set, else the first installed JDK (Kafka 4.x needs 17+)."""
    homes = [os.environ["JAVA_HOME"]] if os.environ.get("JAVA_HOME") else list(JDK_CANDIDATES)
    for home in homes:
        java = Path(home, "bin", "java")
        if java.exists():
            return str(java)
    found = shutil.which("java")
    if found:
        return found
    raise BackendUnavailable(f"no JDK 17+ found; set JAVA_HOME (looked in {homes})")


def _tls_listener(port: int, keystore: Path, host: str) -> dict[str, str]:
    """The settings of a SASL_SSL listener with a PEM keystore (key, then certificate)."""
    return {
        "listeners": f"SASL_SSL://{host}:{port}",
        "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
        "listener.name.sasl_ssl.ssl.keystore.location": str(keystore),
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
    }


def _properties(
    host: str,
    port: int,
    sasl_port: int,
    controller_port: int,
    data: Path,
    extra: Mapping[str, str] | None = None,
    tls_listener: Mapping[str, str] | None = None,
) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"{host}:{controller_port}",
        "listeners": (
            f"PLAINTEXT://{host}:{port},SASL_PLAINTEXT://{host}:{sasl_port},"
            f"CONTROLLER://{host}:{controller_port}"
        ),
        "advertised.listeners": f"PLAINTEXT://{host}:{port},SASL_PLAINTEXT://{host}:{sasl_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": (
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
        ),
        # A second listener that needs SCRAM credentials (the user is created at format time),
        # as the operator's external mode and Strimzi's SCRAM users do.
        "sasl.enabled.mechanisms": SASL_MECHANISM,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "log.dirs": str(data),
        "auto.create.topics.enable": "false",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "log.cleaner.backoff.ms": "200",  # compaction tests see the cleaner within seconds
        "num.network.threads": "2",
        "num.io.threads": "2",
        # What the operator renders for a managed log (Kafka's default is 7 days).
        "offsets.retention.minutes": str(OFFSETS_RETENTION_MINUTES),
        **(extra or {}),
    }
    if tls_listener:
        for key in ("listeners", "advertised.listeners"):
            settings[key] += f",{tls_listener['listeners']}"
        settings["listener.security.protocol.map"] += ",SASL_SSL:SASL_SSL"
        settings |= {k: v for k, v in tls_listener.items() if k != "listeners"}
    return "".join(f"{k}={v}\n" for k, v in settings.items())


@dataclass
class KafkaServer:
    """A local one-node Kafka; `bootstrap` is what clients connect to."""

    port: int
    sasl_port: int
    controller_port: int
    sasl_password: str
    run_dir: Path
    java: str
    lib: Path
    heap_mb: int
    host: str = "127.0.0.1"
    tls_port: int | None = None  # the SASL_SSL listener, with `tls`
    ca_file: Path | None = None  # the CA that signed its certificate
    process: subprocess.Popen[bytes] | None = None
    _removed: bool = field(default=False, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        """The listener that needs SCRAM-SHA-512 credentials (SASL_USERNAME, sasl_password)."""
        return f"{self.host}:{self.sasl_port}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        """The SASL_SSL listener (same credentials as `sasl_bootstrap`); only with `tls`."""
        if self.tls_port is None:
            raise ValueError("this Kafka was started without tls: it has no SASL_SSL listener")
        return f"{self.host}:{self.tls_port}"

    @property
    def log_path(self) -> Path:
        return self.run_dir / "broker.log"

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _java(self, main: str, *args: str) -> list[str]:
        return [
            self.java,
            f"-Xmx{self.heap_mb}m",
            "-XX:ActiveProcessorCount=2",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            f"{self.lib}/*",
            main,
            *args,
        ]

    def start_broker(self, timeout_s: float = 120.0) -> None:
        """Start the broker on this server's ports and data; return once it answers metadata."""
        if self.is_running():
            return
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self._java("kafka.Kafka", str(self.run_dir / "server.properties")),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        admin = AdminClient(
            client_config(self.bootstrap, settings={"socket.timeout.ms": 2000, "log_level": 0})
        )
        while time.monotonic() < deadline:
            if not self.is_running():
                raise BackendUnavailable(f"Kafka exited during start-up:\n{self.log_tail()}")
            if port_open(self.port, self.host):
                with contextlib.suppress(Exception):
                    if admin.list_topics(timeout=2).brokers:
                        return
            time.sleep(0.2)
        self.stop_broker(hard=True)
        raise BackendUnavailable(f"Kafka not ready after {timeout_s:.0f}s:\n{self.log_tail()}")

    def stop_broker(self, *, hard: bool = False, timeout_s: float = 60.0) -> None:
        """Stop the broker (SIGTERM, or SIGKILL with `hard`), keeping its data for a restart."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL if hard else signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def stop(self) -> None:
        """End the broker and remove every file it wrote."""
        if self._removed:
            return
        self._removed = True
        self.stop_broker()
        shutil.rmtree(self.run_dir, ignore_errors=True)


def start_kafka(
    heap_mb: int = 512,
    startup_timeout_s: float = 120.0,
    host: str = "127.0.0.1",
    properties: Mapping[str, str] | None = None,
    tls: CertificateAuthority | None = None,
) -> KafkaServer:
    """Format a fresh KRaft storage on free ports of `host` (loopback unless a test made another
    address, e.g. a node's, for pods to reach), start the broker, wait for it. `properties`
    override broker settings (e.g. a short `offsets.retention.minutes`); `tls` adds the
    SASL_SSL listener (module docstring)."""
    home = ensure_installed()
    run_dir = Path(tempfile.mkdtemp(prefix="ragindex-kafka-"))
    server = KafkaServer(
        free_port(host),
        free_port(host),
        free_port(host),
        secrets.token_hex(12),
        run_dir,
        find_java(),
        home / "lib",
        heap_mb,
        host,
    )
    try:
        tls_listener = None
        if tls is not None:
            issued = tls.issue("kafka", (host, "localhost") if host != "localhost" else (host,))
            keystore = run_dir / "keystore.pem"
            keystore.write_bytes(issued.key_and_chain_pem())
            server.tls_port, server.ca_file = free_port(host), issued.ca_file
            tls_listener = _tls_listener(server.tls_port, keystore, host)
        props = run_dir / "server.properties"
        props.write_text(
            _properties(
                host,
                server.port,
                server.sasl_port,
                server.controller_port,
                run_dir / "data",
                properties,
                tls_listener,
            )
        )
        cluster_id = subprocess.run(
            server._java("kafka.tools.StorageTool", "random-uuid"),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.split()[-1]
        subprocess.run(
            server._java(
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(props),
                "--standalone",
                "--add-scram",
                f"{SASL_MECHANISM}=[name={SASL_USERNAME},password={server.sasl_password}]",
            ),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        server.start_broker(startup_timeout_s)
    except BaseException as e:
        server.stop()
        if isinstance(e, subprocess.CalledProcessError):
            raise BackendUnavailable(f"formatting Kafka storage failed: {e.stderr}") from e
        raise
    return server


@contextlib.contextmanager
def running_kafka(**kwargs: object) -> Iterator[KafkaServer]:
    """Context manager form of start_kafka for benchmarks and scripts."""
    server = start_kafka(**kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()
