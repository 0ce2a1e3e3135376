"""`ragindex serve`.

`serve` starts a local Ray (2 CPUs; without Ray's dashboard, whose processes held a third of
the runtime's memory and which nothing here needs: `RAGINDEX_DASHBOARD=1` starts it on
127.0.0.1:8265 for its UI, its job and Serve REST APIs, `RAGINDEX_DASHBOARD_PORT` moves it)
and the application on 127.0.0.1, then waits for
SIGINT/SIGTERM and shuts Serve and Ray down. With one Router replica (the default) the Router
serves `--port` itself (Ray Serve's direct ingress: no proxy hop); with more, Serve's proxy
does and balances over them.

Ray's control plane runs with token authentication: Ray's internal processes listen on every
interface (FIELD-NOTES), and without a token anyone who reaches them can run code as this
user and read every tenant's data. The token is generated once into the data directory
(`ray_auth_token`, mode 0600); `ray job submit` and the dashboard need it
(`RAY_AUTH_TOKEN_PATH=<data-dir>/ray_auth_token`).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from ragindex.errors import InvalidInput
from ragindex.netutil import free_port
from ragindex.serve_config import HAPROXY_INGRESS_ENV, Runtime
from ragindex.telemetry import tracing_environment

APP_NAME = "ragindex"
RAY_CPUS = 2
CLUSTER_LOGICAL_CPUS = 16  # the cluster layout on one machine: logical CPUs, not cores
DASHBOARD_PORT = 8265
RAY_TOKEN_FILE = "ray_auth_token"
RAY_START_ATTEMPTS = 3
DASHBOARD_PORT_ENV = "RAGINDEX_DASHBOARD_PORT"
DASHBOARD_ENV = "RAGINDEX_DASHBOARD"
DIRECT_INGRESS_ENV = "RAGINDEX_DIRECT_INGRESS"
Ingress = Literal["direct", "haproxy", "proxy"]


def dashboard_port() -> int:
    """The dashboard port: 8265 unless RAGINDEX_DASHBOARD_PORT says otherwise (tests, a 2nd
    server on the same machine)."""
    raw = os.environ.get(DASHBOARD_PORT_ENV, str(DASHBOARD_PORT))
    try:
        port = int(raw)
    except ValueError:
        raise InvalidInput(f"RAGINDEX_DASHBOARD_PORT must be a port number, got {raw!r}") from None
    if not 0 < port < 65536:
        raise InvalidInput(f"RAGINDEX_DASHBOARD_PORT must be in 1..65535, got {port}")
    return port


def dashboard_enabled() -> bool:
    """Whether `ragindex serve` starts Ray's dashboard: only when RAGINDEX_DASHBOARD=1. Serve
    deploys, reports status and serves without it (the app talks to Serve's controller);
    its UI, job submission and Serve REST API (what `--runtime local` of the operator PUTs
    to) live there, at the cost of ~1 GB of RSS in 12 processes on this box."""
    raw = os.environ.get(DASHBOARD_ENV, "0")
    if raw not in ("0", "1"):
        raise InvalidInput(f"{DASHBOARD_ENV} must be 0 or 1, got {raw!r}")
    return raw == "1"


def ensure_ray_token(data_dir: Path) -> Path:
    """The data directory's Ray token file, created (0600, 256 random bits) when missing."""
    path = data_dir / RAY_TOKEN_FILE
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if not path.read_text().strip():
            raise InvalidInput(f"{path} is empty: delete it to have a new token made") from None
        return path
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path


CLUSTER_WORKER_NICENESS = 15  # Ray's own default, kept by the cluster layout (ray_environment)


def ray_environment(
    data_dir: Path, runtime: Runtime = "local", worker_niceness: int | None = None
) -> dict[str, str]:
    """Environment for an offline local Ray with token authentication, the token in the data
    directory (FIELD-NOTES: usage stats off; the token file must exist before ray.init).

    Ray starts its workers, so every Serve replica, at niceness 15 unless told otherwise. In the
    embedded runtime the replicas are the service, so they run at the priority of the process
    that started them: at 15 any other process on the machine takes the cores first (`ragindex
    bench serve`, box at load ~10: Ingest embedded at 0.74x of the raw embedder's rate, at
    niceness 0 0.97x). The cluster layout on one machine keeps Ray's 15: its Kafka broker runs
    beside the replicas, and at equal priority their work starved it (the 100 k bench lost the
    broker in two runs of two at 0, in none at 15). `worker_niceness` overrides either."""
    if worker_niceness is None:
        worker_niceness = 0 if runtime == "local" else CLUSTER_WORKER_NICENESS
    return {
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(ensure_ray_token(data_dir)),
        "RAY_worker_niceness": str(worker_niceness),
    }


def apply_ray_environment(
    data_dir: Path, runtime: Runtime = "local", worker_niceness: int | None = None
) -> None:
    """Set ray_environment in this process before it starts Ray. Ray reads its auth mode when
    first imported; a process that imported it earlier (the benchmark suite, the embedded index
    reading its views) would start a token-mode GCS from a driver still in the old mode, which
    GCS refuses (InvalidAuthToken), so Ray's config and token cache are re-read here as Ray does
    itself when it turns token mode on."""
    os.environ.pop("RAY_AUTH_TOKEN", None)  # would win over the data directory's token file
    os.environ.update(ray_environment(data_dir, runtime, worker_niceness))
    # Serve's tracing, when an OTLP endpoint or a span file is configured (telemetry.tracing)
    os.environ.update(tracing_environment())
    if "ray._raylet" in sys.modules:
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def direct_ingress_environment(port: int) -> dict[str, str]:
    """Ray Serve 2.60's direct ingress with the Router replica on `port`: the replica runs its
    own HTTP server, so a client's request skips the Serve proxy and its handle hop (`ragindex
    bench http`: lexical p50 0.41x, hybrid 0.73x of the proxied path). Ray allocates ingress
    ports from [MIN, MAX): here just the documented one. A released port is reusable at once
    and a stopping replica does not hold 30 s open: no load balancer in front must notice."""
    return {
        "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
        "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": str(port),
        "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT": str(port + 1),
        "RAY_SERVE_PORT_QUARANTINE_S": "0",
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "0",
    }


def haproxy_ingress_environment() -> dict[str, str]:
    """HAPROXY_INGRESS_ENV on one machine: HAProxy hears of a stopping Router replica within
    its 0.1 s update window here, so the replica drains for 1 s instead of Ray's 30 (which
    leave a multi-node load balancer time to deregister it)."""
    return HAPROXY_INGRESS_ENV | {"RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "1"}


def ingress_mode(runtime: Runtime, router_replicas: int) -> Ingress:
    """How HTTP reaches the Router: `direct` (the one Router replica of the local layout
    serves the port itself), `haproxy` (the cluster layout, as on its pods: HAProxy on the
    port in front of the autoscaled Router replicas' own servers) or `proxy` (Serve's Python
    proxy, which balances several local Router replicas on the one port).
    RAGINDEX_DIRECT_INGRESS=0 forces the proxy in either layout (benchmarks compare them)."""
    forced = os.environ.get(DIRECT_INGRESS_ENV, "")
    if forced not in ("", "0", "1"):
        raise InvalidInput(f"{DIRECT_INGRESS_ENV} must be 0 or 1, got {forced!r}")
    if forced == "0":
        return "proxy"
    if runtime == "cluster":
        return "haproxy"
    if forced == "1" and router_replicas > 1:
        raise InvalidInput(
            f"{DIRECT_INGRESS_ENV}=1 serves one Router replica on the port; the spec runs"
            f" {router_replicas} (dense.replicas): unset it to have Serve's proxy balance them"
        )
    return "direct" if router_replicas == 1 else "proxy"


def app_args(
    data_dir: Path, spec_json: dict[str, Any], runtime: Runtime = "local"
) -> dict[str, Any]:
    """The builder args (what render_serve_config puts in `args`); the cluster runtime on one
    machine is for benchmarks: `bench serve --shard-replicas`."""
    return {"spec": spec_json, "name": APP_NAME, "data_dir": str(data_dir), "runtime": runtime}


def _load_spec(args: argparse.Namespace) -> Any:
    from ragindex.app.generation_record import ensure_record, serving_spec

    spec = serving_spec(Path(args.data_dir), getattr(args, "spec", None))
    ensure_record(Path(args.data_dir), spec)
    return spec


class Shutdown(BaseException):
    """Raised in the main thread by SIGINT/SIGTERM; a BaseException so no `except Exception`
    inside Ray's start-up swallows it."""


def _raise_shutdown_once(signum: int, _frame: Any) -> None:
    """First signal: unwind to the clean shutdown; later ones are ignored while it runs."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    raise Shutdown(signal.Signals(signum).name)


def start_local(
    data_dir: Path,
    port: int,
    spec: Any,
    on_ray_started: Callable[[], None] | None = None,
    runtime: Runtime = "local",
) -> None:
    """Start local Ray + Serve and run the app; returns once it is running.

    `on_ray_started` runs right after `ray.init`, which replaces the process's SIGTERM handler
    with one that dies on the spot; callers re-install theirs there. The cluster runtime's
    deployments each ask for a whole CPU, so Ray is given CLUSTER_LOGICAL_CPUS for it.
    """
    apply_ray_environment(data_dir, runtime)
    # Ray reads them when its processes start
    for key in (*direct_ingress_environment(port), *haproxy_ingress_environment()):
        os.environ.pop(key, None)
    proxy_port = port
    ingress = ingress_mode(runtime, spec.dense.replicas)
    if ingress == "direct":
        os.environ.update(direct_ingress_environment(port))
        proxy_port = free_port()  # Serve still runs its proxy; clients use the replica's port
    elif ingress == "haproxy":
        os.environ.update(haproxy_ingress_environment())
    import ray
    from ray import serve

    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        try:
            ray.init(
                address="local",  # a new Ray of our own, never another user's `ray start` cluster
                num_cpus=RAY_CPUS if runtime == "local" else CLUSTER_LOGICAL_CPUS,
                include_dashboard=dashboard_enabled(),
                dashboard_host="127.0.0.1",
                dashboard_port=dashboard_port(),
                log_to_driver=False,
            )
            break
        except Exception as err:
            # Ray 2.60 gives its raylet a fixed 30 s to register; a loaded box can miss that.
            if "timed out during startup" not in str(err) or attempt == RAY_START_ATTEMPTS:
                raise
            print(f"ragindex: Ray did not start ({err}); retrying", file=sys.stderr, flush=True)
            ray.shutdown()
            # The failed attempt's dashboard may hold its port a while yet: take another.
            os.environ[DASHBOARD_PORT_ENV] = str(free_port())
    if on_ray_started is not None:
        on_ray_started()
    serve.start(http_options={"host": "127.0.0.1", "port": proxy_port})
    deploy_app(data_dir, spec, runtime)


def deploy_app(data_dir: Path, spec: Any, runtime: Runtime) -> None:
    """Deploy (or redeploy in place) the Serve application of `spec` on the running Serve."""
    from ray import serve

    from ragindex.app.serve import build_app

    spec_json = spec.model_dump(mode="json", by_alias=True)
    serve.run(
        build_app(app_args(data_dir, spec_json, runtime)),
        name=APP_NAME,
        route_prefix="/",
        blocking=False,
    )


def stop_local() -> None:
    """Shut Serve down (replicas close their indexes: Ingest snapshots its shards), then Ray."""
    import ray
    from ray import serve

    if ray.is_initialized():
        serve.shutdown()
    ray.shutdown()


def serve_command(args: argparse.Namespace) -> int:
    """Run until SIGINT/SIGTERM, then shut down cleanly, also when signalled during start-up."""
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    spec = _load_spec(args)

    def install_handlers() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _raise_shutdown_once)

    install_handlers()
    try:
        start_local(data_dir, args.port, spec, on_ray_started=install_handlers)
        print(f"ragindex: serving {data_dir} on http://127.0.0.1:{args.port}/", flush=True)
        print(
            f"ragindex: mint a token with: ragindex token create --tenant T --data-dir {data_dir}",
            flush=True,
        )
        while True:
            signal.pause()
    except Shutdown as why:
        print(f"ragindex: {why}: shutting down", flush=True)
    finally:
        stop_local()
    return 0


def exit_on_sigterm() -> None:
    """SIGTERM unwinds like an exit, so a benchmark stops the servers it started."""
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
