"""Vectors that behave like real all-MiniLM-L6-v2 embeddings, at any size, from real anchors.

Near-uniform vectors on the sphere (what `bench serve` used to fill its corpus with) are far
apart in every direction, so an HNSW graph finds their neighbours poorly and the recall they
give says nothing about real text. Real embeddings sit on a thin, clustered manifold, and near
an embedding they vary along the few directions that lead to its neighbours. So each generated
vector is a real anchor (`anchors.real_vectors`) plus noise that is mostly local: a Gaussian
combination of the unit directions from the anchor to its NEIGHBOURS nearest real anchors,
with an ISOTROPIC share of its variance spread over every direction (so no two are equal),
normalised. The noise scale is `sigma` times a log-normal factor of width `spread` drawn per
vector (real passages sit in dense and sparse regions alike). Calibrated on a real set: for
each `spread` of a small grid, `sigma` by bisection so that as many generated vectors have the
real set's median nearest-neighbour distance; the pair whose distances are nearest the real
ones in KS distance is kept. (Moving anchors part of the way towards a neighbour instead
matched the distances but packed the vectors into the real clusters: IVF found their
neighbours too easily.)

Real sets also hold exact duplicates (boilerplate paragraphs: NN distance 0); the generator
makes none, so its lowest NN-distance quantile sits above the real one's.

`validate` shows it holds on data it was not fitted to: real vectors split into two halves,
anchors and held-out; vectors generated from the anchors, as many as held out, are compared
with the held-out half by nearest-neighbour distance quantiles, the KS distance of the two
distributions, and recall@10 against exact of HNSW (by efSearch) and IVF (by nprobe).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import faiss
import numpy as np

from ragindex.errors import InvalidInput
from ragindex.protocols import Vectors

NEIGHBOURS = 10  # real neighbours of an anchor whose directions its local noise spans
ISOTROPIC = 0.2  # share of the noise's variance in every direction, the rest local
SPREADS = (0.0, 0.25, 0.5, 0.75)
NN_SAMPLE = 2000  # vectors whose nearest-neighbour distance is measured
QUANTILES = (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
EF_SEARCH = (16, 32, 64, 128)
NPROBE = (1, 4, 16, 64)
HNSW_M = 32  # the product's defaults (HnswSpec)
HNSW_EF_CONSTRUCTION = 200
# Stated tolerances of the validation: generated vs held-out real, same size.
KS_TOLERANCE = 0.1  # largest gap between the two NN-distance CDFs
RECALL_TOLERANCE = 0.03  # recall@10 at every efSearch and nprobe


@dataclass(frozen=True)
class Generator:
    """Real anchors and the noise calibrated for them."""

    anchors: Vectors
    neighbours: np.ndarray  # (anchors, NEIGHBOURS) indices of each anchor's nearest anchors
    sigma: float
    spread: float = 0.0

    @cached_property
    def neighbour_lengths(self) -> np.ndarray:
        """|b_j - a| for each anchor a and neighbour b_j (floored: duplicate anchors), once
        per generator rather than once per generated vector."""
        lengths = [
            np.linalg.norm(self.anchors[self.neighbours[:, j]] - self.anchors, axis=1)
            for j in range(self.neighbours.shape[1])
        ]
        return np.maximum(np.stack(lengths, axis=1), 1e-6).astype(np.float32)

    def generate(self, count: int, seed: int) -> Vectors:
        """`count` unit vectors (deterministic in `seed`), in blocks to bound memory."""
        if count < 1:
            raise InvalidInput(f"generated vectors: count must be >= 1, got {count}")
        rng = np.random.default_rng(seed)
        dim = self.anchors.shape[1]
        out = np.empty((count, dim), dtype=np.float32)
        for start in range(0, count, 100_000):
            n = min(100_000, count - start)
            base = rng.integers(0, len(self.anchors), n)
            a = self.anchors[base]
            # sum_j w_j (b_j - a) / |b_j - a| over the anchor's neighbours b_j, w_j ~ N(0, 1/k)
            k = self.neighbours.shape[1]
            weights = rng.standard_normal((n, k), dtype=np.float32) / np.float32(math.sqrt(k))
            lengths = self.neighbour_lengths[base]
            local = np.zeros((n, dim), dtype=np.float32)
            for j in range(k):
                offset = self.anchors[self.neighbours[base, j]] - a
                local += (weights[:, j] / lengths[:, j])[:, None] * offset
            everywhere = rng.standard_normal((n, dim), dtype=np.float32) / np.float32(
                math.sqrt(dim)
            )
            noise = math.sqrt(1 - ISOTROPIC) * local + math.sqrt(ISOTROPIC) * everywhere
            scale = self.sigma * np.exp(self.spread * rng.standard_normal((n, 1)))
            x = a + noise * scale.astype(np.float32)
            out[start : start + n] = x / np.linalg.norm(x, axis=1, keepdims=True)
        return out


def anchor_neighbours(anchors: Vectors) -> np.ndarray:
    """Each anchor's NEIGHBOURS nearest other anchors (exact, inner product)."""
    index = faiss.IndexFlatIP(anchors.shape[1])
    index.add(anchors)
    k = min(NEIGHBOURS + 1, len(anchors))
    _, labels = index.search(anchors, k)
    return np.ascontiguousarray(labels[:, 1:])


def nn_distances(vectors: Vectors, sample: int = NN_SAMPLE, seed: int = 0) -> np.ndarray:
    """Euclidean distance (unit vectors) from `sample` of the vectors to their nearest other
    vector in the set, exact."""
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(vectors), min(sample, len(vectors)), replace=False)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    scores, _ = index.search(np.ascontiguousarray(vectors[rows]), 2)
    return np.sqrt(np.clip(2.0 - 2.0 * scores[:, 1], 0.0, None))


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    grid = np.sort(np.concatenate([a, b]))
    cdf_a = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    cdf_b = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.max(np.abs(cdf_a - cdf_b)))


def calibrate(anchors: Vectors, target: np.ndarray, count: int, steps: int = 14) -> Generator:
    """The generator whose `count` vectors' NN distances are nearest the `target` distances
    (see the module doc; the NN distance grows with sigma)."""
    neighbours = anchor_neighbours(anchors)
    want = float(np.median(target))
    best: tuple[float, Generator] | None = None
    for spread in SPREADS:
        low, high = 0.0, 2.0
        for _ in range(steps):
            sigma = (low + high) / 2
            trial = Generator(anchors, neighbours, sigma, spread)
            got = np.median(nn_distances(trial.generate(count, 1)))
            low, high = (sigma, high) if got < want else (low, sigma)
        fitted = Generator(anchors, neighbours, (low + high) / 2, spread)
        ks = ks_distance(target, nn_distances(fitted.generate(count, 1)))
        if best is None or ks < best[0]:
            best = (ks, fitted)
    assert best is not None
    return best[1]


def recall_curves(base: Vectors, queries: Vectors, k: int = 10) -> dict[str, dict[str, float]]:
    """recall@k against exact of HNSW by efSearch and IVF-flat (nlist ~ 4 sqrt(n)) by nprobe."""
    dim = base.shape[1]
    exact = faiss.IndexFlatIP(dim)
    exact.add(base)
    _, truth = exact.search(queries, k)

    def recall(found: np.ndarray) -> float:
        return float(np.mean([len(set(f) & set(t)) / k for f, t in zip(found, truth, strict=True)]))

    hnsw = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    hnsw.add(base)
    curves: dict[str, dict[str, float]] = {"hnsw_ef": {}, "ivf_nprobe": {}}
    for ef in EF_SEARCH:
        hnsw.hnsw.efSearch = ef
        curves["hnsw_ef"][str(ef)] = recall(hnsw.search(queries, k)[1])
    nlist = max(1, int(4 * math.sqrt(len(base))))
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.train(base)
    ivf.add(base)
    for nprobe in NPROBE:
        ivf.nprobe = nprobe
        curves["ivf_nprobe"][str(nprobe)] = recall(ivf.search(queries, k)[1])
    return curves


def validate(real: Vectors, queries: int = 500, seed: int = 0) -> dict[str, Any]:
    """Generated vs real at the size where both exist (see the module doc): the report, with
    `within_tolerance` and the gaps it was judged on."""
    if len(real) < 4 * queries:
        raise InvalidInput(f"validation needs >= {4 * queries} real vectors, got {len(real)}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(real))
    half = (len(real) - queries) // 2
    anchors = np.ascontiguousarray(real[order[:half]])
    held = np.ascontiguousarray(real[order[half : 2 * half]])
    real_queries = np.ascontiguousarray(real[order[2 * half : 2 * half + queries]])
    target = nn_distances(held, seed=seed)
    generator = calibrate(anchors, target, len(held))
    generated = generator.generate(len(held), seed + 2)
    got = nn_distances(generated, seed=seed)
    real_curves = recall_curves(held, real_queries)
    gen_curves = recall_curves(generated, generator.generate(queries, seed + 3))
    gaps = [abs(real_curves[c][p] - gen_curves[c][p]) for c in real_curves for p in real_curves[c]]
    ks = ks_distance(target, got)
    return {
        "real_vectors": len(held),
        "anchors": len(anchors),
        "queries": queries,
        "sigma": generator.sigma,
        "spread": generator.spread,
        "nn_distance_quantiles": {
            str(q): {"real": float(np.quantile(target, q)), "generated": float(np.quantile(got, q))}
            for q in QUANTILES
        },
        "uniform_nn_distance_median": float(
            np.median(nn_distances(uniform_unit(len(held), real.shape[1], seed)))
        ),
        "ks_distance": ks,
        "recall@10": {"real": real_curves, "generated": gen_curves},
        "max_recall_gap": max(gaps),
        "tolerance": {"ks_distance": KS_TOLERANCE, "recall_gap": RECALL_TOLERANCE},
        "within_tolerance": ks <= KS_TOLERANCE and max(gaps) <= RECALL_TOLERANCE,
    }


def uniform_unit(count: int, dim: int, seed: int) -> Vectors:
    """Uniform unit vectors: what the generated ones replace, shown beside them."""
    x = np.random.default_rng(seed).standard_normal((count, dim), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def validation_lines(report: dict[str, Any]) -> Sequence[str]:
    """The validation as printable lines."""
    lines = [
        f"generated vs real: {report['real_vectors']} held-out real vectors, generated from"
        f" {report['anchors']} other real anchors (sigma {report['sigma']:.4f},"
        f" spread {report['spread']})",
        "NN distance quantile   real    generated",
    ]
    for q, row in report["nn_distance_quantiles"].items():
        lines.append(f"  {q:>5}              {row['real']:.4f}  {row['generated']:.4f}")
    lines.append(
        f"KS distance {report['ks_distance']:.4f} (tolerance {KS_TOLERANCE}); uniform vectors'"
        f" median NN distance {report['uniform_nn_distance_median']:.4f}"
    )
    for curve in ("hnsw_ef", "ivf_nprobe"):
        real, gen = report["recall@10"]["real"][curve], report["recall@10"]["generated"][curve]
        pairs = ", ".join(f"{p}: {real[p]:.3f}/{gen[p]:.3f}" for p in real)
        lines.append(f"recall@10 real/generated by {curve}: {pairs}")
    lines.append(
        f"largest recall gap {report['max_recall_gap']:.4f} (tolerance {RECALL_TOLERANCE});"
        f" within tolerance: {report['within_tolerance']}"
    )
    return lines


def as_dict(generator: Generator) -> dict[str, Any]:
    """What a report records of a generator (not its arrays)."""
    return {"sigma": generator.sigma, "spread": generator.spread, "anchors": len(generator.anchors)}
