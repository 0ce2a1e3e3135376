"""ragindex.lexical: the BM25 leg, embedded (tantivy) or Elasticsearch, behind one interface."""

from ragindex.lexical.documents import FieldBoosts
from ragindex.lexical.tantivy_index import TantivyIndex
from ragindex.lexical.tenant_indexes import TenantIndexes

__all__ = ["FieldBoosts", "TantivyIndex", "TenantIndexes"]
