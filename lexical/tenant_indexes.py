"""The embedded BM25 backend with an index per tenant: no statistic is shared across tenants.

In one shared index, BM25's IDF (how many documents hold a term) and average document length
count every tenant's chunks, so the order of one tenant's hits depends on the others' data
(README, "what tenants can learn about each other"). Here each tenant has its own tantivy index
under `<root>/<tenant>/`, so its scores are exactly what a BM25 over its chunks alone gives.
The tenant clause stays in every query all the same (DESIGN.md invariant 1).

Each tantivy writer holds a memory budget and threads, so at most `MAX_OPEN_WRITERS` stay open
(least recently written first out); searches go through read-only handles that never close
while the index is open, so a writer's eviction never disturbs a search.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, defaultdict
from collections.abc import Sequence
from pathlib import Path

from ragindex.config import Rm3Spec
from ragindex.errors import BackendUnavailable
from ragindex.filters import TermExpr
from ragindex.lexical.documents import FieldBoosts, validate_chunks, validate_ids, validate_search
from ragindex.lexical.tantivy_index import TantivyIndex
from ragindex.types import Chunk, ScoredId, validate_tenant

MAX_OPEN_WRITERS = 4
"""Open tenant writers at most: each keeps a ~15 MB arena and its threads (50 open writers
took 324 MB and 350 threads here)."""
WRITER_HEAP_BYTES = 15_000_000  # tantivy's floor per writer thread


class TenantIndexes:
    """LexicalIndex with one tantivy index per tenant; see the module docstring."""

    def __init__(
        self,
        root: Path,
        read_only: bool = False,
        boosts: FieldBoosts | None = None,
        rm3: Rm3Spec | None = None,
    ) -> None:
        self.root = root
        self.boosts = boosts or FieldBoosts()
        self.rm3 = rm3
        self._read_only = read_only
        self._lock = threading.Lock()  # guards the two maps, not the indexes
        self._readers: dict[str, TantivyIndex] = {}
        self._writers: OrderedDict[str, TantivyIndex] = OrderedDict()
        self._closed = False

    @classmethod
    def open(
        cls,
        root: str | Path,
        read_only: bool = False,
        boosts: FieldBoosts | None = None,
        rm3: Rm3Spec | None = None,
    ) -> TenantIndexes:
        """The per-tenant indexes under `root` (created if absent unless `read_only`)."""
        where = Path(root)
        if read_only and not where.is_dir():
            raise BackendUnavailable(f"no per-tenant BM25 indexes at {where} to open read-only")
        if not read_only:
            where.mkdir(parents=True, exist_ok=True)
        return cls(where, read_only=read_only, boosts=boosts, rm3=rm3)

    def tenants(self) -> list[str]:
        """Tenants that have an index here."""
        return sorted(p.name for p in self.root.iterdir() if (p / "meta.json").exists())

    def _check_open(self) -> None:
        if self._closed:
            raise BackendUnavailable(f"the per-tenant BM25 indexes at {self.root} are closed")

    def _reader(self, tenant: str) -> TantivyIndex | None:
        """The tenant's read-only handle; None while it has no index."""
        with self._lock:
            self._check_open()
            reader = self._readers.get(tenant)
            if reader is None and (self.root / tenant / "meta.json").exists():
                reader = TantivyIndex.open(
                    self.root / tenant, read_only=True, boosts=self.boosts, rm3=self.rm3
                )
                self._readers[tenant] = reader
            return reader

    def _writer(self, tenant: str) -> TantivyIndex:
        """The tenant's writer, opened (evicting the least recently used) if need be."""
        with self._lock:
            self._check_open()
            if self._read_only:
                raise BackendUnavailable(f"the BM25 indexes at {self.root} are open read-only")
            writer = self._writers.get(tenant)
            if writer is not None:
                self._writers.move_to_end(tenant)
                return writer
            while len(self._writers) >= MAX_OPEN_WRITERS:
                _, evicted = self._writers.popitem(last=False)
                evicted.close()
            writer = TantivyIndex.open(self.root / tenant, heap_bytes=WRITER_HEAP_BYTES)
            self._writers[tenant] = writer
            return writer

    def _written(self, tenant: str) -> None:
        reader = self._reader(tenant)
        if reader is not None:
            reader.reload()

    def upsert(self, chunks: Sequence[Chunk], *, versions: Sequence[int] | None = None) -> None:
        """Replace-or-insert each chunk in its tenant's index; visible when this returns.
        The whole batch is validated first, so a bad one changes nothing. One writer applies
        the log in order: `versions` are not needed."""
        by_tenant: defaultdict[str, list[Chunk]] = defaultdict(list)
        for chunk in validate_chunks(chunks):
            by_tenant[chunk.tenant_id].append(chunk)
        for tenant, part in by_tenant.items():
            self._writer(tenant).upsert(part)
            self._written(tenant)

    def delete(
        self, tenant_id: str, chunk_ids: Sequence[str], *, versions: Sequence[int] | None = None
    ) -> None:
        """Remove chunks of one tenant; unknown ids (and tenants) are ignored."""
        ids = validate_ids(tenant_id, chunk_ids)
        if not ids or self._reader(tenant_id) is None:
            return
        self._writer(tenant_id).delete(tenant_id, ids)
        self._written(tenant_id)

    def search(
        self,
        query: str,
        top_k: int,
        tenant_id: str,
        access: TermExpr | None = None,
        *,
        with_chunks: int = 0,
    ) -> list[ScoredId]:
        """BM25 top_k within the tenant's own index (and its tenant clause)."""
        text, k, tenant = validate_search(query, top_k, tenant_id)
        reader = self._reader(tenant)
        if reader is None:
            return []
        return reader.search(text, k, tenant, access, with_chunks=with_chunks)

    def count(self, tenant_id: str) -> int:
        reader = self._reader(validate_tenant(tenant_id))
        return 0 if reader is None else reader.count(tenant_id)

    def reload(self) -> None:
        """See commits made since the last reload, by this or another process."""
        with self._lock:
            self._check_open()
            readers = list(self._readers.values())
        for reader in readers:
            reader.reload()

    def location(self) -> str:
        return f"tantivy per tenant {self.root.resolve()}"

    def close(self) -> None:
        """Release every writer lock; idempotent."""
        with self._lock:
            self._closed = True
            writers = list(self._writers.values())
            self._writers.clear()
            self._readers.clear()
        for writer in writers:
            writer.close()
