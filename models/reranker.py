"""Cross-encoder rerankers: sentence-transformers CrossEncoder and FlagEmbedding FlagReranker.

Both return the model's raw relevance logits (no sigmoid), so the two backends agree on the
same weights and scores keep their full resolution; only the order matters to the router.
Models load from a local directory only: no trained cross-encoder ships in a package here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragindex.config import RerankerSpec
from ragindex.errors import InvalidInput
from ragindex.models.embedder import offline_mode
from ragindex.protocols import Reranker

DEFAULT_BATCH_SIZE = 32


def _model_dir(path: str | Path) -> Path:
    model_dir = Path(path).expanduser()
    if not model_dir.is_dir():
        raise InvalidInput(f"reranker model {str(path)!r} is not a local model directory")
    return model_dir


def _check(query: str, passages: Sequence[str]) -> list[tuple[str, str]]:
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("query must be a non-empty string")
    if isinstance(passages, str):
        raise InvalidInput("passages must be a sequence of strings, not one string")
    pairs = []
    for i, p in enumerate(passages):
        if not isinstance(p, str):
            raise InvalidInput(f"passages[{i}] is {type(p).__name__}, not a string")
        pairs.append((query, p))
    return pairs


def order_by_score(scores: Sequence[float]) -> list[int]:
    """Indices from best to worst score; ties keep the input (fused) order."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


class CrossEncoderReranker:
    """sentence-transformers CrossEncoder, batched, returning raw logits."""

    def __init__(
        self, path: str | Path, batch_size: int = DEFAULT_BATCH_SIZE, device: str | None = None
    ) -> None:
        offline_mode()
        import torch
        from sentence_transformers import CrossEncoder

        self.batch_size = batch_size
        self.model = CrossEncoder(
            str(_model_dir(path)),
            device=device,
            local_files_only=True,
            activation_fn=torch.nn.Identity(),
        )

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        pairs = _check(query, passages)
        if not pairs:
            return []
        out: Any = self.model.predict(
            pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True
        )
        return [float(s) for s in out.reshape(-1)]


class FlagRerankerBackend:
    """FlagEmbedding FlagReranker (fp32), batched, returning raw logits."""

    def __init__(
        self, path: str | Path, batch_size: int = DEFAULT_BATCH_SIZE, device: str | None = None
    ) -> None:
        offline_mode()
        from FlagEmbedding import FlagReranker

        self.batch_size = batch_size
        self.model = FlagReranker(
            str(_model_dir(path)), use_fp16=False, devices=device or "cpu", normalize=False
        )

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        pairs = _check(query, passages)
        scores: list[float] = []
        # One call per batch with batch_size above its length keeps FlagReranker's bars off.
        for i in range(0, len(pairs), self.batch_size):
            batch = [list(p) for p in pairs[i : i + self.batch_size]]
            out = self.model.compute_score(batch, batch_size=len(batch) + 1)
            scores.extend(float(s) for s in (out if isinstance(out, list) else [out]))
        return scores


def load_reranker(spec: RerankerSpec, batch_size: int = DEFAULT_BATCH_SIZE) -> Reranker:
    """Build the cross-encoder the spec names, on GPU when the spec gives it one."""
    if not spec.model:
        raise InvalidInput("reranker.model is empty: give the path of a cross-encoder")
    device = "cuda" if spec.gpus > 0 else "cpu"
    if spec.backend == "flagembedding":
        return FlagRerankerBackend(spec.model, batch_size=batch_size, device=device)
    return CrossEncoderReranker(spec.model, batch_size=batch_size, device=device)
