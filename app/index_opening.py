"""What opening an index reads: its spec, its data directory, the BM25 backend the spec asks
for, and credentials from the environment. Shared by the CLI, the Serve deployments and the
embedded data plane in one process (`ragindex.app.embedded`).

Layout of a data directory (the embedded runtime):
    log/              the file log: `docs` and `chunks.<generation>` (the source of truth)
    snapshot-log/     shard snapshots published for new replicas (a file log per shard)
    generations.json  which generation serves (ragindex.app.generation_record)
    replicas/         each replica's node-local views (dense shards with text, BM25)
    tokens.json       hashed API tokens (see ragindex.router.auth)
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from ragindex.config import ElasticsearchConnection, RagIndexSpec, parse_spec
from ragindex.errors import InvalidInput
from ragindex.generations import index_generation, lexical_alias
from ragindex.lexical import (
    ElasticsearchIndex,
    FieldBoosts,
    TantivyIndex,
    TenantIndexes,
    make_client,
)
from ragindex.protocols import LexicalIndex
from ragindex.serve_config import AUTH_DIR_ENV
from ragindex.types import ModelIdentity


def auth_dir(data_dir: Path) -> Path:
    """Where hashed API tokens live: the data dir, or a mounted Secret in the cluster."""
    return Path(os.environ.get(AUTH_DIR_ENV) or data_dir)


def default_data_dir() -> Path:
    return Path(os.environ.get("RAGINDEX_DATA_DIR", Path.home() / ".local/share/ragindex"))


def load_spec(path: Path | None) -> RagIndexSpec:
    """A spec from YAML: a bare spec or a whole RagIndex manifest; defaults when path is None."""
    if path is None:
        return RagIndexSpec()
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as err:
        raise InvalidInput(f"spec {path}: {err.strerror or err}") from err
    except yaml.YAMLError as err:
        raise InvalidInput(f"spec {path} is not YAML: {' '.join(str(err).split())}") from err
    if isinstance(data, dict) and "kind" in data and "spec" in data:
        data = data["spec"]
    return parse_spec(data, f"spec {path}")


def elasticsearch_connection() -> ElasticsearchConnection:
    """Credentials and CA for Elasticsearch from the environment (`RAGINDEX_ES_*`: the operator
    injects them, secrets as mounted files); InvalidInput naming a bad or inconsistent one."""
    return ElasticsearchConnection.from_env(os.environ)


LEXICAL_PER_TENANT_DIR = "lexical-per-tenant"


def open_lexical(
    spec: RagIndexSpec,
    data_dir: Path,
    identity: ModelIdentity,
    *,
    namespace: str,
    name: str,
    read_only: bool = False,
) -> LexicalIndex:
    """The BM25 leg the spec asks for: tantivy in the data dir, or the Elasticsearch alias of
    RagIndex `namespace/name` (`lexical_alias`).

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
            spec.lexical.elasticsearch_url,
            spec.lexical.request_timeout_s,
            elasticsearch_connection(),
        ),
        alias=lexical_alias(spec, namespace, name),
        generation=index_generation(spec),
        stamp={"embedder": identity.to_dict()},
        timeout_s=spec.lexical.request_timeout_s,
        refresh_interval_s=min(1.0, spec.freshness_s),
        boosts=boosts,
        rm3=rm3,
        # a delete's version outlives any replay that could still bring its chunk back
        gc_deletes_s=spec.log.tombstone_retention_hours * 3600,
    )
