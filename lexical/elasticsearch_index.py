"""The production BM25 backend: Elasticsearch behind an alias, one concrete index per generation.

- Searches go through the alias `<alias>`; writes go to the concrete index
  `<alias>-<generation>` this object is bound to, one per index generation
  (`ragindex.generations.index_generation`: a re-embed or a reshard never shares an index). A
  new generation is built beside the live one and `swap_alias` moves the alias in one
  `_aliases` call (remove + add are atomic), so searches never see a gap; the old index is
  kept for rollback until `drop_generation` retires it.
- The tenant is a `filter` clause inside a bool query (DESIGN.md invariant 1): it restricts
  without changing BM25 scores. Document `_id` = tenant + chunk id (`documents.doc_key`).
- Freshness: writes use `refresh="wait_for"`, so a write returns once a refresh has made it
  searchable, and the index's `refresh_interval` (default 1 s) is the freshness bound. A forced
  refresh per write would give the same guarantee at the price of a tiny segment per write.
- Analysis is the built-in `standard` analyzer (the tantivy backend reproduces it) and BM25
  is configured explicitly with k1=1.2, b=0.75, so both backends rank alike. Title and body
  are two fields; a query is a bool `should` of boosted `term` clauses over the analysed
  terms (documents.field_clauses), the same sum of per-field scores that tantivy computes.
- Several Lexical replicas write the same index, each replaying the log at its own pace: every
  write carries the log offset of its record as an external version, so Elasticsearch keeps
  the newest write of each chunk (an older one is refused as a version conflict, which is
  success here). A delete's version is remembered for `index.gc_deletes`, set to how long the
  log keeps a tombstone, so a replica replaying from the start cannot bring a deleted chunk
  back meanwhile.
- Every request has a timeout and no retries: a down or silent server raises
  BackendUnavailable within `timeout_s` (writes: `timeout_s` + the refresh interval).
- Versions: the client major must match the server's. The test harness runs 8.19, the newest
  integration-test distribution on Maven Central (no 9.x is published there), so the client
  is pinned to 8.19; moving both to 9.x changes nothing in this module.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout, TlsError, TransportError
from elastic_transport.client_utils import DEFAULT
from elasticsearch import ApiError, Elasticsearch, NotFoundError

from ragindex.config import ElasticsearchConnection, Rm3Spec
from ragindex.errors import BackendAccessDenied, BackendUnavailable, InvalidInput, RagIndexError
from ragindex.filters import AllExpr, AnyTerm, TermExpr
from ragindex.generations import alias_switch, lexical_index_name
from ragindex.lexical.documents import (
    BODY_FIELD,
    FILTER_FIELD,
    TITLE_FIELD,
    FieldBoosts,
    doc_key,
    field_clauses,
    filter_terms,
    indexed_fields,
    is_searchable,
    validate_chunks,
    validate_ids,
    validate_search,
)
from ragindex.lexical.feedback import bm25_search
from ragindex.netutil.credentials import checked_ca_file, secret
from ragindex.types import Chunk, ScoredId

ALIAS_RE = re.compile(r"^[a-z][a-z0-9_]{0,99}$")
GENERATION_RE = re.compile(r"^[a-z0-9][a-z0-9_]{0,63}$")
BM25_K1 = 1.2
BM25_B = 0.75
_SIMILARITY = "ragindex_bm25"
DEFAULT_GC_DELETES_S = 24 * 3600.0  # the log's default tombstone retention


class BulkWriteError(RagIndexError):
    """Some items of a bulk write failed; `failures` maps chunk id to the server's reason."""

    def __init__(self, failures: dict[str, str]) -> None:
        self.failures = failures
        shown = "; ".join(f"{k}: {v}" for k, v in list(failures.items())[:5])
        super().__init__(f"{len(failures)} bulk item(s) failed: {shown}")


def make_client(
    url: str, timeout_s: float = 2.0, connection: ElasticsearchConnection | None = None
) -> Elasticsearch:
    """A client for one Elasticsearch URL: bounded timeout, no retries, and the credentials and
    CA of `connection` (a managed ECK cluster has TLS and security on; the default test server
    has both off). Secrets files are read here; a setting that cannot work with `url` (a CA
    for plain http) is InvalidInput naming it."""
    conn = connection or ElasticsearchConnection()
    ca_file = checked_ca_file(conn)
    if ca_file is not None and not url.startswith("https://"):
        raise InvalidInput(f"ca_file ({conn.env_name('ca_file')}) is set but {url} is not https")
    password, api_key = secret(conn, "password"), secret(conn, "api_key")
    return Elasticsearch(
        url,
        basic_auth=(conn.username, password) if conn.username and password else None,
        api_key=api_key,
        ca_certs=DEFAULT if ca_file is None else ca_file,  # DEFAULT: the system's CAs
        verify_certs=conn.verify_certs,
        ssl_show_warn=conn.verify_certs,
        request_timeout=timeout_s,
        max_retries=0,
        retry_on_timeout=False,
    )


def index_template(
    alias: str, refresh_interval_s: float, shards: int, replicas: int, gc_deletes_s: float
) -> dict[str, Any]:
    """Settings and mappings for every generation of `alias` (pure, for tests and operators)."""
    return {
        "index_patterns": [f"{alias}-*"],
        "template": {
            "settings": {
                "number_of_shards": shards,
                "number_of_replicas": replicas,
                "refresh_interval": f"{round(refresh_interval_s * 1000)}ms",
                "gc_deletes": f"{round(gc_deletes_s)}s",
                "similarity": {_SIMILARITY: {"type": "BM25", "k1": BM25_K1, "b": BM25_B}},
            },
            "mappings": {
                "dynamic": "strict",
                "properties": {
                    **{
                        field: {"type": "text", "analyzer": "standard", "similarity": _SIMILARITY}
                        for field in (TITLE_FIELD, BODY_FIELD)
                    },
                    "tenant_id": {"type": "keyword"},
                    "chunk_id": {"type": "keyword"},
                    "source": {"type": "keyword"},
                    "doc_id": {"type": "keyword"},
                    "generation": {"type": "keyword"},
                    FILTER_FIELD: {"type": "keyword"},
                },
            },
        },
    }


def _versions(versions: Sequence[int] | None, count: int) -> list[dict[str, Any]]:
    """The bulk metadata of each write's external version (none without `versions`)."""
    if versions is None:
        return [{}] * count
    if len(versions) != count or any(not isinstance(v, int) or v < 1 for v in versions):
        raise InvalidInput(f"versions must be {count} ints >= 1, one per write")
    return [{"version": v, "version_type": "external"} for v in versions]


def access_clause(expr: TermExpr) -> dict[str, Any]:
    """An access + filter expression as a bool filter on the chunks' filter terms."""
    if isinstance(expr, AnyTerm):
        if not expr.terms:
            return {"bool": {"must_not": [{"match_all": {}}]}}
        return {"terms": {FILTER_FIELD: sorted(expr.terms)}}
    parts = [access_clause(p) for p in expr.parts]
    if isinstance(expr, AllExpr):
        return {"bool": {"filter": parts}}
    return {"bool": {"should": parts, "minimum_should_match": 1}}


def search_body(
    terms: Mapping[str, float],
    tenant_id: str,
    boosts: FieldBoosts,
    access: TermExpr | None = None,
) -> dict[str, Any]:
    """The query: tenant (and `access`) as filters (no score); at least one boosted term
    clause must match.
    Terms are already analysed (the shared analyzer equals `standard`), so `term` clauses
    look them up as indexed."""
    should = [
        {"term": {field: {"value": term, "boost": weight}}}
        for field, term, weight in field_clauses(terms, boosts)
    ]
    filters: list[dict[str, Any]] = [{"term": {"tenant_id": tenant_id}}]
    if access is not None:
        filters.append(access_clause(access))
    return {"bool": {"filter": filters, "must": [{"bool": {"should": should}}]}}


class ElasticsearchIndex:
    """LexicalIndex on Elasticsearch; see the module docstring for the guarantees."""

    def __init__(
        self,
        client: Elasticsearch | str,
        alias: str,
        generation: str = "1",
        timeout_s: float = 2.0,
        refresh_interval_s: float = 1.0,
        shards: int = 1,
        replicas: int = 0,
        boosts: FieldBoosts | None = None,
        rm3: Rm3Spec | None = None,
        stamp: Mapping[str, Any] | None = None,
        gc_deletes_s: float = DEFAULT_GC_DELETES_S,
    ) -> None:
        if not isinstance(alias, str) or not ALIAS_RE.match(alias):
            raise InvalidInput(
                f"alias {alias!r} is malformed: 1-100 characters of a-z, 0-9 or '_',"
                " starting with a letter (no '-': it separates alias and generation)"
            )
        self._check_generation(generation)
        if not timeout_s > 0 or not refresh_interval_s > 0 or not gc_deletes_s > 0:
            raise InvalidInput("timeout_s, refresh_interval_s and gc_deletes_s must be positive")
        self._owns_client = isinstance(client, str)
        self._client = make_client(client, timeout_s) if isinstance(client, str) else client
        self.alias = alias
        self.generation = generation
        self.timeout_s = timeout_s
        self.refresh_interval_s = refresh_interval_s
        self.boosts = boosts or FieldBoosts()
        self.rm3 = rm3
        self.stamp = dict(stamp or {})  # e.g. the embedder identity, in the index's `_meta`
        self._template = index_template(alias, refresh_interval_s, shards, replicas, gc_deletes_s)
        self._admin_timeout_s = max(30.0, 10 * timeout_s)

    @classmethod
    def open(cls, client: Elasticsearch | str, alias: str, **kwargs: Any) -> ElasticsearchIndex:
        """Construct and make sure the template, the generation's index and the alias exist."""
        index = cls(client, alias, **kwargs)
        index.ensure_generation()
        return index

    @staticmethod
    def _check_generation(generation: object) -> str:
        if not isinstance(generation, str) or not GENERATION_RE.match(generation):
            raise InvalidInput(
                f"generation {generation!r} is malformed: 1-64 characters of a-z, 0-9 or '_'"
            )
        return generation

    def index_name(self, generation: str | None = None) -> str:
        return lexical_index_name(self.alias, generation or self.generation)

    def _es(self, timeout_s: float) -> Elasticsearch:
        return self._client.options(request_timeout=timeout_s, max_retries=0)

    def _call(self, what: str, timeout_s: float, fn: Any, **kwargs: Any) -> Any:
        """Run one request; a down, silent or failing server becomes BackendUnavailable."""
        try:
            return fn(self._es(timeout_s), **kwargs)
        except TlsError as exc:
            raise BackendUnavailable(
                f"Elasticsearch TLS handshake failed during {what} (is its CA the one in"
                f" {ElasticsearchConnection.env_name('ca_file')}?): {exc.message}"
            ) from exc
        except (TransportConnectionError, ConnectionTimeout) as exc:
            raise BackendUnavailable(
                f"Elasticsearch did not answer {what} within {timeout_s:g}s: {exc}"
            ) from exc
        except TransportError as exc:
            raise BackendUnavailable(f"Elasticsearch transport error during {what}: {exc}") from exc
        except ApiError as exc:
            if exc.status_code in (401, 403):
                raise BackendAccessDenied(
                    f"Elasticsearch refused {what} (HTTP {exc.status_code}, "
                    f"{'wrong credentials' if exc.status_code == 401 else 'not permitted'}):"
                    f" {exc}"
                ) from exc
            if exc.status_code >= 500 or exc.status_code == 429:
                raise BackendUnavailable(
                    f"Elasticsearch failed {what} with HTTP {exc.status_code}: {exc}"
                ) from exc
            raise

    def ensure_generation(self, generation: str | None = None) -> str:
        """Create the template and the generation's index if absent; point the alias at it
        when the alias does not exist yet. Returns the concrete index name."""
        gen = self._check_generation(generation or self.generation)
        name = self.index_name(gen)
        t = self._admin_timeout_s
        self._call(
            "put index template",
            t,
            lambda es, **kw: es.indices.put_index_template(**kw),
            name=f"{self.alias}-template",
            **self._template,
        )
        try:
            self._call(
                "create index",
                t,
                lambda es, **kw: es.indices.create(**kw),
                index=name,
                mappings={"_meta": {**self.stamp, "alias": self.alias, "generation": gen}},
            )
        except ApiError as exc:
            if exc.error != "resource_already_exists_exception":
                raise
        if not self._alias_targets():
            self._call(
                "add alias",
                t,
                lambda es, **kw: es.indices.update_aliases(**kw),
                actions=[{"add": {"index": name, "alias": self.alias}}],
            )
        return name

    def _alias_targets(self) -> list[str]:
        try:
            found = self._call(
                "get alias",
                self._admin_timeout_s,
                lambda es, **kw: es.indices.get_alias(**kw),
                name=self.alias,
            )
        except NotFoundError:
            return []
        return sorted(found.body)

    def swap_alias(self, new_generation: str) -> None:
        """Atomically point the alias at `<alias>-<new_generation>` alone: one `_aliases` call
        (`ragindex.generations.alias_switch`). The old index stays, for a rollback within the
        rollback window; `drop_generation` deletes it when it is retired."""
        gen = self._check_generation(new_generation)
        new_index = self.index_name(gen)
        t = self._admin_timeout_s
        exists = self._call(
            "check index", t, lambda es, **kw: es.indices.exists(**kw), index=new_index
        )
        if not exists:
            raise InvalidInput(f"cannot swap alias {self.alias} to {new_index}: it does not exist")
        actions = alias_switch(self.alias, self._alias_targets(), new_index)
        self._call(
            "swap alias", t, lambda es, **kw: es.indices.update_aliases(**kw), actions=actions
        )
        self.generation = gen

    def drop_generation(self, generation: str) -> None:
        """Delete a retired generation's index; the one the alias reads is refused."""
        name = self.index_name(self._check_generation(generation))
        if name in self._alias_targets():
            raise InvalidInput(f"{name} is what alias {self.alias} reads: it cannot be dropped")
        with contextlib.suppress(NotFoundError):
            self._call(
                "delete index",
                self._admin_timeout_s,
                lambda es, **kw: es.indices.delete(**kw),
                index=name,
            )

    def _bulk(self, operations: list[dict[str, Any]], chunk_ids: list[str]) -> None:
        resp = self._call(
            "bulk write",
            self.timeout_s + self.refresh_interval_s,
            lambda es, **kw: es.bulk(**kw),
            operations=operations,
            refresh="wait_for",
        )
        if not resp.get("errors"):
            return
        failures: dict[str, str] = {}
        for chunk_id, item in zip(chunk_ids, resp["items"], strict=True):
            (op, result), *_ = item.items()
            missing = op == "delete" and result.get("status") == 404
            newer_there = result.get("status") == 409  # an external version at or past ours
            if "error" in result and not (missing or newer_there):
                error = result["error"]
                failures[chunk_id] = f"{error.get('type')}: {error.get('reason')}"
        if failures:
            raise BulkWriteError(failures)

    def upsert(self, chunks: Sequence[Chunk], *, versions: Sequence[int] | None = None) -> None:
        """Index (replace) each chunk by (tenant, chunk id); searchable when this returns.
        A chunk with no BM25 term only removes its previous version (see is_searchable).
        With `versions`, a chunk whose stored version is as new or newer is left as it is."""
        valid = validate_chunks(chunks)
        if not valid:
            return
        stamps = _versions(versions, len(chunks))
        index = self.index_name()
        ops: list[dict[str, Any]] = []
        for c, version in zip(valid, stamps, strict=True):
            target = {"_index": index, "_id": doc_key(c.tenant_id, c.chunk_id), **version}
            if not is_searchable(c):
                ops.append({"delete": target})
                continue
            ops.append({"index": target})
            ops.append(
                {
                    **indexed_fields(c),
                    "tenant_id": c.tenant_id,
                    "chunk_id": c.chunk_id,
                    "source": c.source,
                    "doc_id": c.doc_id,
                    "generation": self.generation,
                    FILTER_FIELD: filter_terms(c),
                }
            )
        self._bulk(ops, [c.chunk_id for c in valid])

    def delete(
        self, tenant_id: str, chunk_ids: Sequence[str], *, versions: Sequence[int] | None = None
    ) -> None:
        """Remove chunks of one tenant; unknown ids are ignored. With `versions`, a chunk
        stored with a newer version stays, and each delete's version is remembered for
        `gc_deletes` (an older write arriving later is refused)."""
        ids = validate_ids(tenant_id, chunk_ids)
        if not ids:
            return
        stamps = _versions(versions, len(chunk_ids))
        index = self.index_name()
        ops = [
            {"delete": {"_index": index, "_id": doc_key(tenant_id, i), **version}}
            for i, version in zip(ids, stamps, strict=True)
        ]
        self._bulk(ops, ids)

    def search(
        self,
        query: str,
        top_k: int,
        tenant_id: str,
        access: TermExpr | None = None,
        *,
        with_chunks: int = 0,
    ) -> list[ScoredId]:
        """BM25 top_k of one tenant through the alias (RM3-expanded when configured), `access`
        as filter clauses inside the query; text with no tokens matches nothing. The index
        holds no whole chunks, so `with_chunks` is left to the caller's fetch."""
        text, k, tenant = validate_search(query, top_k, tenant_id)
        return bm25_search(partial(self._run_terms, access=access), text, k, tenant, self.rm3)

    def _run_terms(
        self,
        terms: Mapping[str, float],
        top_k: int,
        tenant_id: str,
        with_text: bool,
        access: TermExpr | None = None,
    ) -> list[tuple[ScoredId, str]]:
        fields = ["chunk_id", TITLE_FIELD, BODY_FIELD] if with_text else ["chunk_id"]
        resp = self._call(
            "search",
            self.timeout_s,
            lambda es, **kw: es.search(**kw),
            index=self.alias,
            query=search_body(terms, tenant_id, self.boosts, access),
            size=top_k,
            source_includes=fields,
            track_total_hits=False,
        )
        hits = []
        for h in resp["hits"]["hits"]:
            source = h["_source"]
            text = "\n".join(source.get(f) or "" for f in (TITLE_FIELD, BODY_FIELD))
            hits.append((ScoredId(source["chunk_id"], float(h["_score"])), text))
        return hits

    def count(self, tenant_id: str) -> int:
        """Live chunks of one tenant (as of the last refresh)."""
        tenant = validate_search("", 1, tenant_id)[2]
        resp = self._call(
            "count",
            self.timeout_s,
            lambda es, **kw: es.count(**kw),
            index=self.alias,
            query={"term": {"tenant_id": tenant}},
        )
        return int(resp["count"])

    def analyze(self, text: str) -> list[str]:
        """Elasticsearch's own `standard` tokens for `text` (to check the tantivy analyzer)."""
        resp = self._call(
            "analyze",
            self._admin_timeout_s,
            lambda es, **kw: es.indices.analyze(**kw),
            analyzer="standard",
            text=text,
        )
        return [t["token"] for t in resp["tokens"]]

    def drop(self) -> None:
        """Delete every generation of this alias and its template (tests, teardown)."""
        t = self._admin_timeout_s
        # Named, not by wildcard: action.destructive_requires_name is on by default.
        found = self._call(
            "list indices",
            t,
            lambda es, **kw: es.indices.get(**kw),
            index=f"{self.alias}-*",
            allow_no_indices=True,
        )
        for index in sorted(found.body):
            self._call("delete index", t, lambda es, **kw: es.indices.delete(**kw), index=index)
        with contextlib.suppress(NotFoundError):
            self._call(
                "delete template",
                t,
                lambda es, **kw: es.indices.delete_index_template(**kw),
                name=f"{self.alias}-template",
            )

    def location(self) -> str:
        """The concrete index this object writes and its UUID (new whenever the index is
        made again); the address is left out: any URL of the same cluster reaches it."""
        name = self.index_name()
        found = self._call(
            "read the index UUID",
            self._admin_timeout_s,
            lambda es, **kw: es.indices.get_settings(**kw),
            index=name,
            name="index.uuid",
        )
        return f"elasticsearch index {name} uuid {found[name]['settings']['index']['uuid']}"

    def close(self) -> None:
        """Close the client if this object created it."""
        if self._owns_client:
            self._client.close()
