"""ragindex.lexical: the BM25 leg, embedded (tantivy) or Elasticsearch, behind one interface.

- `TantivyIndex`, `TenantIndexes` (one tantivy index per tenant): the embedded backends;
- `ElasticsearchIndex`, `make_client`: the Elasticsearch backend and its client;
- `LexicalView`: a backend kept current from the log;
- `FieldBoosts`, `BODY_FIELD`, `TITLE_FIELD`, `analyze`: the fields, their boosts and the
  analyzer every backend shares.
"""

from typing import TYPE_CHECKING

from ragindex.faces import lazy_face

if TYPE_CHECKING:
    from ragindex.lexical.analysis import analyze
    from ragindex.lexical.documents import BODY_FIELD, TITLE_FIELD, FieldBoosts
    from ragindex.lexical.elasticsearch_index import ElasticsearchIndex, make_client
    from ragindex.lexical.tantivy_index import TantivyIndex
    from ragindex.lexical.tenant_indexes import TenantIndexes
    from ragindex.lexical.view import LexicalView

__all__ = [
    "BODY_FIELD",
    "TITLE_FIELD",
    "ElasticsearchIndex",
    "FieldBoosts",
    "LexicalView",
    "TantivyIndex",
    "TenantIndexes",
    "analyze",
    "make_client",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_face(
        __name__,
        {
            "analysis": ["analyze"],
            "documents": ["BODY_FIELD", "TITLE_FIELD", "FieldBoosts"],
            "elasticsearch_index": ["ElasticsearchIndex", "make_client"],
            "tantivy_index": ["TantivyIndex"],
            "tenant_indexes": ["TenantIndexes"],
            "view": ["LexicalView"],
        },
    )
