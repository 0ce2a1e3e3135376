"""Fixtures shared by several test areas: one Elasticsearch server (and fresh alias names on it),
one Kafka broker, the packaged MiniLM, Cranfield as chunks, a BM25 quality probe and hand-built
hits for the answer tests; and the rule that skips fail in CI.

Each area's own conftest adds the servers it needs; what more than one area uses lives here.
The shared data is found by one rule, the CLI's (`ragindex.app.loading.cranfield_dir`:
$RAGINDEX_SHARED_DIR, else ../shared next to the checkout).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ragindex.app.serve_cli import ray_environment

# Every Ray in the session runs as `ragindex serve` runs it: token authentication on, the token in
# a data directory made for the session. Set before any test module imports Ray, which fixes
# the driver's auth mode for the whole process (a later change would split driver and GCS).
os.environ.setdefault("RAY_raylet_start_wait_time_s", "180")  # 2 shared cores start Ray slowly
os.environ.pop("RAY_AUTH_TOKEN", None)
os.environ.update(ray_environment(Path(tempfile.mkdtemp(prefix="ragindex-ray-auth-"))))

from ragindex.app import cranfield_dir as find_cranfield
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.hashing import chunk_id, content_hash
from ragindex.measure.evals import Collection, load_cranfield
from ragindex.measure.evals.metrics import ndcg_at_k
from ragindex.measure.servers import EsServer, KafkaServer, start_elasticsearch, start_kafka
from ragindex.models import load_embedder
from ragindex.protocols import Embedder, LexicalIndex
from ragindex.types import Chunk, Hit

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
BENCH_TENANT = "bench"
# scripts/test.sh (CI) sets it: there, a test that skips (a server that did not start, the
# shared data not found, a part that does not import) fails instead of passing silently.
STRICT_SKIPS = os.environ.get("RAGINDEX_STRICT_SKIPS") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if STRICT_SKIPS and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped with RAGINDEX_STRICT_SKIPS=1, which fails: {reason}"


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio, as the app does (uvicorn, Ray Serve): anyio's plugin would
    also run each on trio, which selenium brings along."""
    return "asyncio"


@pytest.fixture(scope="session")
def es_server() -> Iterator[EsServer]:
    """A real Elasticsearch on loopback, started once per session by the tests that ask."""
    server = start_elasticsearch()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def kafka_server() -> Iterator[KafkaServer]:
    """A real one-node Kafka (KRaft) on loopback, started once per session by the tests that ask.

    Tests that stop the broker (`stop_broker()`) must start it again (`start_broker()`)."""
    server = start_kafka()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def minilm() -> Embedder:
    """The packaged all-MiniLM-L6-v2, loaded once, on one thread."""
    import torch

    torch.set_num_threads(1)
    return load_embedder(RagIndexSpec().embedder)


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer BERT sequence classifier, random init, with MiniLM's tokenizer: no quality,
    but a real cross-encoder (no trained one ships in any package reachable here)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from ragindex.models import resolve_model_path

    out = tmp_path_factory.mktemp("tiny-cross-encoder")
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model_path("all-MiniLM-L6-v2")))
    torch.manual_seed(1234)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _make_chunk(tenant: str, chunk_id: str, text: str, title: str = "") -> Chunk:
    source, doc_id = ([*chunk_id.split(":"), "d", "0"])[:2]
    return Chunk(tenant, chunk_id, source, doc_id, 0, title, text, "hash")


@pytest.fixture(scope="session")
def make_chunk() -> Callable[..., Chunk]:
    """Chunk factory: make_chunk(tenant, chunk_id, text, title="")."""
    return _make_chunk


@pytest.fixture(scope="session")
def cranfield_dir() -> Path:
    """../shared/data/cranfield, found as the CLI finds it; a skip when absent (a failure in CI)."""
    try:
        return find_cranfield()
    except InvalidInput as err:
        pytest.skip(str(err))


@pytest.fixture(scope="session")
def cranfield(cranfield_dir: Path) -> Collection:
    return load_cranfield(cranfield_dir)


@pytest.fixture(scope="session")
def cranfield_chunks(cranfield: Collection) -> list[Chunk]:
    """One chunk per Cranfield document (chunk id = doc id; the title where there is no text)."""
    return [
        Chunk(BENCH_TENANT, d.doc_id, "bench", d.doc_id, 0, "", d.text or d.title, "")
        for d in cranfield.corpus.values()
    ]


@pytest.fixture(scope="session")
def mean_ndcg(cranfield: Collection) -> Callable[[LexicalIndex], float]:
    """Mean nDCG@10 over the judged queries of a BM25 index holding `cranfield_chunks`."""

    def mean(index: LexicalIndex) -> float:
        scores = [
            ndcg_at_k(
                [h.chunk_id for h in index.search(cranfield.queries[q].text, 10, BENCH_TENANT)],
                cranfield.qrels[q],
                10,
            )
            for q in cranfield.judged_queries()
        ]
        return sum(scores) / len(scores)

    return mean


@pytest.fixture
def new_alias() -> Callable[[], str]:
    """Fresh alias names, unique across the session."""
    return lambda: f"t_{uuid.uuid4().hex[:12]}"


# --- Answers: hits built by hand, a word count for tokens (router and measure/evals tests) ---
HIT_TENANT = "acme"

HitFactory = Callable[..., Hit]


@pytest.fixture
def make_hit() -> HitFactory:
    def build(
        doc_id: str,
        n: int,
        text: str,
        *,
        source: str = "docs",
        title: str | None = None,
        context: str | None = None,
        updated: str | None = None,
        score: float = 1.0,
    ) -> Hit:
        chunk = Chunk(
            tenant_id=HIT_TENANT,
            chunk_id=chunk_id(source, doc_id, n),
            source=source,
            doc_id=doc_id,
            n=n,
            title=title if title is not None else f"Title of {doc_id}",
            text=text,
            content_hash=content_hash(text),
            context=context,
            updated=updated,
        )
        return Hit(chunk, score, {"dense": 1})

    return build


@pytest.fixture
def count_words() -> Callable[[str], int]:
    """A count_tokens for the pure tests: whitespace words (the service gets the embedder's)."""
    return lambda text: len(text.split())
