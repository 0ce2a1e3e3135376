"""`MappedVectors`, the float32 refine vectors on local disk: rows by position through growth
and removal, the file unlinked inside the scratch directory, snapshot bytes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ragindex.config import DenseIndexSpec, HnswSpec
from ragindex.shards import TenantPartition
from ragindex.shards.mapped_vectors import MIN_CAPACITY, MappedVectors

DIM = 8


def rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def open_files_under(directory: Path) -> set[str]:
    """Targets of this process's open descriptors inside `directory` (a map holds a duplicate
    of the file's descriptor: one target)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            found.add(target)
    return found


def test_rows_keep_their_values_through_growth_and_removal(tmp_path: Path) -> None:
    store = MappedVectors(DIM, tmp_path)
    x = rows(3 * MIN_CAPACITY + 5)  # grows the file twice past its first capacity
    for start in range(0, len(x), 1000):
        store.add(x[start : start + 1000])
    assert store.ntotal == len(x) and store.disk_bytes == len(x) * DIM * 4
    picks = np.array([0, 7, MIN_CAPACITY, len(x) - 1])
    assert np.array_equal(store.reconstruct_batch(picks), x[picks])
    gone = np.arange(0, len(x), 3)  # every third row, the first included
    store.remove(gone)
    kept = np.delete(x, gone, axis=0)
    assert store.ntotal == len(kept)
    assert np.array_equal(store.reconstruct_batch(np.arange(len(kept))), kept)
    store.remove(np.array([len(kept) - 1]))  # the last row only: nothing moves
    assert np.array_equal(store.reconstruct_batch(np.arange(len(kept) - 1)), kept[:-1])
    store.add(x[:2])
    assert np.array_equal(store.reconstruct_batch(np.array([len(kept) - 1, len(kept)])), x[:2])
    with pytest.raises(IndexError, match="row positions"):
        store.reconstruct_batch(np.array([store.ntotal]))


def test_the_file_lives_unlinked_in_the_scratch_directory(tmp_path: Path) -> None:
    store = MappedVectors(DIM, tmp_path / "scratch")
    store.add(rows(10))
    assert list((tmp_path / "scratch").iterdir()) == []  # nothing to clean up after a crash
    (held,) = open_files_under(tmp_path / "scratch")
    assert held.endswith("(deleted)")
    copy = MappedVectors.from_bytes(store.to_bytes(), DIM, tmp_path / "scratch")
    assert np.array_equal(copy.reconstruct_batch(np.arange(10)), rows(10))
    with pytest.raises(ValueError, match="whole 8-d float32 rows"):
        MappedVectors.from_bytes(b"\0" * 12, DIM)


def test_a_disk_refine_partition_keeps_its_vectors_on_disk_and_in_its_snapshot(
    tmp_path: Path,
) -> None:
    spec = DenseIndexSpec.model_validate(
        {
            "type": "ivf_pq",
            "train_min": 200,
            "ivf": {"nlist": 8, "nprobe": 8},
            "pq": {"m": 4, "nbits": 6},
            "refine": {"storage": "disk"},
        }
    )
    hnsw = HnswSpec(m=16, ef_construction=64, ef_search=64)
    x = rows(400)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ids = [f"c{i}" for i in range(400)]
    part = TenantPartition(DIM, hnsw, 0, spec, tmp_path / "a")
    part.upsert(ids, x)
    assert part.kind == "ivf_pq" and part.memory_bytes()[1] == 400 * DIM * 4
    assert len(open_files_under(tmp_path / "a")) == 1
    hit = part.search(x[5], 1)[0]
    assert hit.chunk_id == "c5" and hit.score == pytest.approx(1.0, abs=1e-5)  # float32 score
    loaded = TenantPartition.from_files(*part.to_files(), DIM, hnsw, 0, spec, tmp_path / "b")
    assert loaded.memory_bytes() == part.memory_bytes()
    assert len(open_files_under(tmp_path / "b")) == 1
    for q in x[:20]:
        assert loaded.search(q, 10) == part.search(q, 10)
