"""ragindex.models: the embedders and rerankers, loaded from the spec's model section.

- `load_embedder`, `resolve_model_path`: the embedder a spec names (sentence-transformers,
  FlagEmbedding or ONNX Runtime: `SentenceTransformerEmbedder`, `FlagEmbedder`, `OnnxEmbedder`),
  and where its weights are (a local directory, or a packaged model by name: all-MiniLM-L6-v2,
  all-mpnet-base-v2; see `ragindex.models.packaged`); `TokenCounter`: the tokenizer alone;
- `SerializedEmbedder`: one embedder for a replica's threads, one model call at a time,
  single queries that arrive together embedded in one call;
- `load_reranker`: the cross-encoder reranker a spec names (`CrossEncoderReranker`).

torch, transformers and ONNX Runtime load when a model does, not with this package.
"""

from typing import TYPE_CHECKING

from ragindex.faces import lazy_face

if TYPE_CHECKING:
    from ragindex.models.embedder import (
        FlagEmbedder,
        SentenceTransformerEmbedder,
        load_embedder,
        resolve_model_path,
    )
    from ragindex.models.onnx_embedder import OnnxEmbedder, TokenCounter
    from ragindex.models.reranker import CrossEncoderReranker, load_reranker
    from ragindex.models.shared import SerializedEmbedder

__all__ = [
    "CrossEncoderReranker",
    "FlagEmbedder",
    "OnnxEmbedder",
    "SentenceTransformerEmbedder",
    "SerializedEmbedder",
    "TokenCounter",
    "load_embedder",
    "load_reranker",
    "resolve_model_path",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_face(
        __name__,
        {
            "embedder": [
                "FlagEmbedder",
                "SentenceTransformerEmbedder",
                "load_embedder",
                "resolve_model_path",
            ],
            "onnx_embedder": ["OnnxEmbedder", "TokenCounter"],
            "reranker": ["CrossEncoderReranker", "load_reranker"],
            "shared": ["SerializedEmbedder"],
        },
    )
