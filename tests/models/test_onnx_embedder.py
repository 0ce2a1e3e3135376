"""The ONNX Runtime backends against sentence-transformers on the same packaged weights:
the same vectors (fp32) or close ones under another identity (int8), the same tokenizer,
the same output contract, clear errors, and no torch on the query path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from ragindex.config import EmbedderSpec, RagIndexSpec
from ragindex.errors import BackendUnavailable, InvalidInput
from ragindex.generations import changed_generation_fields
from ragindex.models import (
    OnnxEmbedder,
    SentenceTransformerEmbedder,
    TokenCounter,
    load_embedder,
    resolve_model_path,
)
from ragindex.models.onnx_embedder import onnx_cache_root
from ragindex.testing import TEXTS, EmbedderContract

FP32_TOLERANCE = 1e-5  # measured: 1.6e-7, the size of torch's own batch-size noise


@pytest.fixture(scope="module")
def onnx_fp32() -> OnnxEmbedder:
    emb = load_embedder(EmbedderSpec.model_validate({"backend": "onnx", "batch_size": 4}))
    assert isinstance(emb, OnnxEmbedder)
    return emb


@pytest.fixture(scope="module")
def onnx_int8() -> OnnxEmbedder:
    emb = load_embedder(EmbedderSpec.model_validate({"backend": "onnx-int8", "batch_size": 4}))
    assert isinstance(emb, OnnxEmbedder)
    return emb


def test_fp32_gives_torchs_vectors_and_identity(
    st_embedder: SentenceTransformerEmbedder, onnx_fp32: OnnxEmbedder
) -> None:
    for embed in ("embed_passages", "embed_queries"):
        torch_vectors = getattr(st_embedder, embed)(TEXTS)
        onnx_vectors = getattr(onnx_fp32, embed)(TEXTS)
        assert np.abs(torch_vectors - onnx_vectors).max() < FP32_TOLERANCE
    assert onnx_fp32.identity == st_embedder.identity
    assert onnx_fp32.identity.fingerprint() == st_embedder.identity.fingerprint()
    assert onnx_fp32.max_seq_length == st_embedder.max_seq_length == 256


def test_int8_is_close_but_another_identity(
    st_embedder: SentenceTransformerEmbedder, onnx_int8: OnnxEmbedder
) -> None:
    cosine = (st_embedder.embed_queries(TEXTS) * onnx_int8.embed_queries(TEXTS)).sum(axis=1)
    assert cosine.min() > 0.95  # measured 0.98 (short texts lose most)
    assert onnx_int8.identity != st_embedder.identity
    assert onnx_int8.identity.quantization.startswith("onnx-int8-dynamic-per-channel:")
    assert onnx_int8.identity.weights_hash == st_embedder.identity.weights_hash
    assert onnx_int8.identity.fingerprint() != st_embedder.identity.fingerprint()
    assert "quantization" not in st_embedder.identity.to_dict()  # old stamps stay valid


def test_the_token_counter_alone_counts_as_the_embedder(onnx_fp32: OnnxEmbedder) -> None:
    """What an Ingest replica chunks with while a pool embeds: no weights, the same counts."""
    counter = TokenCounter(resolve_model_path(RagIndexSpec().embedder.model))
    for text in ["", "hello world", "Hello, world!", "aerodynamics " * 400, *TEXTS]:
        assert counter(text) == onnx_fp32.count_tokens(text)


def test_switching_torch_to_onnx_fp32_keeps_the_generation_int8_does_not() -> None:
    torch_spec = RagIndexSpec.model_validate({"embedder": {"backend": "sentence-transformers"}})
    fp32 = RagIndexSpec.model_validate({"embedder": {"backend": "onnx"}})
    int8 = RagIndexSpec.model_validate({"embedder": {"backend": "onnx-int8"}})
    assert changed_generation_fields(torch_spec, fp32) == []
    assert changed_generation_fields(torch_spec, int8) == ["embedder.backend"]
    assert changed_generation_fields(fp32, int8) == ["embedder.backend"]


def test_spec_errors_are_clear() -> None:
    with pytest.raises(ValidationError, match="runs on CPU"):
        EmbedderSpec.model_validate({"backend": "onnx-int8", "gpus": 1})
    with pytest.raises(ValidationError, match="'onnx-int8'"):  # the allowed values are listed
        EmbedderSpec.model_validate({"backend": "onnx-fp16"})


def test_a_model_it_cannot_reproduce_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "cls-model"  # refused before its weights are read: none copied
    shutil.copytree(
        resolve_model_path("all-MiniLM-L6-v2"),
        model,
        ignore=shutil.ignore_patterns("*.safetensors"),
    )
    pooling = model / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    config.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    pooling.write_text(json.dumps(config))
    with pytest.raises(InvalidInput, match="not mean pooling"):
        load_embedder(EmbedderSpec.model_validate({"backend": "onnx", "model": str(model)}))
    (model / "tokenizer.json").unlink()
    with pytest.raises(InvalidInput, match=r"no tokenizer\.json"):
        load_embedder(EmbedderSpec.model_validate({"backend": "onnx", "model": str(model)}))


def test_a_failed_export_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    packaged = resolve_model_path("all-MiniLM-L6-v2")
    model = tmp_path / "broken"
    shutil.copytree(packaged, model, ignore=shutil.ignore_patterns("*.safetensors"))
    (model / "model.safetensors").symlink_to(packaged / "model.safetensors")
    (model / "config.json").write_text("{not json")
    monkeypatch.setenv("RAGINDEX_ONNX_CACHE", str(tmp_path / "cache"))
    assert onnx_cache_root() == tmp_path / "cache"
    with pytest.raises(BackendUnavailable, match=r"exporting .* to ONNX failed"):
        load_embedder(EmbedderSpec.model_validate({"backend": "onnx", "model": str(model)}))
    assert not list((tmp_path / "cache").rglob("*.onnx"))  # nothing half-written


def test_the_query_path_does_not_import_torch(onnx_int8: OnnxEmbedder) -> None:
    code = (
        "import sys\n"
        "from ragindex.config import EmbedderSpec\n"
        "from ragindex.models.embedder import load_embedder\n"
        "load_embedder(EmbedderSpec(backend='onnx-int8')).embed_queries(['lift'])\n"
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True
    )
    assert done.stdout.strip() == "[]"


class TestOnnxFp32Contract(EmbedderContract):
    MAX_COSINE_DISTANCE = 1e-5  # the same graph as torch's: measured 1e-7

    @pytest.fixture
    def embedder(self, onnx_fp32: OnnxEmbedder) -> OnnxEmbedder:
        return onnx_fp32

    @pytest.fixture
    def reference(self, st_embedder: SentenceTransformerEmbedder) -> SentenceTransformerEmbedder:
        return st_embedder


class TestOnnxInt8Contract(EmbedderContract):
    MAX_COSINE_DISTANCE = 0.05  # dynamic int8 weights: measured 0.02 (short texts lose most)

    @pytest.fixture
    def embedder(self, onnx_int8: OnnxEmbedder) -> OnnxEmbedder:
        return onnx_int8

    @pytest.fixture
    def reference(self, st_embedder: SentenceTransformerEmbedder) -> SentenceTransformerEmbedder:
        return st_embedder
