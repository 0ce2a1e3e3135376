"""`build_app(args)` wires the deployments from one RagIndexSpec.

Import path `ragindex.app.serve:build_app` (APP_IMPORT_PATH) with args {spec, name, data_dir,
runtime, namespace (optional; names the index's topics)}, as rendered by
`ragindex.serve_config`. The layout (names, resources, scaling) comes from `deployment_layout`,
so `serve.run(build_app(...))` and `serve deploy CONFIG` agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import serve
from ray.serve import Application

from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE
from ragindex.app.serve.ingest_deployment import Ingest
from ragindex.app.serve.lexical_deployment import LexicalServer
from ragindex.app.serve.pools import EmbedderPool, RerankerPool
from ragindex.app.serve.router_deployment import Router
from ragindex.app.serve.shard_deployment import ShardServer
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.serve_config import (
    INGEST,
    INGEST_EMBEDDER,
    LEXICAL,
    QUERY_EMBEDDER,
    RERANKER,
    ROUTER,
    Runtime,
    deployment_layout,
    query_pool,
    shard_deployment_name,
)


@dataclass(frozen=True)
class AppArgs:
    spec: RagIndexSpec
    name: str
    data_dir: Path
    runtime: Runtime
    namespace: str


def parse_args(args: dict[str, Any]) -> AppArgs:
    """Validate the builder args (the `args` block of the Serve config)."""
    unknown = set(args) - {"spec", "name", "data_dir", "runtime", "namespace"}
    if unknown:
        raise InvalidInput(f"unknown app args: {', '.join(sorted(unknown))}")
    runtime = args.get("runtime", "local")
    if runtime not in ("local", "cluster"):
        raise InvalidInput(f"runtime must be 'local' or 'cluster', got {runtime!r}")
    if not args.get("data_dir"):
        raise InvalidInput("data_dir is required")
    spec = args.get("spec") or {}
    return AppArgs(
        spec=spec if isinstance(spec, RagIndexSpec) else RagIndexSpec.model_validate(spec),
        name=str(args.get("name", "ragindex")),
        data_dir=Path(args["data_dir"]),
        runtime=runtime,
        namespace=str(args.get("namespace") or DEFAULT_NAMESPACE),
    )


def deployment_options(layout_entry: dict[str, Any]) -> dict[str, Any]:
    """`Deployment.options(...)` kwargs for one entry of `deployment_layout`."""
    return {k: v for k, v in layout_entry.items() if k != "name"} | {"name": layout_entry["name"]}


RouterDeployment = serve.deployment(name=ROUTER)(serve.ingress()(Router))
IngestDeployment = serve.deployment(name=INGEST)(Ingest)
EmbedderDeployment = serve.deployment(name=QUERY_EMBEDDER)(EmbedderPool)
RerankerDeployment = serve.deployment(name=RERANKER)(RerankerPool)
ShardDeployment = serve.deployment(name="Shard")(ShardServer)
LexicalDeployment = serve.deployment(name=LEXICAL)(LexicalServer)


def build_app(args: dict[str, Any]) -> Application:
    """The Serve application for one index; layout from `deployment_layout(spec, runtime)`."""
    parsed = parse_args(args)
    spec_json = parsed.spec.model_dump(mode="json", by_alias=True)
    data_dir = str(parsed.data_dir)
    layout = {
        d["name"]: deployment_options(d) for d in deployment_layout(parsed.spec, parsed.runtime)
    }
    where = (data_dir, parsed.name, parsed.namespace)
    if parsed.runtime == "local":
        ingest = IngestDeployment.options(**layout[INGEST]).bind(spec_json, *where)
        return RouterDeployment.options(**layout[ROUTER]).bind(spec_json, *where, "local", ingest)

    ingest_embedder = EmbedderDeployment.options(**layout[INGEST_EMBEDDER]).bind(spec_json)
    query_embedder = (
        EmbedderDeployment.options(**layout[QUERY_EMBEDDER]).bind(spec_json)
        if query_pool(parsed.spec)
        else None  # the Router embeds queries itself
    )
    ingest = IngestDeployment.options(**layout[INGEST]).bind(
        spec_json, *where, ingest_embedder, report_partitions=True
    )
    shards = [
        ShardDeployment.options(**layout[shard_deployment_name(i)]).bind(
            spec_json, *where, i, ingest_embedder
        )
        for i in range(parsed.spec.dense.shards)
    ]
    lexical = LexicalDeployment.options(**layout[LEXICAL]).bind(spec_json, *where, ingest_embedder)
    reranker = (
        RerankerDeployment.options(**layout[RERANKER]).bind(spec_json)
        if parsed.spec.reranker.enabled
        else None
    )
    return RouterDeployment.options(**layout[ROUTER]).bind(
        spec_json, *where, "cluster", ingest, query_embedder, shards, lexical, reranker
    )
