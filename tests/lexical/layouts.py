"""The embedded BM25 backend's two layouts (`lexical.tenantIsolation`), for parametrizing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ragindex.lexical import TantivyIndex, TenantIndexes

EmbeddedBm25 = TantivyIndex | TenantIndexes
OpenBm25 = Callable[[Path], EmbeddedBm25]
LAYOUTS: dict[str, OpenBm25] = {
    "shared": TantivyIndex.open,
    "index-per-tenant": TenantIndexes.open,
}
