"""The in-process engine: every part of one index opened from a data directory.

This is the composition root for the CLI, the Serve deployments on one machine, and the
benchmarks' in-process floor. The data directory is stamped with the spec and the embedder
identity on first open; opening it later with a different embedder identity is refused, so
vectors of two models never mix (DESIGN.md invariant 2).

Layout of a data directory:
    index.json     spec and embedder identity stamp
    dense/         one folder per dense shard (snapshot + write-ahead log)
    lexical/       tantivy index
    store.sqlite   manifest and chunk store
    tokens.json    hashed API tokens (see ragindex.router.auth)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from ragindex.config import RagIndexSpec
from ragindex.errors import IdentityMismatch, InvalidInput
from ragindex.generations import index_generation
from ragindex.ingest.pipeline import IngestPipeline
from ragindex.ingest.store import ChunkStore
from ragindex.lexical import FieldBoosts, TantivyIndex, TenantIndexes
from ragindex.lexical.elasticsearch_index import ElasticsearchIndex, make_client
from ragindex.models.embedder import load_embedder
from ragindex.models.reranker import load_reranker
from ragindex.protocols import Embedder, LexicalIndex
from ragindex.router.query import QueryEngine
from ragindex.serve_config import AUTH_DIR_ENV, ES_PASSWORD_ENV, ES_USERNAME_ENV
from ragindex.shards import ShardedDenseIndex
from ragindex.types import ModelIdentity

STAMP = "index.json"


def auth_dir(data_dir: Path) -> Path:
    """Where hashed API tokens live: the data dir, or a mounted Secret in the cluster."""
    return Path(os.environ.get(AUTH_DIR_ENV) or data_dir)


def default_data_dir() -> Path:
    return Path(os.environ.get("RAGINDEX_DATA_DIR", Path.home() / ".local/share/ragindex"))


def load_spec(path: Path | None) -> RagIndexSpec:
    """A spec from YAML: a bare spec or a whole RagIndex manifest; defaults when path is None."""
    if path is None:
        return RagIndexSpec()
    data = yaml.safe_load(Path(path).read_text())
    if isinstance(data, dict) and "kind" in data and "spec" in data:
        data = data["spec"]
    return RagIndexSpec.model_validate(data or {})


def elasticsearch_auth() -> tuple[str, str] | None:
    """Basic-auth credentials from the environment (the operator injects ECK's secret there)."""
    user, password = os.environ.get(ES_USERNAME_ENV), os.environ.get(ES_PASSWORD_ENV)
    return (user, password) if user and password else None


LEXICAL_PER_TENANT_DIR = "lexical-per-tenant"


def open_lexical(
    spec: RagIndexSpec, data_dir: Path, identity: ModelIdentity, *, read_only: bool = False
) -> LexicalIndex:
    """The BM25 leg the spec asks for: tantivy in the data dir, or an Elasticsearch alias.

    On Elasticsearch the concrete index is named after the index generation (embedder
    identity, dense layout, chunking), so a new generation is built beside the old one; the
    alias is what searches read, moved at promotion. The index is stamped with the embedder
    identity (its mapping's `_meta`).
    """
    boosts = FieldBoosts(title=spec.lexical.title_boost, body=spec.lexical.body_boost)
    rm3 = spec.feedback.rm3
    if spec.lexical.backend == "embedded" and spec.lexical.tenant_isolation == "index-per-tenant":
        return TenantIndexes.open(
            data_dir / LEXICAL_PER_TENANT_DIR, read_only=read_only, boosts=boosts, rm3=rm3
        )
    if spec.lexical.backend == "embedded":
        return TantivyIndex.open(data_dir / "lexical", read_only=read_only, boosts=boosts, rm3=rm3)
    if not spec.lexical.elasticsearch_url:
        raise InvalidInput(
            "lexical.backend is elasticsearch but lexical.elasticsearchUrl is not set"
            " (on one machine the URL is required; the operator sets it for a managed cluster)"
        )
    return ElasticsearchIndex.open(
        make_client(
            spec.lexical.elasticsearch_url, spec.lexical.request_timeout_s, elasticsearch_auth()
        ),
        alias=spec.lexical.elasticsearch_alias,
        generation=index_generation(spec),
        stamp={"embedder": identity.to_dict()},
        timeout_s=spec.lexical.request_timeout_s,
        refresh_interval_s=min(1.0, spec.freshness_s),
        boosts=boosts,
        rm3=rm3,
    )


def check_stamp(data_dir: Path, spec: RagIndexSpec, identity: ModelIdentity) -> None:
    """Stamp a new data dir, or refuse one built by another embedder identity."""
    stamp_path = data_dir / STAMP
    if stamp_path.exists():
        stamped = ModelIdentity.from_dict(json.loads(stamp_path.read_text())["identity"])
        if stamped != identity:
            raise IdentityMismatch(
                f"{data_dir} was built with embedder {stamped.name} ({stamped.weights_hash[:12]},"
                f" dim {stamped.dimension}); this config uses {identity.name}"
                f" ({identity.weights_hash[:12]}, dim {identity.dimension}). Use a new data"
                " directory for a new index generation."
            )
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = stamp_path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {"spec": spec.model_dump(mode="json", by_alias=True), "identity": identity.to_dict()},
            indent=2,
        )
    )
    os.replace(tmp, stamp_path)


@dataclass
class LocalEngine:
    spec: RagIndexSpec
    data_dir: Path
    embedder: Embedder
    dense: ShardedDenseIndex
    lexical: LexicalIndex
    store: ChunkStore
    ingest: IngestPipeline
    query: QueryEngine

    @classmethod
    def open(
        cls,
        data_dir: Path,
        spec: RagIndexSpec | None = None,
        *,
        embedder: Embedder | None = None,
    ) -> LocalEngine:
        """Open (or create) the index in data_dir; the embedder may be shared by the caller."""
        spec = spec or RagIndexSpec()
        embedder = embedder or load_embedder(spec.embedder)
        check_stamp(data_dir, spec, embedder.identity)
        dense = ShardedDenseIndex.open(
            data_dir / "dense",
            embedder.identity,
            num_shards=spec.dense.shards,
            hnsw=spec.dense.hnsw,
            exact_threshold=spec.dense.exact_threshold,
        )
        lexical = open_lexical(spec, data_dir, embedder.identity)
        store = ChunkStore(data_dir / "store.sqlite")
        dense.resolve_access = store.allowed_ids
        reranker = load_reranker(spec.reranker) if spec.reranker.enabled else None
        return cls(
            spec=spec,
            data_dir=data_dir,
            embedder=embedder,
            dense=dense,
            lexical=lexical,
            store=store,
            ingest=IngestPipeline(embedder, dense, lexical, store, spec.chunking),
            query=QueryEngine(
                embedder,
                dense,
                lexical,
                store,
                fusion=spec.fusion,
                lexical_spec=spec.lexical,
                reranker=reranker,
                reranker_spec=spec.reranker,
                rocchio=spec.feedback.rocchio,
            ),
        )

    def close(self) -> None:
        self.dense.close()
        self.lexical.close()
        self.store.close()
