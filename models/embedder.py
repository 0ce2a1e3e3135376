"""Embedding model wrappers: sentence-transformers (default), FlagEmbedding and, in
`onnx_embedder`, ONNX Runtime (backends onnx and onnx-int8).

All load weights from local disk only (nothing is downloaded at run time), apply the
spec's query/passage prefixes, batch by `spec.batch_size`, and return float32, L2-normalised,
C-contiguous arrays, so FAISS can take them without a copy. The `identity` stamps every index
built from these vectors; its weights hash is read once per weights file version.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ragindex.config import ONNX_BACKENDS, EmbedderSpec, ModelSourceSpec, model_directory
from ragindex.errors import InvalidInput
from ragindex.models.packaged import PACKAGED_MODELS, packaged_model_dir
from ragindex.protocols import Embedder, Vectors
from ragindex.types import ModelIdentity

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx")


def offline_mode() -> None:
    """Models come from packages or local paths; a hub lookup would hang without internet."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def resolve_model_path(
    model: str,
    source: ModelSourceSpec | None = None,
    role: Literal["embedder", "reranker"] = "embedder",
) -> Path:
    """The model directory: from the volume the operator mounted, downloaded from the hub, or
    (packaged) the directory of the packaged model of that name (`PACKAGED_MODELS`), otherwise
    a local model directory."""
    if source is not None and source.kind == "volume":
        mounted = Path(model_directory(role, source) or "")
        if not mounted.is_dir():
            raise InvalidInput(
                f"{role} model {model!r}: {mounted} is not a directory (source volume"
                f" {source.claim_name or source.image_reference}, path {source.path!r})"
            )
        return mounted
    if source is not None and source.kind == "hub":
        return _hub_snapshot(model, role)
    packaged = packaged_model_dir(model)
    if packaged is not None:
        return packaged
    path = Path(model).expanduser()
    if not path.is_dir():
        names = " or ".join(repr(name) for name in PACKAGED_MODELS)
        raise InvalidInput(f"model {model!r} is neither {names} nor a local model directory")
    return path


def _hub_snapshot(model: str, role: str) -> Path:
    """The hub's copy of the model (token from HF_TOKEN, which the operator sets from the
    source's Secret); the pods of a hub source run with HF_HUB_OFFLINE=0."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(model, token=os.environ.get("HF_TOKEN") or None))
    except Exception as e:  # the hub client raises many kinds (offline, auth, not found)
        raise InvalidInput(f"{role} model {model!r} cannot be fetched from the hub: {e}") from e


def weight_files(model_dir: Path) -> list[Path]:
    """Every weights file under the model directory, in a stable order."""
    return sorted(
        p for p in model_dir.rglob("*") if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES)
    )


def weights_hash(model_dir: Path) -> str:
    """blake2b over the weights files' relative names and bytes (cached per file version)."""
    files = weight_files(model_dir)
    if not files:
        raise InvalidInput(f"model directory {model_dir} holds no weights file")
    signature = tuple(
        (str(p.relative_to(model_dir)), p.stat().st_size, p.stat().st_mtime_ns) for p in files
    )
    return _hash_files(str(model_dir), signature)


@functools.lru_cache(maxsize=32)
def _hash_files(model_dir: str, signature: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for rel, _size, _mtime in signature:
        digest.update(rel.encode() + b"\x00")
        with open(Path(model_dir) / rel, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def configured_max_seq_length(model_dir: Path, fallback: int) -> int:
    """The sequence limit the model was trained with (sentence-transformers' own config)."""
    cfg = model_dir / "sentence_bert_config.json"
    if cfg.is_file():
        value = json.loads(cfg.read_text(encoding="utf-8")).get("max_seq_length")
        if isinstance(value, int) and value > 0:
            return value
    return fallback


def _as_output(vectors: Any, dimension: int) -> Vectors:
    """float32, C-contiguous, unit rows: the contract every index relies on."""
    out = np.array(vectors, dtype=np.float32, order="C", copy=True).reshape(-1, dimension)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise InvalidInput("texts must be a sequence of strings, not one string")
    items = list(texts)
    for i, t in enumerate(items):
        if not isinstance(t, str):
            raise InvalidInput(f"texts[{i}] is {type(t).__name__}, not a string")
    return items


class BaseEmbedder:
    """Prefixes, batching and output checks shared by every backend."""

    identity: ModelIdentity
    max_seq_length: int

    def __init__(self, spec: EmbedderSpec) -> None:
        self.spec = spec
        self.model_dir = resolve_model_path(spec.model, spec.source)
        self.device = "cuda" if spec.gpus > 0 else "cpu"

    def _stamp(self, dimension: int, quantization: str = "") -> None:
        self.identity = ModelIdentity(
            name=self.spec.model,
            weights_hash=weights_hash(self.model_dir),
            dimension=dimension,
            normalized=True,
            query_prefix=self.spec.query_prefix,
            passage_prefix=self.spec.passage_prefix,
            quantization=quantization,
        )

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return self._embed([self.spec.passage_prefix + t for t in _check_texts(texts)])

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._embed([self.spec.query_prefix + t for t in _check_texts(texts)])

    def _embed(self, texts: list[str]) -> Vectors:
        dim = self.identity.dimension
        if not texts:
            return np.empty((0, dim), dtype=np.float32)
        size = self.spec.batch_size
        parts = [self._encode(texts[i : i + size]) for i in range(0, len(texts), size)]
        return _as_output(np.concatenate(parts, axis=0), dim)

    def _encode(self, batch: list[str]) -> Any:
        raise NotImplementedError

    def count_tokens(self, text: str) -> int:
        """Tokens of the text alone (no special tokens, no prefix), untruncated."""
        ids = self._tokenizer(text, add_special_tokens=False, truncation=False, verbose=False)
        return len(ids["input_ids"])

    @property
    def _tokenizer(self) -> Any:
        raise NotImplementedError


class SentenceTransformerEmbedder(BaseEmbedder):
    """The default backend: sentence-transformers with the model's own pooling config."""

    def __init__(self, spec: EmbedderSpec) -> None:
        super().__init__(spec)
        offline_mode()
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(
            str(self.model_dir), device=self.device, local_files_only=True
        )
        self.max_seq_length = int(self.model.max_seq_length)
        get_dim = getattr(self.model, "get_embedding_dimension", None) or (
            self.model.get_sentence_embedding_dimension
        )
        self._stamp(int(get_dim()))

    def _encode(self, batch: list[str]) -> Any:
        return self.model.encode(
            batch,
            batch_size=len(batch),
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )

    @property
    def _tokenizer(self) -> Any:
        return self.model.tokenizer


class FlagEmbedder(BaseEmbedder):
    """FlagEmbedding's FlagModel with mean pooling, which matches sentence-transformers."""

    def __init__(self, spec: EmbedderSpec) -> None:
        super().__init__(spec)
        offline_mode()
        from FlagEmbedding import FlagModel

        self.model = FlagModel(
            str(self.model_dir),
            pooling_method="mean",
            normalize_embeddings=True,
            use_fp16=False,
            devices=self.device,
            batch_size=spec.batch_size,
        )
        positions = int(getattr(self.model.model.config, "max_position_embeddings", 512))
        self.max_seq_length = configured_max_seq_length(self.model_dir, positions)
        self._stamp(int(self.model.model.config.hidden_size))

    def _encode(self, batch: list[str]) -> Any:
        # One call per batch; batch_size above len(batch) keeps FlagModel's progress bars off.
        return self.model.encode(
            batch,
            batch_size=len(batch) + 1,
            max_length=self.max_seq_length,
            convert_to_numpy=True,
        )

    @property
    def _tokenizer(self) -> Any:
        return self.model.tokenizer


def load_embedder(spec: EmbedderSpec) -> Embedder:
    """Build the embedder the spec names (offline; weights from a package or a local path)."""
    if spec.backend == "flagembedding":
        return FlagEmbedder(spec)
    if spec.backend in ONNX_BACKENDS:
        from ragindex.models.onnx_embedder import OnnxEmbedder  # no torch on this path

        return OnnxEmbedder(spec)
    return SentenceTransformerEmbedder(spec)
