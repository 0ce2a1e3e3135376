"""Dense shard replicas as views of `chunks.<generation>` on the real file log."""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from ragindex.config import DenseIndexSpec, HnswSpec
from ragindex.filters import compile_access, parse_filter
from ragindex.log import FileLog
from ragindex.records import chunk_key, encode_chunk
from ragindex.shards import LogShardReplica, log_replica
from ragindex.shards.log_replica import (
    SNAPSHOT_EVERY_RECORDS,
    SNAPSHOT_EVERY_S,
    snapshot_due,
    snapshot_spread,
    texts_json,
)
from ragindex.testing import IDENTITY as CONTRACT_IDENTITY
from ragindex.testing import DenseIndexContract, LogFedDense, WrittenWhileRead, chunks_log
from ragindex.testing.dense import SCORE_TOLERANCE
from ragindex.types import Chunk, ModelIdentity

IDENTITY = ModelIdentity("test-model", "0" * 64, 8, True)
TOPIC = "t.chunks.g1"


def chunk(tenant: str, n: int) -> Chunk:
    return Chunk(tenant, f"wiki:{n}:0", "wiki", str(n), 0, f"T{n}", f"text {n}", f"h{n}")


def vector(n: int) -> np.ndarray:
    v = np.zeros(8, np.float32)
    v[n % 8] = 1.0
    return v


def chunk_record(tenant: str, n: int) -> tuple[int, bytes, bytes]:
    """Chunk n of `tenant` as its record in partition 0."""
    return 0, chunk_key(tenant, f"wiki:{n}:0"), encode_chunk(chunk(tenant, n), vector(n))


def replica(log: FileLog, root: Path) -> LogShardReplica:
    return LogShardReplica(log, TOPIC, 0, root, IDENTITY, HnswSpec(), exact_threshold=1000)


def test_replays_the_partition_with_text_and_tombstones(tmp_path: Path) -> None:
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 1, compacted=True)
    log.append(
        TOPIC,
        [chunk_record(t, n) for t in ("a", "b") for n in range(5)],
    )
    log.append(TOPIC, [(0, chunk_key("a", "wiki:1:0"), None)])
    r = replica(log, tmp_path / "node1")
    assert r.catch_up() == 11 and r.offset == 11
    assert r.count("a") == 4 and r.count("b") == 5
    hits = r.search(vector(2)[None, :], 1, "a", IDENTITY)
    assert [h.chunk_id for h in hits] == ["wiki:2:0"]
    assert r.get_chunks("a", ["wiki:2:0", "wiki:1:0"])["wiki:2:0"].text == "text 2"
    assert "wiki:1:0" not in r.get_chunks("a", ["wiki:1:0"])
    assert r.get_chunks("b", ["wiki:2:0"])["wiki:2:0"].tenant_id == "b"  # per tenant
    # the top hits can carry their chunks (the Router then fetches none of them)
    carried = r.search(vector(3)[None, :], 4, "b", IDENTITY, with_chunks=2)
    assert carried[0].chunk == chunk("b", 3) and len(carried) == 4
    assert [h.chunk for h in carried] == [
        *(chunk("b", int(h.chunk_id.split(":")[1])) for h in carried[:2]),
        None,
        None,
    ]


def test_runs_of_tombstones_are_one_delete_and_the_log_order_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 1, compacted=True)

    def up(n: int, v: int) -> tuple[int, bytes, bytes]:
        return (0, chunk_key("a", f"wiki:{n}:0"), encode_chunk(chunk("a", n), vector(v)))

    def tomb(n: int) -> tuple[int, bytes, None]:
        return (0, chunk_key("a", f"wiki:{n}:0"), None)

    log.append(
        TOPIC,
        [
            *(up(n, n) for n in range(8)),
            *(tomb(n) for n in (1, 2, 3, 3)),  # one document's chunks (and a repeat)
            up(1, 5),  # back again, after its delete
            tomb(4),
            up(4, 6),
            tomb(4),  # gone again: the last word
            up(0, 7),
            tomb(0),
        ],
    )
    r = replica(log, tmp_path / "node1")
    calls: list[list[str]] = []
    delete = r.shard.delete

    def counting(tenant: str, chunk_ids: list[str]) -> int:
        calls.append(list(chunk_ids))
        return delete(tenant, chunk_ids)

    monkeypatch.setattr(r.shard, "delete", counting)
    assert r.catch_up() == 18
    assert calls[0] == ["wiki:1:0", "wiki:2:0", "wiki:3:0"]
    assert sorted(r.shard.live_vectors("a")[0]) == ["wiki:1:0", "wiki:5:0", "wiki:6:0", "wiki:7:0"]
    assert r.search(vector(5)[None, :], 1, "a", IDENTITY)[0].chunk_id in ("wiki:1:0", "wiki:5:0")
    assert set(r.get_chunks("a", [f"wiki:{n}:0" for n in range(8)])) == {
        "wiki:1:0",
        "wiki:5:0",
        "wiki:6:0",
        "wiki:7:0",
    }


def test_restarts_from_its_snapshot_and_replays_only_the_rest(tmp_path: Path) -> None:
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 1, compacted=True)
    log.append(
        TOPIC,
        [chunk_record("a", n) for n in range(4)],
    )
    r = replica(log, tmp_path / "node1")
    r.catch_up()
    r.snapshot()
    log.append(TOPIC, [chunk_record("a", 9)])
    again = replica(log, tmp_path / "node1")
    assert again.offset == 4  # from the snapshot, not from 0
    assert again.catch_up() == 1
    assert again.count("a") == 5 and again.get_chunks("a", ["wiki:3:0"])["wiki:3:0"].title == "T3"
    fresh = replica(log, tmp_path / "node2")  # another node, no snapshot: from offset 0
    assert fresh.offset == 0 and fresh.catch_up() == 5 and fresh.count("a") == 5


def test_snapshot_bounds_are_spread_per_replica() -> None:
    rng = random.Random(7)
    spreads = [snapshot_spread(rng) for _ in range(200)]
    assert all(0.75 <= s < 1.25 for s in spreads) and max(spreads) - min(spreads) > 0.4
    assert not snapshot_due(0, 10 * SNAPSHOT_EVERY_S, 1.0)  # nothing new: nothing to save
    assert snapshot_due(1, SNAPSHOT_EVERY_S * 0.8, 0.8)
    assert not snapshot_due(1, SNAPSHOT_EVERY_S * 0.8, 1.2)
    assert snapshot_due(int(SNAPSHOT_EVERY_RECORDS * 0.8), 0.0, 0.8)


def hold_snapshot_writes(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Snapshots due at every catch-up, their writes held (an injected slow disk) until the
    returned event is set."""
    monkeypatch.setattr(log_replica, "SNAPSHOT_EVERY_S", 0.0)
    release = threading.Event()
    durable = log_replica.write_durable

    def slow_write(path: Path, data: bytes) -> None:
        assert release.wait(30), "the test never released the writer"
        durable(path, data)

    monkeypatch.setattr(log_replica, "write_durable", slow_write)
    return release


def test_a_periodic_snapshot_is_written_while_the_replica_applies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer is held (an injected slow disk): the replica keeps applying and serving, and
    the snapshot holds exactly the state at the offset it was taken at."""
    release = hold_snapshot_writes(monkeypatch)
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 1, compacted=True)

    def upsert(n: int) -> None:
        log.append(TOPIC, [chunk_record("a", n)])

    for n in range(4):
        upsert(n)
    r = replica(log, tmp_path / "node1")
    assert r.catch_up() == 4  # the snapshot of offset 4 is now being written, held
    upsert(4)
    log.append(TOPIC, [(0, chunk_key("a", "wiki:0:0"), None)])
    assert r.catch_up() == 2 and r.offset == 6
    assert r.count("a") == 4 and r.get_chunks("a", ["wiki:4:0"])["wiki:4:0"].text == "text 4"
    manifest = tmp_path / "node1" / "snapshot" / "manifest.json"
    assert not manifest.exists()
    release.set()
    for _ in range(300):  # bounded: the writer finishes within moments once released
        if manifest.exists():
            break
        time.sleep(0.01)
    assert json.loads(manifest.read_text())["wal_offset"] == 4
    again = replica(log, tmp_path / "node1")
    assert again.offset == 4 and again.count("a") == 4  # wiki:0..3, as at offset 4
    assert again.catch_up() == 2 and again.count("a") == 4
    assert "wiki:0:0" not in again.get_chunks("a", ["wiki:0:0"])


def test_replicas_sharing_a_turn_snapshot_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded Router's replicas share one snapshot turn (a snapshot holds a copy of its
    shard's index): while one writes (held, an injected slow disk), another that is due takes
    none, and takes its own at a catch-up after."""
    release = hold_snapshot_writes(monkeypatch)
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 1, compacted=True)
    log.append(TOPIC, [chunk_record("a", n) for n in range(4)])
    turn = threading.Lock()
    first, second = (
        LogShardReplica(
            log, TOPIC, 0, tmp_path / node, IDENTITY, HnswSpec(), 1000, snapshot_turn=turn
        )
        for node in ("node1", "node2")
    )
    assert first.catch_up() == 4  # its snapshot is being written, held
    assert second.catch_up() == 4
    assert second._writing is None  # due, but not its turn
    release.set()
    manifest = tmp_path / "node2" / "snapshot" / "manifest.json"
    for _ in range(300):  # bounded: the first writer finishes within moments once released
        second.catch_up()
        if manifest.exists():
            break
        time.sleep(0.01)
    assert json.loads(manifest.read_text())["wal_offset"] == 4
    assert (tmp_path / "node1" / "snapshot" / "manifest.json").exists()


def test_texts_are_encoded_in_pieces_as_one_json_document() -> None:
    texts: dict[str, list[dict[str, object]]] = {
        "a": [vars(chunk("a", n)) for n in range(1201)],  # pieces of 500, 500 and 201
        "b": [vars(chunk("b", 1))],
        "c": [],
    }
    assert json.loads(texts_json(7, texts)) == {"offset": 7, "chunks": texts}
    assert json.loads(texts_json(0, {})) == {"offset": 0, "chunks": {}}


@dataclass(frozen=True)
class ContractCase:
    exact_threshold: int
    index: DenseIndexSpec
    kind: str  # what a tenant of the contract's 300 vectors is searched by
    score_tolerance: float = SCORE_TOLERANCE


_TRAINED = {"train_min": 100, "ivf": {"nlist": 8, "nprobe": 6}}
CONTRACT_CASES = {
    "exact": ContractCase(10_000, DenseIndexSpec(), "flat"),
    "hnsw": ContractCase(0, DenseIndexSpec(), "hnsw"),
    # 8-bit codes of 16-d unit vectors: a score is off by at most ~0.012
    "hnsw_sq8": ContractCase(0, DenseIndexSpec(type="hnsw_sq8", train_min=100), "hnsw_sq8", 0.02),
    "ivf_pq": ContractCase(
        0,
        DenseIndexSpec.model_validate(
            {
                **_TRAINED,
                "type": "ivf_pq",
                "pq": {"m": 4, "nbits": 6},
                "refine": {"storage": "flat", "kFactor": 8},
            }
        ),
        "ivf_pq",
    ),
    "ivf_sq8": ContractCase(
        0,
        DenseIndexSpec.model_validate(
            {**_TRAINED, "type": "ivf_sq8", "refine": {"storage": "sq8"}}
        ),
        "ivf_sq8",
        0.02,
    ),
}


class TestLogShardReplicaContract(DenseIndexContract):
    """The DenseIndex contract on one replica fed by its partition, searched exactly and by
    every index type (exact_threshold 0, trained from the first 100 vectors)."""

    @pytest.fixture(params=list(CONTRACT_CASES))
    def case(self, request: pytest.FixtureRequest) -> ContractCase:
        return CONTRACT_CASES[request.param]

    @pytest.fixture
    def score_tolerance(self, case: ContractCase) -> float:
        return case.score_tolerance

    @pytest.fixture
    def dense_index(self, case: ContractCase, tmp_path: Path) -> Iterator[LogFedDense]:
        log = chunks_log(tmp_path / "log", shards=1)
        view = LogShardReplica(
            log,
            "contract.chunks",
            0,
            tmp_path / "replica",
            CONTRACT_IDENTITY,
            HnswSpec(),
            exact_threshold=case.exact_threshold,
            index=case.index,
        )
        yield LogFedDense(view, log, "contract.chunks", 1, view.catch_up)
        log.close()

    def test_the_tenant_is_searched_by_the_cases_index(
        self, dense_index: LogFedDense, case: ContractCase
    ) -> None:
        self._filled(dense_index)
        assert isinstance(dense_index.view, LogShardReplica)
        assert dense_index.view.shard.kind_of("alpha") == case.kind


def test_counting_documents_while_the_views_thread_applies_never_fails(tmp_path: Path) -> None:
    """/v1/stats counts a tenant's documents on a search thread while the views thread applies
    new chunks to the same replica: iterating its texts then failed ("dictionary changed size
    during iteration", a 500)."""
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 1, compacted=True)
    r = replica(log, tmp_path / "node1")
    errors: list[BaseException] = []
    done = threading.Event()

    def count_documents() -> None:
        while not done.is_set():
            try:
                r.documents("a")
            except RuntimeError as err:
                errors.append(err)
                return

    counter = threading.Thread(target=count_documents)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the GIL over as often as the interpreter can
    counter.start()
    try:
        for batch in range(40):
            log.append(
                TOPIC,
                [chunk_record("a", n) for n in range(batch * 100, batch * 100 + 100)],
            )
            r.catch_up()
            if errors:
                break
    finally:
        done.set()
        counter.join()
        sys.setswitchinterval(switch)
    assert not errors, errors[0]
    assert len(r.documents("a")) == 4000


def test_a_documents_chunks_and_summaries_under_an_access_expression(tmp_path: Path) -> None:
    """Reading a document back: its chunks only (not those of a document whose id it starts
    with), per tenant, under the same access expression a search runs; a tombstoned chunk is
    gone."""
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 1, compacted=True)

    def part(tenant: str, doc: str, n: int, acl: tuple[str, ...] | None) -> Chunk:
        return Chunk(
            tenant, f"hr:{doc}:{n}", "hr", doc, n, doc.upper(), f"{doc} {n}", f"h{n}", acl=acl
        )

    chunks = [part("a", "pay", n, ("group:ops",)) for n in range(3)]
    chunks += [part("a", "pay2", 0, None), part("b", "pay", 0, None)]
    log.append(
        TOPIC,
        [(0, chunk_key(c.tenant_id, c.chunk_id), encode_chunk(c, vector(c.n))) for c in chunks],
    )
    log.append(TOPIC, [(0, chunk_key("a", "hr:pay:2"), None)])
    r = replica(log, tmp_path / "node1")
    r.catch_up()
    ops = compile_access(None, frozenset({"group:ops"}))
    eng = compile_access(None, frozenset({"group:eng"}))
    assert sorted(c.chunk_id for c in r.document_chunks("a", "hr", "pay")) == [
        "hr:pay:0",
        "hr:pay:1",
    ]
    assert len(r.document_chunks("a", "hr", "pay", ops)) == 2
    assert r.document_chunks("a", "hr", "pay", eng) == []
    assert [c.tenant_id for c in r.document_chunks("b", "hr", "pay", eng)] == ["b"]
    assert r.document_summaries("a") == {
        ("hr", "pay"): (2, "PAY", None),
        ("hr", "pay2"): (1, "PAY2", None),
    }
    assert r.document_summaries("a", eng) == {("hr", "pay2"): (1, "PAY2", None)}
    elsewhere = compile_access(parse_filter({"field": "source", "eq": "nope"}), None)
    assert r.document_summaries("a", elsewhere) == {}


def test_a_catch_up_under_steady_writes_stops_at_the_end_it_found(tmp_path: Path) -> None:
    """Records written while it applies wait for the next catch-up: a request that refreshes
    its views is never held until the writes pause."""
    log = FileLog(tmp_path / "log")
    log.ensure_topic(TOPIC, 1, compacted=True)
    log.append(
        TOPIC,
        [chunk_record("a", n) for n in range(5)],
    )

    steady = WrittenWhileRead(log, lambda n: chunk_record("a", 100 + n), writes=50)
    r = LogShardReplica(
        steady, TOPIC, 0, tmp_path / "node", IDENTITY, HnswSpec(), exact_threshold=1000
    )  # type: ignore[arg-type]
    assert r.catch_up() == 5 and r.count("a") == 5
    assert r.catch_up() == 1  # what was written during the first
