"""all-mpnet-base-v2, the second packaged embedder: resolved offline from its five split
wheels, run through the ONNX path with torch sentence-transformers' vectors, 768-d under its
own identity (so its own generation), refused by an index of MiniLM vectors and the other way
round, and a clear error when its packages are missing."""

from __future__ import annotations

import json
import zipfile
from importlib import metadata
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

import ragindex.models.packaged as packaged
from ragindex.app import EmbeddedIndex
from ragindex.config import EmbedderSpec, HnswSpec, RagIndexSpec
from ragindex.errors import IdentityMismatch, InvalidInput
from ragindex.generations import changed_generation_fields, index_generation
from ragindex.measure.evals.bundled import bundled_dir
from ragindex.models import (
    OnnxEmbedder,
    SentenceTransformerEmbedder,
    load_embedder,
    resolve_model_path,
)
from ragindex.models.packaged import MPNET_PARTS, PACKAGED_MPNET
from ragindex.protocols import Embedder
from ragindex.shards import DenseShard
from ragindex.testing import EmbedderContract
from ragindex.types import Document

MPNET = {"model": PACKAGED_MPNET, "batch_size": 4}
FP32_TOLERANCE = 5e-5  # per component; measured 7.5e-6 (a 384-token text; MiniLM's: 2e-7)


@pytest.fixture(scope="module")
def mpnet_onnx() -> OnnxEmbedder:
    emb = load_embedder(EmbedderSpec.model_validate({**MPNET, "backend": "onnx"}))
    assert isinstance(emb, OnnxEmbedder)
    return emb


@pytest.fixture(scope="module")
def mpnet_torch() -> SentenceTransformerEmbedder:
    spec = EmbedderSpec.model_validate({**MPNET, "backend": "sentence-transformers"})
    return SentenceTransformerEmbedder(spec)


@pytest.fixture(scope="module")
def manual_sections() -> dict[str, str]:
    """Five real passages: sections of the GNU manuals collection that ships with ragindex."""
    folder = bundled_dir("gnu-manuals")
    assert folder is not None
    wanted = ("coreutils.sort-invocation", "coreutils.uniq-invocation", "grep.Usage")
    with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
        docs = {d["_id"]: d["text"] for d in map(json.loads, fh)}
    picked = {doc_id: docs[doc_id] for doc_id in wanted}
    picked.update(islice(((k, v) for k, v in docs.items() if k not in picked), 2))
    return picked


def test_onnx_gives_sentence_transformers_vectors_on_real_passages(
    mpnet_onnx: OnnxEmbedder,
    mpnet_torch: SentenceTransformerEmbedder,
    manual_sections: dict[str, str],
) -> None:
    passages = list(manual_sections.values())
    onnx_vectors = mpnet_onnx.embed_passages(passages)
    torch_vectors = mpnet_torch.embed_passages(passages)
    assert onnx_vectors.shape == torch_vectors.shape == (len(passages), 768)
    assert np.abs(onnx_vectors - torch_vectors).max() < FP32_TOLERANCE
    assert mpnet_onnx.identity == mpnet_torch.identity  # same vectors: the same identity
    # sentence-transformers' config for the model: 384 tokens, mean pooling, normalised
    assert mpnet_onnx.max_seq_length == mpnet_torch.max_seq_length == 384
    assert mpnet_onnx.identity.dimension == 768 and mpnet_onnx.identity.normalized


def test_its_identity_and_generation_are_not_minilms(
    mpnet_onnx: OnnxEmbedder, minilm: Embedder
) -> None:
    ours, theirs = mpnet_onnx.identity, minilm.identity
    assert (ours.name, theirs.name) == (PACKAGED_MPNET, "all-MiniLM-L6-v2")
    assert (ours.dimension, theirs.dimension) == (768, 384)
    assert ours.weights_hash != theirs.weights_hash
    assert ours.fingerprint() != theirs.fingerprint()
    default = RagIndexSpec()
    chosen = RagIndexSpec.model_validate({"embedder": {"model": PACKAGED_MPNET}})
    assert changed_generation_fields(default, chosen) == ["embedder.model"]
    assert index_generation(default) != index_generation(chosen)


def test_an_index_refuses_the_other_models_vectors(
    mpnet_onnx: OnnxEmbedder, minilm: Embedder, manual_sections: dict[str, str]
) -> None:
    ids, passages = list(manual_sections), list(manual_sections.values())
    query = ["how do I sort a file numerically on its second column"]
    for built_by, asked_by in ((mpnet_onnx, minilm), (minilm, mpnet_onnx)):
        shard = DenseShard(built_by.identity, HnswSpec(), 1000)
        shard.upsert("acme", ids, built_by.embed_passages(passages))
        hits = shard.search(built_by.embed_queries(query)[0], 1, "acme", built_by.identity)
        assert [h.chunk_id for h in hits] == ["coreutils.sort-invocation"]
        with pytest.raises(IdentityMismatch, match="vectors of two models never mix") as err:
            shard.search(asked_by.embed_queries(query)[0], 1, "acme", asked_by.identity)
        assert built_by.identity.name in str(err.value)
        assert asked_by.identity.name in str(err.value)


def test_an_embedded_index_builds_it_as_a_generation_beside_minilms(tmp_path: Path) -> None:
    """One data directory, one spec per model: each builds and searches its own generation."""
    docs = [
        Document("man", "sort", "sort", "sort sorts lines; -n compares them numerically."),
        Document("man", "uniq", "uniq", "uniq -c prefixes each line by how often it occurs."),
        Document("man", "gzip", "gzip", "gzip reduces the size of files with Lempel-Ziv."),
    ]
    generations = []
    for model in ("all-MiniLM-L6-v2", PACKAGED_MPNET):
        spec = RagIndexSpec.model_validate({"embedder": {"model": model}})
        index = EmbeddedIndex(tmp_path, spec)
        try:
            index.upsert("acme", docs)
            found = index.query.search("acme", "count repeated lines", k=1, mode="dense")
        finally:
            index.close()
        assert [h.chunk.doc_id for h in found.hits] == ["uniq"]
        generations.append(index_generation(spec))
    assert sorted(p.name for p in (tmp_path / "replicas").iterdir()) == sorted(generations)
    assert len(set(generations)) == 2


def test_the_hub_name_resolves_to_the_same_weights() -> None:
    assert resolve_model_path(f"sentence-transformers/{PACKAGED_MPNET}") == resolve_model_path(
        PACKAGED_MPNET
    )


def test_missing_packages_say_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = metadata.distribution

    def without_part_3(name: str) -> metadata.Distribution:
        if name == MPNET_PARTS[2]:
            raise metadata.PackageNotFoundError(name)
        return installed(name)

    monkeypatch.setattr(packaged.metadata, "distribution", without_part_3)
    for backend in ("onnx", "sentence-transformers"):
        with pytest.raises(InvalidInput) as err:
            load_embedder(EmbedderSpec.model_validate({**MPNET, "backend": backend}))
        message = str(err.value)
        assert f"missing or incomplete: {MPNET_PARTS[2]}" in message
        assert "--no-deps -r requirements-mpnet.txt" in message
        assert all(part in message for part in MPNET_PARTS)


def _volumes(tmp_path: Path, files: dict[str, bytes], parts: int) -> list[tuple[Path, str]]:
    """A zip of `files` under the model's folder (stored: a damaged byte fails its CRC),
    split in `parts` volumes as the wheels are."""
    whole = tmp_path / "whole.zip"
    with zipfile.ZipFile(whole, "w", zipfile.ZIP_STORED) as archive:
        for name, data in files.items():
            archive.writestr(f"{PACKAGED_MPNET}/{name}", data)
    data = whole.read_bytes()
    step = -(-len(data) // parts)
    volumes = []
    for i in range(parts):
        path = tmp_path / f"part_{i + 1:03d}" / f"{PACKAGED_MPNET}.zip.{i + 1:03d}"
        path.parent.mkdir()
        path.write_bytes(data[i * step : (i + 1) * step])
        volumes.append((path, f"hash-{i}"))
    return volumes


def test_volumes_join_into_the_model_directory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGINDEX_CACHE", str(tmp_path / "cache"))
    files = {"config.json": b'{"dim": 768}', "1_Pooling/config.json": bytes(range(256)) * 99}
    volumes = _volumes(tmp_path, files, parts=5)
    model_dir = packaged.unpacked_mpnet(volumes)
    assert model_dir.parent == tmp_path / "cache" / "models"
    assert {str(p.relative_to(model_dir)): p.read_bytes() for p in model_dir.rglob("*.json")} == (
        files
    )
    stamp = (model_dir / "config.json").stat().st_mtime_ns
    assert packaged.unpacked_mpnet(volumes) == model_dir  # unpacked once
    assert (model_dir / "config.json").stat().st_mtime_ns == stamp
    assert [p.name for p in model_dir.parent.iterdir() if not p.name.endswith(".lock")] == [
        model_dir.name
    ]  # no staging folder left behind


def test_a_corrupt_volume_is_refused_and_nothing_is_unpacked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGINDEX_CACHE", str(tmp_path / "cache"))
    volumes = _volumes(tmp_path, {"model.safetensors": bytes(range(256)) * 400}, parts=3)
    middle = volumes[1][0]
    damaged = bytearray(middle.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    middle.write_bytes(bytes(damaged))
    with pytest.raises(InvalidInput, match="do not join into a valid zip"):
        packaged.unpacked_mpnet(volumes)
    assert [p for p in (tmp_path / "cache" / "models").iterdir() if p.name[0] != "."] == []


class TestMpnetOnnxContract(EmbedderContract):
    MAX_COSINE_DISTANCE = 1e-5  # the same graph as torch's: measured cosine 1.0 in float32

    @pytest.fixture
    def embedder(self, mpnet_onnx: OnnxEmbedder) -> OnnxEmbedder:
        return mpnet_onnx

    @pytest.fixture
    def reference(self, mpnet_torch: SentenceTransformerEmbedder) -> SentenceTransformerEmbedder:
        return mpnet_torch
