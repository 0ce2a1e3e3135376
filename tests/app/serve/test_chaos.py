"""A Jepsen-style run of the Kafka cluster layout on one machine (multinode.py: two Ray nodes,
2 dense shards x 2 replicas, a real broker): two writers and two searchers go on for CHAOS_S
while faults strike at seeded random points: the broker stopped hard and started again, and a
Shard, the Ingest and the Lexical replica killed (Serve starts new ones, which rebuild their
views from the log).

Afterwards, with the broker back: every acknowledged write is found (BM25 by its own token,
dense by its own title) and no acknowledged delete is; every running view replica reported
applying the whole log; every search either answered or failed within its deadline. A write
whose outcome is unknown (it failed or timed out) is checked neither way. The counts are
printed and written to $RAGINDEX_CACHE/reports/chaos.json.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragindex.app.serve.progress import running_replicas
from ragindex.config import RagIndexSpec
from ragindex.measure.evals import Collection

from .multinode import MultiNode, log_ends_and_reports, multinode_app, replica_actors

pytestmark = [pytest.mark.serve, pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(1800)]

APP = "ragindex-chaos"
SEED = 29
CHAOS_S = 180.0
WRITE_EVERY_S = 1.0  # per writer
DELETE_SHARE = 0.2  # of a writer's steps, once it has acknowledged writes to delete
SEARCH_DEADLINE_S = 30.0  # a search answers or fails within this
WRITE_TIMEOUT_S = 30.0
SETTLE_S = 300.0  # after the faults: replicas restarted and caught up
FAULTS = ("broker", "Shard0", "Ingest", "Lexical")
REPORT = (
    Path(os.environ.get("RAGINDEX_CACHE") or Path.home() / ".cache" / "ragindex")
    / "reports"
    / "chaos.json"
)
SEARCHED = {"source": "seed", "doc_id": "lighthouse", "title": "Lighthouses"}
SEARCHED_TEXT = "A lighthouse is a tower with a bright lamp that guides ships at night."


@pytest.fixture(scope="module")
def chaos_app(tmp_path_factory: pytest.TempPathFactory, kafka_server: Any) -> Iterator[MultiNode]:
    spec = RagIndexSpec.model_validate({"dense": {"shards": 2, "replicas": 2}})
    with multinode_app(tmp_path_factory.mktemp("chaos"), kafka_server, spec, APP) as app:
        yield app


@dataclass
class Writer:
    """One client writing new documents and deleting some it wrote; it keeps what was
    acknowledged (202) and what is unknown (an error or a timeout: it may have landed)."""

    app: MultiNode
    name: str
    titles: list[str]
    rng: random.Random
    acked: dict[str, str] = field(default_factory=dict)  # doc id -> title
    deleted: set[str] = field(default_factory=set)  # acknowledged deletes
    unknown: set[str] = field(default_factory=set)  # doc ids with a write of unknown outcome
    refused: int = 0  # writes answered with an error status (nothing acknowledged)
    n: int = 0

    @staticmethod
    def token(doc_id: str) -> str:
        return f"zq{doc_id}"

    def run(self, stop: threading.Event) -> None:
        with self.app.client(WRITE_TIMEOUT_S) as client:
            while not stop.wait(WRITE_EVERY_S):
                live = sorted(set(self.acked) - self.deleted - self.unknown)
                if live and self.rng.random() < DELETE_SHARE:
                    self._delete(client, self.rng.choice(live))
                elif self.n < len(self.titles):
                    self._upsert(client)

    def _upsert(self, client: httpx.Client) -> None:
        doc_id, title = f"{self.name}x{self.n}", self.titles[self.n]
        self.n += 1
        doc = {"source": "chaos", "doc_id": doc_id, "title": title, "text": self.token(doc_id)}
        if self._send(client, "POST", "/v1/documents", doc_id, json={"documents": [doc]}):
            self.acked[doc_id] = title

    def _delete(self, client: httpx.Client, doc_id: str) -> None:
        if self._send(client, "DELETE", f"/v1/documents/chaos/{doc_id}", doc_id):
            self.deleted.add(doc_id)

    def _send(self, client: httpx.Client, method: str, url: str, doc_id: str, **kw: Any) -> bool:
        try:
            r = client.request(method, url, **kw)
        except httpx.HTTPError:
            self.unknown.add(doc_id)
            return False
        if r.status_code == 202:
            return True
        self.refused += 1
        self.unknown.add(doc_id)  # a 503 "may have landed" as much as a timeout
        return False


@dataclass
class Searcher:
    """One client searching for a seeded document; records each search's outcome and time."""

    app: MultiNode
    outcomes: list[tuple[float, float, bool]] = field(default_factory=list)  # (end, s, answered)
    failures: list[str] = field(default_factory=list)

    def run(self, stop: threading.Event) -> None:
        with self.app.client(SEARCH_DEADLINE_S) as client:
            while not stop.wait(0.2):
                t0 = time.monotonic()
                try:
                    r = client.post("/v1/search", json={"query": "tower with a lamp", "k": 3})
                    ok = r.status_code == 200 and any(
                        h["doc_id"] == SEARCHED["doc_id"] for h in r.json()["hits"]
                    )
                    why = "" if ok else f"{r.status_code} {r.text[:120]}"
                except httpx.HTTPError as err:
                    ok, why = False, type(err).__name__
                end = time.monotonic()
                self.outcomes.append((end, end - t0, ok))
                if not ok:
                    self.failures.append(why)


def kill_replica(app: MultiNode, deployment: str, rng: random.Random) -> str:
    import ray

    actors = replica_actors(app.app, deployment)
    assert actors, f"no alive {deployment} replica to kill"
    victim = rng.choice(sorted(actors, key=lambda a: a["Name"]))
    ray.kill(ray.get_actor(victim["Name"], namespace="serve"), no_restart=True)
    return str(victim["Name"])


def inject(app: MultiNode, rng: random.Random, stop: threading.Event, log: list[str]) -> None:
    """Each fault twice, in a seeded random order, at a random point of its slot of CHAOS_S."""
    faults = list(FAULTS) * 2
    rng.shuffle(faults)
    slot = CHAOS_S / len(faults)
    t0 = time.monotonic()
    for i, fault in enumerate(faults):
        if stop.wait(max(0.0, t0 + i * slot + rng.uniform(0, slot / 2) - time.monotonic())):
            return
        at = time.monotonic() - t0
        if fault == "broker":
            app.kafka.stop_broker(hard=True)
            down = rng.uniform(5, 15)
            time.sleep(down)
            app.kafka.start_broker()
            log.append(f"{at:.0f}s broker killed, started again after {down:.0f} s")
        else:
            log.append(f"{at:.0f}s killed {kill_replica(app, fault, rng)}")


def views_not_caught_up(app: MultiNode) -> list[str]:
    """Every running Shard<i> and Lexical replica's latest report against the log's ends."""
    ends, reports = log_ends_and_reports(app)
    latest: dict[tuple[str, str], dict[int, int]] = {}
    for r in sorted(reports, key=lambda r: -r.age_s):
        latest[(r.view, r.replica)] = dict(r.offsets)
    wanted = {f"Shard{p}": {p: end} for p, end in ends.items()} | {"Lexical": ends}
    behind = []
    for view, replicas in running_replicas(APP, list(wanted)).items():
        for replica in sorted(replicas):
            offsets = latest.get((view, replica), {})
            if any(offsets.get(p, -1) < end for p, end in wanted[view].items()):
                behind.append(f"{view} {replica}: {offsets} of {wanted[view]}")
    return behind


def found(client: httpx.Client, query: str, mode: str, doc_id: str, k: int) -> bool:
    r = client.post("/v1/search", json={"query": query, "k": k, "mode": mode})
    assert r.status_code == 200, r.text
    return doc_id in {h["doc_id"] for h in r.json()["hits"]}


def test_writes_and_searches_survive_broker_and_replica_kills(
    chaos_app: MultiNode, cranfield: Collection
) -> None:
    app = chaos_app
    with app.client() as client:
        seed = {**SEARCHED, "text": SEARCHED_TEXT}
        r = client.post("/v1/documents", json={"documents": [seed]}, params={"wait": "true"})
        assert r.status_code == 202 and r.json()["applied"] is True, r.text
    rng = random.Random(SEED)
    titles = [t for t in dict.fromkeys(d.title for d in cranfield.corpus.values()) if t.strip()]
    rng.shuffle(titles)
    half = len(titles) // 2
    writers = [
        Writer(app, f"w{i}", part, random.Random(SEED + i))
        for i, part in enumerate((titles[:half], titles[half:]))
    ]
    searchers = [Searcher(app), Searcher(app)]
    stop, faults_done = threading.Event(), threading.Event()
    fault_log: list[str] = []
    threads = [threading.Thread(target=c.run, args=(stop,)) for c in (*writers, *searchers)]
    for t in threads:
        t.start()
    started = time.monotonic()
    try:
        inject(app, rng, faults_done, fault_log)
        time.sleep(max(0.0, started + CHAOS_S - time.monotonic()))
    finally:
        stop.set()
        faults_done.set()
        for t in threads:
            t.join(WRITE_TIMEOUT_S + SEARCH_DEADLINE_S)
        app.kafka.start_broker()  # whatever happened, the session's broker runs again

    # The faults are over: a write with ?wait=true lands once every view replica runs again
    # and applied the log to its end.
    deadline = time.monotonic() + SETTLE_S
    with app.client() as client:
        marker = {"source": "seed", "doc_id": "after", "title": "", "text": "zqafter"}
        while True:
            try:
                r = client.post(
                    "/v1/documents",
                    json={"documents": [marker]},
                    params={"wait": "true", "wait_timeout_s": "30"},
                )
                if r.status_code == 202 and r.json()["applied"] is True:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"not settled in {SETTLE_S:.0f} s: {fault_log}"
            time.sleep(2)
        behind = views_not_caught_up(app)

        live = {d: t for w in writers for d, t in w.acked.items() if d not in w.deleted | w.unknown}
        gone = {d: w.acked[d] for w in writers for d in w.deleted}
        lost_lexical = [d for d in live if not found(client, Writer.token(d), "lexical", d, 5)]
        lost_dense = [d for d, title in live.items() if not found(client, title, "dense", d, 10)]
        resurrected = [
            d
            for d, title in gone.items()
            if found(client, Writer.token(d), "lexical", d, 5)
            or found(client, title, "dense", d, 10)
        ]

    outcomes = sorted(o for s in searchers for o in s.outcomes)
    answered = [end for end, _, ok in outcomes if ok]
    gaps = [
        b - a for a, b in zip([started, *answered], [*answered, started + CHAOS_S], strict=True)
    ]
    report = {
        "seconds": CHAOS_S,
        "faults": fault_log,
        "writes_acknowledged": sum(len(w.acked) for w in writers),
        "deletes_acknowledged": len(gone),
        "writes_unknown_outcome": sum(len(w.unknown) for w in writers),
        "writes_refused": sum(w.refused for w in writers),
        "acknowledged_writes_lost_bm25": lost_lexical,
        "acknowledged_writes_lost_dense": lost_dense,
        "deletes_resurrected": resurrected,
        "view_replicas_behind": behind,
        "searches": len(outcomes),
        "searches_failed": len(outcomes) - len(answered),
        "search_failure_samples": sorted({f for s in searchers for f in s.failures})[:8],
        "slowest_search_s": round(max(s for _, s, _ in outcomes), 2),
        "longest_stall_s": round(max(gaps), 1),
    }
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(report, indent=2))
    print(f"chaos: {json.dumps(report)}")

    assert len(fault_log) == 2 * len(FAULTS), fault_log
    assert report["writes_acknowledged"] > 50 and report["deletes_acknowledged"] > 5, report
    assert not lost_lexical and not lost_dense and not resurrected, report
    assert not behind, report
    # Every search ended within its deadline (answered, or failed saying so).
    assert report["slowest_search_s"] <= SEARCH_DEADLINE_S + 5, report
    assert answered, report
