"""The local Router's dense leg: replicas of every shard searched together and merged by score."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ragindex.config import HnswSpec
from ragindex.shards import LogShardReplica, ReplicaDenseIndex
from ragindex.testing import IDENTITY, DenseIndexContract, LogFedDense, chunks_log

SHARDS = 3


class TestReplicaDenseIndexContract(DenseIndexContract):
    """The DenseIndex contract on three shard replicas fed by the log, exactly and in HNSW."""

    @pytest.fixture(params=[10_000, 0], ids=["exact", "hnsw"])
    def dense_index(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LogFedDense]:
        log = chunks_log(tmp_path / "log", shards=SHARDS)
        replicas = [
            LogShardReplica(
                log,
                "contract.chunks",
                shard,
                tmp_path / f"shard-{shard}",
                IDENTITY,
                HnswSpec(),
                exact_threshold=request.param,
            )
            for shard in range(SHARDS)
        ]
        view = ReplicaDenseIndex(replicas, IDENTITY)
        yield LogFedDense(view, log, "contract.chunks", SHARDS, view.catch_up)
        log.close()
