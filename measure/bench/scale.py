"""`ragindex bench scale`: what each dense index type costs as a shard grows.

Per size and index type, the vectors (`scale_vectors`: generated around real MiniLM anchors)
are written as chunk records to a fresh file log's `chunks` topic, one partition, one tenant:
a shard holding them all. Then, through the code paths the replicas run:

- build: a `LogShardReplica` replays the partition (flat up to the exact threshold, then
  trained and built as the type): seconds, RSS growth and the FAISS index's bytes, both per
  million vectors;
- snapshot: the replica snapshots and publishes to the log's `snapshots` topic (its size on
  disk, texts included);
- bootstrap: TAIL_SHARE more vectors are appended, and a new replica on an empty directory
  starts from the published snapshot and replays the tail (seconds from nothing to caught up);
- search: the new replica's per-shard search of generated queries, recall@10 against exact
  search over every vector, p50/p99; at the largest size, recall@10 of searches filtered to
  0.1 %..100 % of the shard's chunks (`DenseShard.search` with `allowed`, as an ACL narrows it).

The served HTTP hybrid latency is not measured here (`ragindex bench serve --chunks N` is).
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import psutil

from ragindex.config import IVF_TYPES, DenseSpec, IndexType, parse_spec
from ragindex.errors import InvalidInput
from ragindex.measure.bench.scale_vectors import Generator, as_dict
from ragindex.measure.bench.served_vectors import CHUNKS, ServedVectors, vector_chunk
from ragindex.measure.plan import ivf_settings_for
from ragindex.measure.stats import Goals, missed_goals, percentiles, split_warmup, text_table
from ragindex.shards import LogShardReplica, SnapshotTopic
from ragindex.shards.log_replica import SNAPSHOT_DIR
from ragindex.types import ModelIdentity

TENANT = "scale"
SNAPSHOTS = "snapshots"
TAIL_SHARE = 0.01  # vectors appended after the snapshot, replayed by the new replica
FILTER_SHARES = (0.001, 0.01, 0.1, 0.5, 1.0)
INDEX_TYPES: tuple[IndexType, ...] = ("hnsw", "hnsw_sq8", "ivf_pq", "ivf_sq8")
# issue #31's goals, at the largest size measured
SQ8_RECALL, SQ8_MEMORY_SHARE = 0.97, 0.40  # hnsw_sq8 vs hnsw's index bytes
IVF_RECALL, IVF_MEMORY_SHARE = 0.95, 0.15  # refine codes counted when held in memory
P50_GROWTH = 2.0  # dense p50 at the largest size vs the smallest, same type
BOOTSTRAP_S = 60.0
FILTERED_RECALL = 0.98


def identity(dim: int) -> ModelIdentity:
    """The identity the generated vectors are stamped with (they stand for MiniLM's)."""
    return ModelIdentity("all-MiniLM-L6-v2 (generated)", "scale-bench", dim, True)


def _rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _ids(start: int, count: int) -> list[str]:
    return [f"scale:{n}:0" for n in range(start, start + count)]


def _recall(found: Sequence[Sequence[str]], truth: Sequence[Sequence[str]], k: int) -> float:
    return float(
        np.mean([len(set(f[:k]) & set(t[:k])) / k for f, t in zip(found, truth, strict=True)])
    )


def _exact(vectors: np.ndarray, ids: Sequence[str], queries: np.ndarray, k: int) -> list[list[str]]:
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    _, labels = index.search(queries, k)
    return [[ids[i] for i in row if i >= 0] for row in labels]


def measure_type(
    served: ServedVectors,
    dense: DenseSpec,
    kind: str,
    tail: np.ndarray,
    root: Path,
) -> tuple[LogShardReplica, dict[str, Any]]:
    """Build, snapshot, append the tail, bootstrap a new replica: that replica and the row."""
    spec = dense.index.model_copy(update={"type": kind})
    ident = served.identity
    snapshots = SnapshotTopic(served.log, f"{SNAPSHOTS}.{kind}", 0, 1, CHUNKS, ident)
    served.log.ensure_topic(snapshots.topic, 1, compacted=False)

    def replica_in(directory: Path, publish: bool) -> LogShardReplica:
        return LogShardReplica(
            served.log,
            CHUNKS,
            0,
            directory,
            ident,
            dense.hnsw,
            dense.exact_threshold,
            snapshots,
            publish=publish,
            index=spec,
        )

    before = _rss()
    started = time.perf_counter()
    builder = replica_in(root / f"{kind}-build", publish=True)
    built = builder.catch_up()
    build_s = time.perf_counter() - started
    rss_delta = _rss() - before
    index_bytes, refine_disk_bytes = builder.shard.memory_bytes()
    started = time.perf_counter()
    builder.snapshot()
    snapshot_s = time.perf_counter() - started
    snapshot_bytes = _dir_bytes(builder.directory / SNAPSHOT_DIR)
    del builder
    shutil.rmtree(root / f"{kind}-build")
    served.write(_chunks(_ids(built, len(tail))), tail)
    started = time.perf_counter()
    replica = replica_in(root / f"{kind}-new", publish=False)
    tail_applied = replica.catch_up()
    bootstrap_s = time.perf_counter() - started
    million = 1e6 / built
    return replica, {
        "kind": replica.shard.kind_of(TENANT),
        "nlist": spec.ivf.nlist if kind in IVF_TYPES else None,
        "nprobe": spec.ivf.nprobe if kind in IVF_TYPES else None,
        "vectors": built,
        "build_s": round(build_s, 3),
        "rss_bytes_per_million": int(rss_delta * million),
        "index_bytes": index_bytes,
        "index_bytes_per_million": int(index_bytes * million),
        "refine_disk_bytes": refine_disk_bytes,
        "snapshot_bytes": snapshot_bytes,
        "snapshot_s": round(snapshot_s, 3),
        "bootstrap_s": round(bootstrap_s, 3),
        "bootstrap_from_offset": replica.start_offset,
        "bootstrap_tail_records": tail_applied,
    }


def _chunks(ids: Sequence[str]) -> list[Any]:
    return [vector_chunk(TENANT, cid) for cid in ids]


def search_row(
    replica: LogShardReplica,
    queries: np.ndarray,
    truth: Sequence[Sequence[str]],
    k: int = 10,
) -> dict[str, Any]:
    """recall@k against exact and the per-shard search latency (warm-up queries untimed)."""
    warm, timed = split_warmup(np.arange(len(queries)))
    for i in warm:
        replica.search(queries[i : i + 1], k, TENANT, replica.identity)
    found, samples = [], []
    for i in timed:
        started = time.perf_counter()
        hits = replica.search(queries[i : i + 1], k, TENANT, replica.identity)
        samples.append((time.perf_counter() - started) * 1000)
        found.append([h.chunk_id for h in hits])
    return {
        "recall@10": round(_recall(found, [truth[i] for i in timed], k), 4),
        **percentiles(samples),
    }


def filtered_rows(
    replica: LogShardReplica,
    vectors: np.ndarray,
    ids: Sequence[str],
    queries: np.ndarray,
    seed: int,
    k: int = 10,
) -> dict[str, dict[str, Any]]:
    """recall@k of searches allowed a random share of the shard's chunks, against exact
    search over that share, with p50/p99."""
    rng = np.random.default_rng(seed)
    rows: dict[str, dict[str, Any]] = {}
    for share in FILTER_SHARES:
        chosen = np.sort(rng.choice(len(ids), max(k, int(len(ids) * share)), replace=False))
        allowed = frozenset(ids[i] for i in chosen)
        truth = _exact(vectors[chosen], [ids[i] for i in chosen], queries, k)
        found, samples = [], []
        for q in queries:
            started = time.perf_counter()
            hits = replica.shard.search(q, k, TENANT, replica.identity, allowed)
            samples.append((time.perf_counter() - started) * 1000)
            found.append([h.chunk_id for h in hits])
        rows[f"{share:.1%}"] = {
            "allowed": len(allowed),
            "recall@10": round(_recall(found, truth, k), 4),
            **percentiles(samples),
        }
    return rows


def run_scale(
    generator: Generator,
    sizes: Sequence[int],
    types: Sequence[str],
    dense: DenseSpec | None = None,
    queries: int = 200,
    work_dir: Path | None = None,
    seed: int = 0,
    ivf_by_size: bool = False,
) -> dict[str, Any]:
    """The scale report: `sizes` -> type -> row, `filtered` (largest size) -> type -> share
    -> row, and what produced them. Sizes run smallest first, one type at a time. With
    `ivf_by_size` the IVF types get `ragindex plan`'s nlist and nprobe for each size, not the
    spec's."""
    if not sizes or any(n < 1000 for n in sizes):
        raise InvalidInput(f"--sizes: at least one size, each >= 1000 vectors, got {sizes}")
    unknown = sorted(set(types) - set(INDEX_TYPES))
    if not types or unknown:
        raise InvalidInput(f"--types: one or more of {', '.join(INDEX_TYPES)}, got {unknown}")
    dense = (dense or DenseSpec()).model_copy(update={"shards": 1})
    dim = generator.anchors.shape[1]
    query_vectors = generator.generate(queries, seed + 7)
    report: dict[str, Any] = {"sizes": {}, "filtered": {}}
    largest = max(sizes)
    by_size: dict[str, dict[str, int]] = {}
    for size in sorted(sizes):
        at_size = dense
        if ivf_by_size:
            by_size[str(size)] = ivf_settings_for(size)
            ivf = dense.index.ivf.model_copy(update=by_size[str(size)])
            at_size = dense.model_copy(
                update={"index": dense.index.model_copy(update={"ivf": ivf})}
            )
        vectors = generator.generate(size, seed)
        tail = generator.generate(max(1, int(size * TAIL_SHARE)), seed + 1)
        ids = _ids(0, size)
        held, held_ids = np.concatenate([vectors, tail]), ids + _ids(size, len(tail))
        truth = _exact(held, held_ids, query_vectors, 10)
        with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=work_dir) as tmp:
            root = Path(tmp)
            rows: dict[str, Any] = {}
            report["sizes"][str(size)] = rows
            for kind in types:
                served = ServedVectors(root / f"log-{kind}", identity(dim), at_size)
                print(f"{size:,} vectors, {kind}: writing the log ...", file=sys.stderr)
                served.write(_chunks(ids), vectors)
                replica, row = measure_type(served, at_size, kind, tail, root)
                row.update(search_row(replica, query_vectors, truth))
                if size == largest:
                    report["filtered"][kind] = filtered_rows(
                        replica, held, held_ids, query_vectors, seed
                    )
                rows[kind] = row
                print(f"  {row}", file=sys.stderr)
                del replica
                served.close()
                shutil.rmtree(root, ignore_errors=True)
                root.mkdir(exist_ok=True)
    report["run"] = {
        "dim": dim,
        "queries": queries,
        "generator": as_dict(generator),
        "dense": dense.model_dump(mode="json"),
        "ivf_by_size": by_size or None,
        "cores": os.cpu_count(),
        "faiss_threads": faiss.omp_get_max_threads(),
        "memory_bytes": psutil.virtual_memory().total,
        "date": time.strftime("%Y-%m-%d"),
        "http_hybrid": "not measured here: ragindex bench serve --chunks N",
    }
    return report


def scale_goals(report: Mapping[str, Any]) -> list[str]:
    """issue #31's goals at the largest size measured, each miss in words (a goal whose types
    were not run is not judged)."""
    sizes = sorted(report["sizes"], key=int)
    top, low = report["sizes"][sizes[-1]], report["sizes"][sizes[0]]
    values: dict[str, float] = {}
    goals: dict[str, Any] = {}
    hnsw_bytes = top.get("hnsw", {}).get("index_bytes")
    for kind, recall, share in (
        ("hnsw_sq8", SQ8_RECALL, SQ8_MEMORY_SHARE),
        ("ivf_pq", IVF_RECALL, IVF_MEMORY_SHARE),
        ("ivf_sq8", IVF_RECALL, IVF_MEMORY_SHARE),
    ):
        if kind in top:
            values[f"{kind} recall@10"] = top[kind]["recall@10"]
            goals[f"{kind} recall@10"] = (">=", recall)
            if hnsw_bytes:
                values[f"{kind} index memory / hnsw"] = top[kind]["index_bytes"] / hnsw_bytes
                goals[f"{kind} index memory / hnsw"] = ("<=", share)
    for kind, row in top.items():
        values[f"{kind} bootstrap s"] = row["bootstrap_s"]
        goals[f"{kind} bootstrap s"] = ("<=", BOOTSTRAP_S)
        if len(sizes) > 1:
            values[f"{kind} p50 growth"] = row["p50_ms"] / low[kind]["p50_ms"]
            goals[f"{kind} p50 growth"] = ("<=", P50_GROWTH)
    for kind, shares in report["filtered"].items():
        for share, row in shares.items():
            values[f"{kind} filtered {share} recall@10"] = row["recall@10"]
            goals[f"{kind} filtered {share} recall@10"] = (">=", FILTERED_RECALL)
    checked: Goals = goals
    return missed_goals(values, checked)


def scale_table(report: Mapping[str, Any]) -> str:
    """One row per size and type, then the filtered recall of the largest size."""
    header = [
        "vectors",
        "type",
        "build s",
        "MB/M rss",
        "MB/M index",
        "MB/M disk",
        "snapshot MB",
        "bootstrap s",
        "recall@10",
        "p50 ms",
        "p99 ms",
    ]
    rows = [
        [
            f"{int(size):,}",
            kind,
            f"{r['build_s']:.1f}",
            f"{r['rss_bytes_per_million'] / 1e6:.0f}",
            f"{r['index_bytes_per_million'] / 1e6:.0f}",
            f"{r.get('refine_disk_bytes', 0) / r['vectors']:.0f}",
            f"{r['snapshot_bytes'] / 1e6:.1f}",
            f"{r['bootstrap_s']:.2f}",
            f"{r['recall@10']:.4f}",
            f"{r['p50_ms']:.3f}",
            f"{r['p99_ms']:.3f}",
        ]
        for size, types in report["sizes"].items()
        for kind, r in types.items()
    ]
    lines = [text_table(header, rows)]
    if report["filtered"]:
        shares = list(next(iter(report["filtered"].values())))
        lines.append("\nfiltered recall@10 (largest size) by allowed share")
        lines.append(
            text_table(
                ["type", *shares],
                [
                    [kind, *(f"{r[s]['recall@10']:.4f}" for s in shares)]
                    for kind, r in report["filtered"].items()
                ],
            )
        )
    return "\n".join(lines)


def plot_scale(report: Mapping[str, Any], path: Path) -> Path:
    """A PNG of cost against size per type: index MB per million, build s, p50 ms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(report["sizes"], key=int)
    kinds = sorted({k for s in sizes for k in report["sizes"][s]})
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    panels = (
        ("index_bytes", 1e-6, "index MB"),
        ("build_s", 1, "build s"),
        ("p50_ms", 1, "dense p50 ms per shard"),
    )
    for ax, (key, scale, label) in zip(axes, panels, strict=True):
        for kind in kinds:
            xs = [int(s) for s in sizes if kind in report["sizes"][s]]
            ys = [report["sizes"][str(x)][kind][key] * scale for x in xs]
            ax.plot(xs, ys, marker="o", label=kind)
        ax.set_xscale("log")
        ax.set_xlabel("vectors in the shard")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"ragindex bench scale ({report['run']['date']}, {report['run']['cores']} cores)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def dense_with_index(text: str) -> DenseSpec:
    """The dense spec whose `index` holds the `--index` JSON's fields, or InvalidInput naming
    what is wrong."""
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidInput(f"--index: not JSON ({err}): {text!r:.80}") from None
    return parse_spec({"dense": {"index": fields}}, "--index").dense


def bench_scale_command(args: Any) -> int:
    """`ragindex bench scale`: see the module doc."""
    from ragindex.measure.bench.anchors import anchored_generator, real_vectors
    from ragindex.measure.bench.cli import checked
    from ragindex.measure.bench.scale_vectors import validate, validation_lines
    from ragindex.measure.output import write_json
    from ragindex.measure.plan import constants_from_scale

    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        raise InvalidInput(f"--sizes: comma-separated vector counts, got {args.sizes!r}") from None
    types = [t.strip() for t in args.types.split(",")]
    dense = dense_with_index(args.index)
    report: dict[str, Any] = {}
    if args.validate:
        real = real_vectors(args.anchors)
        report["validation"] = validate(real, queries=min(500, len(real) // 10))
        print("\n".join(validation_lines(report["validation"])))
    report |= run_scale(
        anchored_generator(args.anchors),
        sizes,
        types,
        dense,
        queries=args.queries,
        ivf_by_size=args.ivf_by_size,
    )
    print(scale_table(report))
    if args.json:
        write_json(args.json, report)
    if args.plot:
        print(f"plot: {plot_scale(report, args.plot)}")
    if args.constants:
        args.constants.write_text(json.dumps(constants_from_scale(report, args.note), indent=1))
        print(f"constants for ragindex plan: {args.constants}")
    missed = scale_goals(report)
    if args.validate and not report["validation"]["within_tolerance"]:
        missed.append("generated vectors: outside the stated tolerance of the real ones")
    return checked(args, missed)
