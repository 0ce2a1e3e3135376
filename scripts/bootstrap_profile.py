"""Time (or profile) a new replica's bootstrap alone, outside Serve: `ragindex bench serve`'s
`bootstrap_s` phase without the rest of the benchmark.

    python scripts/bootstrap_profile.py load    N DATA_DIR  # N synthetic chunks into the log
    python scripts/bootstrap_profile.py publish N DATA_DIR  # replay all, publish snapshots
    python scripts/bootstrap_profile.py time    N DATA_DIR  # a fresh replica: snapshot + tail
    python scripts/bootstrap_profile.py prof    N DATA_DIR  # the same under cProfile

Each replica gets a fresh directory (removed afterwards); `publish` is the replica that
replays every chunk (no snapshot in the log yet) and publishes its shards' snapshots.
"""

from __future__ import annotations

import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ragindex.app import APP_NAME
from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE
from ragindex.app.serve.query_side import LocalQuerySide
from ragindex.config import RagIndexSpec
from ragindex.measure.bench.serve import BENCH_SPEC
from ragindex.measure.bench.serve_corpus import SyntheticPassages, load_corpus
from ragindex.models import load_embedder


def main(mode: str, chunks: int, data: Path) -> None:
    spec = RagIndexSpec.model_validate(BENCH_SPEC)
    if mode == "load":
        start = time.perf_counter()
        real = load_embedder(spec.embedder)
        load_corpus(data, spec, SyntheticPassages(real), chunks, np.random.default_rng(1))
        print(f"load_s {time.perf_counter() - start:.1f}")
        return
    directory = Path(tempfile.mkdtemp(prefix="ragindex-replica-"))
    side = LocalQuerySide(
        spec, data, APP_NAME, DEFAULT_NAMESPACE, directory, publish=mode == "publish"
    )
    side.load_models()
    profile = cProfile.Profile()
    start = time.perf_counter()
    if mode == "prof":
        profile.enable()
    if not side.try_open():
        raise SystemExit(f"no chunks topic in {data}: run `load` first")
    profile.disable()
    seconds = time.perf_counter() - start
    assert side.dense is not None
    offsets = [r.start_offset for r in side.dense.replicas]
    print(f"{mode} bootstrap_s {seconds:.2f} (replay began at chunk offsets {offsets})")
    if mode == "prof":
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
    side.close()
    shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]))
