"""ragindex.testing: contract suites every implementation of a protocol inherits in its tests.

- `DenseIndexContract` (with `LogFedDense`, `chunks_log`, `IDENTITY`), `LexicalIndexContract`
  (`random_corpus`), `LogContract` (`read_all`), `EmbedderContract` (`TEXTS`),
  `RerankerContract` (`QUERY`, `PASSAGES`).
"""

from typing import TYPE_CHECKING

from ragindex.faces import lazy_face

if TYPE_CHECKING:
    from ragindex.testing.dense import IDENTITY, DenseIndexContract, LogFedDense, chunks_log
    from ragindex.testing.embedder import TEXTS, EmbedderContract
    from ragindex.testing.lexical import LexicalIndexContract, random_corpus
    from ragindex.testing.log import LogContract, read_all
    from ragindex.testing.reranker import PASSAGES, QUERY, RerankerContract

__all__ = [
    "IDENTITY",
    "PASSAGES",
    "QUERY",
    "TEXTS",
    "DenseIndexContract",
    "EmbedderContract",
    "LexicalIndexContract",
    "LogContract",
    "LogFedDense",
    "RerankerContract",
    "chunks_log",
    "random_corpus",
    "read_all",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_face(
        __name__,
        {
            "dense": ["IDENTITY", "DenseIndexContract", "LogFedDense", "chunks_log"],
            "embedder": ["TEXTS", "EmbedderContract"],
            "lexical": ["LexicalIndexContract", "random_corpus"],
            "log": ["LogContract", "read_all"],
            "reranker": ["PASSAGES", "QUERY", "RerankerContract"],
        },
    )
