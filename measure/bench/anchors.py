"""Real passages and their real all-MiniLM-L6-v2 vectors: the anchors of the generated vectors
that `bench scale` and `bench serve` fill their indexes with (`anchored_generator`).

Two sources, both real text that ships on this machine:

- the bundled judged collections (`measure/evals/data/*`: GNU manuals, Node.js API docs):
  technical documentation as a RAG corpus holds it, cut into passages of at most
  PASSAGE_WORDS words at paragraph bounds; only ~4 k passages, so
- the GNU Collaborative International Dictionary of English (Debian `dict-gcide`, GPL): ~120 k
  entries of real English prose, the largest real text reachable offline, which fills the set
  up to the size asked for (a fixed shuffle of its entries, so the set spans the alphabet).

Embedding tens of thousands of passages takes minutes on a CPU, so the vectors are cached
under `${RAGINDEX_CACHE}/anchors` by blocks, keyed by the model identity and the passages.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from ragindex.config import EmbedderSpec
from ragindex.errors import InvalidInput
from ragindex.measure.bench.scale_vectors import Generator, calibrate, nn_distances
from ragindex.measure.evals.cli import cache_dir
from ragindex.protocols import Vectors

BUNDLED = Path(__file__).resolve().parent.parent / "evals" / "data"
GCIDE = Path("/usr/share/dictd/gcide")  # .index and .dict.dz, from Debian's dict-gcide
PASSAGE_WORDS = 150  # about the product's default chunk (256 tokens)
MIN_WORDS = 8  # shorter entries are cross-references, not passages
EMBED_BATCH = 500  # passages per cached block
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _words_passages(text: str) -> list[str]:
    """Paragraphs packed into passages of at most PASSAGE_WORDS words."""
    passages: list[str] = []
    current: list[str] = []
    for paragraph in text.split("\n\n"):
        words = paragraph.split()
        while len(words) > PASSAGE_WORDS:  # a long paragraph: cut it
            passages.append(" ".join(words[:PASSAGE_WORDS]))
            words = words[PASSAGE_WORDS:]
        if len(current) + len(words) > PASSAGE_WORDS and current:
            passages.append(" ".join(current))
            current = []
        current.extend(words)
    if current:
        passages.append(" ".join(current))
    return [p for p in passages if len(p.split()) >= MIN_WORDS]


def bundled_passages(root: Path = BUNDLED) -> list[str]:
    """The bundled collections' documents as passages, in a fixed order."""
    passages: list[str] = []
    for corpus in sorted(root.glob("*/corpus.jsonl")):
        for line in corpus.read_text().splitlines():
            doc = json.loads(line)
            passages.extend(_words_passages(f"{doc.get('title', '')}\n\n{doc['text']}"))
    return passages


def _dictd_number(text: str) -> int:
    value = 0
    for char in text:
        value = value * 64 + _B64.index(char)
    return value


def gcide_passages(wanted: int, base: Path = GCIDE) -> list[str]:
    """`wanted` dictionary entries of at least MIN_WORDS words: the first of a fixed shuffle, so
    the set spans the alphabet and a smaller one is a prefix of a larger one."""
    index, data = base.with_suffix(".index"), base.with_suffix(".dict.dz")
    if not index.exists() or not data.exists():
        raise InvalidInput(
            f"{index} not found: the scale vectors need Debian's dict-gcide for real text"
            " beyond the bundled collections (apt-get install dict-gcide)"
        )
    with gzip.open(data) as f:  # dictzip is gzip with an index in its header
        body = f.read()
    entries: list[str] = []
    seen: set[int] = set()
    for line in index.read_text(errors="replace").splitlines():
        fields = line.split("\t")
        if len(fields) != 3 or fields[0].startswith("00-database"):
            continue
        offset = _dictd_number(fields[1])
        if offset in seen:  # one entry under several headwords
            continue
        seen.add(offset)
        text = body[offset : offset + _dictd_number(fields[2])].decode("utf-8", "replace")
        words = " ".join(text.split()).split(" ")
        if len(words) >= MIN_WORDS:
            entries.append(" ".join(words[:PASSAGE_WORDS]))
    if len(entries) < wanted:
        raise InvalidInput(f"dict-gcide holds {len(entries)} usable entries, {wanted} asked")
    order = np.random.default_rng(0).permutation(len(entries))[:wanted]
    return [entries[i] for i in order]


def real_passages(count: int) -> list[str]:
    """`count` real passages: the bundled collections' first, then dictionary entries."""
    if count < 1:
        raise InvalidInput(f"real passages: count must be >= 1, got {count}")
    bundled = bundled_passages()
    if count <= len(bundled):
        return bundled[:count]
    return bundled + gcide_passages(count - len(bundled))


def real_vectors(count: int, spec: EmbedderSpec | None = None) -> Vectors:
    """The real embedder's unit vectors of `real_passages(count)`, cached by blocks of
    EMBED_BATCH passages (a smaller count reuses a larger one's blocks, and an interrupted run
    keeps the blocks it finished)."""
    from ragindex.models import load_embedder

    spec = spec or EmbedderSpec()
    passages = real_passages(count)
    embedder = load_embedder(spec)
    stamp = json.dumps(embedder.identity.to_dict())
    blocks = []
    for start in range(0, count, EMBED_BATCH):
        block = passages[start : start + EMBED_BATCH]
        digest = hashlib.sha256(json.dumps([stamp, block]).encode()).hexdigest()[:24]
        path = cache_dir() / "anchors" / f"{digest}.npy"
        if not path.exists():
            # by length, so that a batch pads little; each vector goes back to its place
            order = sorted(range(len(block)), key=lambda i: len(block[i]))
            vectors = np.empty((len(block), embedder.identity.dimension), dtype=np.float32)
            vectors[order] = embedder.embed_passages([block[i] for i in order])
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp.npy")
            np.save(tmp, vectors)
            tmp.replace(path)
            print(f"embedded {start + len(block)}/{count} real passages", file=sys.stderr)
        blocks.append(np.load(path))
    return np.ascontiguousarray(np.concatenate(blocks), dtype=np.float32)


def anchored_generator(anchors: int, spec: EmbedderSpec | None = None) -> Generator:
    """The generator over the real embedder's vectors of `anchors` real passages, calibrated so
    that as many generated vectors have the real set's nearest-neighbour distances."""
    real = real_vectors(anchors, spec)
    return calibrate(real, nn_distances(real), len(real))
