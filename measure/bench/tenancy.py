"""What an index per tenant costs the embedded BM25 backend (`lexical.tenantIsolation`).

The same chunks (Cranfield's, spread round robin over N tenants) go into one shared tantivy
index and into an index per tenant, for each N; then every query runs against every layout in
turn, interleaved query by query, so a noisy machine slows all of them alike. Reported per
layout and N: build time (one bulk upsert, as the BM25 view writes), disk, query p50/p99
(top-100, for the query's tenant), and how often the top 10 of the two layouts differ (what
shared statistics change in a tenant's own ranking).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ragindex.lexical import TantivyIndex, TenantIndexes
from ragindex.measure.evals.collections import Collection
from ragindex.measure.stats import percentiles, text_table
from ragindex.protocols import LexicalIndex
from ragindex.types import Chunk

LAYOUTS: dict[str, Callable[[Path], TantivyIndex | TenantIndexes]] = {
    "shared": TantivyIndex.open,
    "index-per-tenant": TenantIndexes.open,
}
TOP_K = 100


def collection_chunks(collection: Collection) -> list[Chunk]:
    """One chunk per document (its title and text), as the BM25 leg indexes them."""
    return [
        Chunk(
            "t0",
            f"{collection.name}:{d.doc_id}:0",
            collection.name,
            d.doc_id,
            0,
            d.title,
            d.text or d.title,
            "",
        )
        for d in collection.corpus.values()
        if (d.text or d.title).strip()
    ]


def spread(chunks: Sequence[Chunk], tenants: int) -> list[Chunk]:
    """The chunks dealt round robin to tenants t0..t<tenants-1>."""
    return [dataclasses.replace(c, tenant_id=f"t{i % tenants}") for i, c in enumerate(chunks)]


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_tenancy_bench(
    chunks: Sequence[Chunk],
    queries: Sequence[str],
    root: Path,
    tenant_counts: Sequence[int] = (2, 50),
    repeats: int = 3,
) -> dict[str, Any]:
    """Build every (layout, N) index under `root`, then time the queries interleaved."""
    indexes: dict[tuple[str, int], LexicalIndex] = {}
    result: dict[str, Any] = {"chunks": len(chunks), "queries": len(queries), "configs": {}}
    try:
        for n in tenant_counts:
            dealt = spread(chunks, n)
            for layout, opener in LAYOUTS.items():
                path = root / f"{layout}-{n}"
                start = time.perf_counter()
                built = opener(path)
                built.upsert(dealt)
                indexes[(layout, n)] = built
                result["configs"][f"{layout} N={n}"] = {
                    "build_s": round(time.perf_counter() - start, 3),
                    "disk_mb": round(disk_bytes(path) / 1e6, 2),
                }
        latencies: dict[tuple[str, int], list[float]] = {key: [] for key in indexes}
        top10: dict[tuple[str, int], list[list[str]]] = {key: [] for key in indexes}
        for _ in range(repeats):
            for q, query in enumerate(queries):
                for (layout, n), index in indexes.items():
                    start = time.perf_counter()
                    hits = index.search(query, TOP_K, f"t{q % n}")
                    latencies[(layout, n)].append(time.perf_counter() - start)
                    top10[(layout, n)].append([h.chunk_id for h in hits[:10]])
    finally:
        for index in indexes.values():
            index.close()
    for (layout, n), times in latencies.items():
        config = result["configs"][f"{layout} N={n}"]
        config.update(percentiles([t * 1000 for t in times], digits=3))
        shared = top10[("shared", n)]
        differ = sum(a != b for a, b in zip(top10[(layout, n)], shared, strict=True))
        config["top10_differs_from_shared"] = round(differ / len(shared), 3)
    return result


def tenancy_table(result: Mapping[str, Any]) -> str:
    rows = [
        [
            name,
            f"{c['build_s']:.2f}",
            f"{c['disk_mb']:.2f}",
            f"{c['p50_ms']:.3f}",
            f"{c['p99_ms']:.3f}",
            f"{c['top10_differs_from_shared']:.0%}",
        ]
        for name, c in result["configs"].items()
    ]
    header = ["layout", "build s", "disk MB", "p50 ms", "p99 ms", "top-10 differs"]
    return text_table(header, rows)
