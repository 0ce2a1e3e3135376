"""Render a RagIndexSpec into a Ray Serve config: one renderer for `serve deploy` and KubeRay.

The output is a plain dict that validates under `ray.serve.schema.ServeDeploySchema`, which is
what both `serve deploy CONFIG` and a KubeRay `RayService.spec.serveConfigV2` are checked against.
It is a pure function of the spec, so the operator (no Ray installed) and the CLI render the same
thing, and the layout choice is tested without a cluster.

Layout is a decision, not a constant (FIELD-NOTES: each Serve hop costs ~2 ms on 2 cores):
- `local`: the query path (query embedder, every dense shard, the BM25 reader) is co-located
  inside the Router replicas; ingest is its own deployment with its own embedder.
- `cluster`: one deployment per dense shard, separate embedder/reranker pools on GPU workers,
  each with its own autoscaling; ingest has its own embedder pool so a re-embed never slows
  serving.
"""

from __future__ import annotations

from typing import Any, Literal

import yaml

from ragindex.config import AutoscalingSpec, RagIndexSpec

Runtime = Literal["local", "cluster"]
APP_IMPORT_PATH = "ragindex.app.serve:build_app"

# Environment the operator sets on cluster pods and the Serve app reads.
AUTH_DIR_ENV = "RAGINDEX_AUTH_DIR"
# The credential /v1/generation asks of its reader (the operator) in the cluster runtime.
REPORT_TOKEN_ENV = "RAGINDEX_REPORT_TOKEN"
KAFKA_BOOTSTRAP_ENV = "RAGINDEX_KAFKA_BOOTSTRAP_SERVERS"
# Set by the operator from generator.apiKeySecret (the served spec names it in apiKeyEnv).
GENERATOR_API_KEY_ENV = "RAGINDEX_GENERATOR_API_KEY"
# The cluster layout's HTTP ingress, set on every Ray process (Ray Serve 2.60's HAProxy mode):
# HAProxy holds the Serve port on each node and balances requests over the Router replicas,
# each serving HTTP itself on a port of its own (direct ingress), where Serve's Python proxy
# would parse each request and pass it on through one more handle call.
HAPROXY_INGRESS_ENV = {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1"}
# Set on the replicas of the query path (Router, Lexical, Shard<i>), whose methods hand
# every blocking step to threads of their own: their user code runs on the replica's main loop,
# which receives the request, instead of on a second loop in another thread (one thread
# crossing less per request at each end of a hop). Model pools and Ingest block their loop
# while a batch runs, so they keep Serve's default. (Ray Serve 2.60 reads it at start-up.)
MAIN_LOOP_ENV = {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0"}

ROUTER = "Router"
INGEST = "Ingest"
QUERY_EMBEDDER = "QueryEmbedder"
INGEST_EMBEDDER = "IngestEmbedder"
RERANKER = "Reranker"
LEXICAL = "Lexical"


def shard_deployment_name(shard: int) -> str:
    return f"Shard{shard}"


def _autoscaling(scaling: AutoscalingSpec) -> dict[str, Any]:
    return {
        "min_replicas": scaling.min_replicas,
        "max_replicas": scaling.max_replicas,
        "target_ongoing_requests": scaling.target_ongoing_requests,
        "upscale_delay_s": scaling.upscale_delay_s,
        "downscale_delay_s": scaling.downscale_delay_s,
    }


def _deployment(
    name: str,
    *,
    cpus: float,
    gpus: float = 0,
    replicas: int | None = None,
    autoscaling: AutoscalingSpec | None = None,
    max_ongoing_requests: int = 32,
    access_log: bool = True,
    main_loop: bool = False,
) -> dict[str, Any]:
    """`access_log=False` for the Router's internal calls (a shard, the BM25 view, a model
    pool): a log line per call, several per search, that the Router's own line already
    covers (and whose formatting and write each call pays for). `main_loop`: the replicas run
    their user code on Serve's main loop (MAIN_LOOP_ENV)."""
    actor_options: dict[str, Any] = {"num_cpus": cpus, "num_gpus": gpus}
    if main_loop:
        actor_options["runtime_env"] = {"env_vars": dict(MAIN_LOOP_ENV)}
    deployment: dict[str, Any] = {
        "name": name,
        "max_ongoing_requests": max_ongoing_requests,
        "graceful_shutdown_timeout_s": 5,
        "ray_actor_options": actor_options,
    }
    if not access_log:
        deployment["logging_config"] = {"enable_access_log": False}
    if autoscaling is not None:
        deployment["autoscaling_config"] = _autoscaling(autoscaling)
    else:
        deployment["num_replicas"] = replicas if replicas is not None else 1
    return deployment


def ingest_scaling(spec: RagIndexSpec) -> AutoscalingSpec:
    """Ingest's autoscaling, capped at one replica per `docs` partition: every running replica
    takes its round-robin share of the partitions (`ingest.worker.assigned_partitions`, in
    replica-id order), so a replica beyond the partition count would own none."""
    scaling = spec.scaling.ingest
    most = spec.log.docs_partitions
    return scaling.model_copy(
        update={
            "min_replicas": min(scaling.min_replicas, most),
            "max_replicas": min(scaling.max_replicas, most),
        }
    )


def query_pool(spec: RagIndexSpec) -> bool:
    """Whether the cluster layout embeds queries in a QueryEmbedder pool (GPU embedders: it
    batches queries onto the accelerator) or in the Router (CPU embedders: a pool would do the
    same work on the same kind of core, plus a hop that costs more than a MiniLM query)."""
    return spec.embedder.gpus > 0


def deployment_layout(spec: RagIndexSpec, runtime: Runtime) -> list[dict[str, Any]]:
    """Which deployments exist, with their resources and scaling, for a runtime."""
    batch_ongoing = max(32, 2 * spec.embedder.batch_size)
    if runtime == "local":
        # One machine: fractional CPUs so every replica fits on 2 cores; fixed replica counts,
        # because autoscaling more replicas onto 2 cores only makes them slower.
        return [
            _deployment(
                ROUTER,
                cpus=0.5,
                replicas=spec.dense.replicas,
                max_ongoing_requests=64,
                main_loop=True,
            ),
            _deployment(INGEST, cpus=0.5, replicas=1, max_ongoing_requests=8),
        ]
    query_scaling = spec.scaling.query

    def model_pool(name: str, gpus: float) -> dict[str, Any]:
        """A model pool of the query path: batched calls, scaled with the query path."""
        return _deployment(
            name,
            cpus=1,
            gpus=gpus,
            autoscaling=query_scaling,
            max_ongoing_requests=batch_ongoing,
            access_log=False,
        )

    layout = [
        _deployment(
            ROUTER, cpus=1, autoscaling=query_scaling, max_ongoing_requests=64, main_loop=True
        )
    ]
    if query_pool(spec):
        layout.append(model_pool(QUERY_EMBEDDER, spec.embedder.gpus))
    layout.append(
        _deployment(
            LEXICAL,
            cpus=1,
            autoscaling=query_scaling,
            max_ongoing_requests=64,
            access_log=False,
            main_loop=True,
        )
    )
    layout += [
        _deployment(
            shard_deployment_name(i),
            cpus=1,
            replicas=spec.dense.replicas,
            access_log=False,
            main_loop=True,
        )
        for i in range(spec.dense.shards)
    ]
    if spec.reranker.enabled:
        layout.append(model_pool(RERANKER, spec.reranker.gpus))
    layout += [
        _deployment(INGEST, cpus=1, autoscaling=ingest_scaling(spec), max_ongoing_requests=8),
        _deployment(
            INGEST_EMBEDDER,
            cpus=1,
            gpus=spec.embedder.gpus,
            autoscaling=spec.scaling.ingest,
            max_ongoing_requests=batch_ongoing,
        ),
    ]
    return layout


def render_serve_config(
    spec: RagIndexSpec,
    *,
    name: str,
    data_dir: str,
    runtime: Runtime,
    host: str = "0.0.0.0",
    port: int = 8000,
    route_prefix: str = "/",
    namespace: str | None = None,
) -> dict[str, Any]:
    """The full Serve config (ServeDeploySchema shape) for one RagIndex application.

    `namespace` (the RagIndex's) names the index's log topics with `name`.
    """
    args: dict[str, Any] = {
        "spec": spec.model_dump(mode="json", by_alias=True),
        "name": name,
        "data_dir": data_dir,
        "runtime": runtime,
    }
    if namespace is not None:
        args["namespace"] = namespace
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": host, "port": port},
        "applications": [
            {
                "name": name,
                "route_prefix": route_prefix,
                "import_path": APP_IMPORT_PATH,
                "args": args,
                "deployments": deployment_layout(spec, runtime),
            }
        ],
    }


def to_yaml(config: dict[str, Any]) -> str:
    """YAML text as `serve deploy` and `serveConfigV2` take it (key order kept)."""
    return yaml.safe_dump(config, sort_keys=False)
