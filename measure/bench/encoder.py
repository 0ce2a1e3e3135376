"""`ragindex bench encoder`: query-encode latency and passage throughput per embedder backend.

Every backend (torch via sentence-transformers, ONNX Runtime fp32, ONNX Runtime dynamic int8)
loads the same packaged all-MiniLM-L6-v2 and encodes the same Cranfield queries one at a time,
interleaved query by query (each query goes through every backend before the next), so load
on a shared box hits them alike; passages are embedded in the spec's batches, interleaved per
batch. It also reports how far each backend's vectors are from torch's (max abs difference,
min cosine): fp32 must stay within FP32_MAX_ABS_DIFF to keep torch's identity.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragindex.app import cranfield_dir
from ragindex.config import EmbedderSpec
from ragindex.measure.evals.collections import load_cranfield
from ragindex.measure.output import write_json
from ragindex.measure.stats import Goals, missed_goals, percentiles, text_table
from ragindex.models import load_embedder
from ragindex.protocols import Embedder

BACKENDS = ("sentence-transformers", "onnx", "onnx-int8")
REFERENCE = "sentence-transformers"
FP32_MAX_ABS_DIFF = 1e-5  # ONNX fp32 keeps torch's identity only this close (measured 2e-7)
INT8_MIN_COSINE = 0.95  # int8 is its own identity; below this its quality is not worth having


def run_encoder_bench(
    queries: Sequence[str], passages: Sequence[str], rounds: int = 3, batch_size: int = 16
) -> dict[str, Any]:
    """Per backend: query p50/p99 (batch 1), passages/s, vectors' distance from torch's."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one intra-op thread each, as in Serve
    embedders: dict[str, Embedder] = {
        b: load_embedder(EmbedderSpec(backend=b, batch_size=batch_size)) for b in BACKENDS
    }
    for emb in embedders.values():
        emb.embed_queries(["warm up"])
    query_ms: dict[str, list[float]] = {b: [] for b in BACKENDS}
    for _ in range(rounds):
        for q in queries:
            for b, emb in embedders.items():
                start = time.perf_counter()
                emb.embed_queries([q])
                query_ms[b].append((time.perf_counter() - start) * 1000)
    passage_s = dict.fromkeys(BACKENDS, 0.0)
    for i in range(0, len(passages), batch_size):
        batch = list(passages[i : i + batch_size])
        for b, emb in embedders.items():
            start = time.perf_counter()
            emb.embed_passages(batch)
            passage_s[b] += time.perf_counter() - start
    reference = embedders[REFERENCE].embed_queries(queries)
    out: dict[str, Any] = {"queries": len(queries), "rounds": rounds, "passages": len(passages)}
    for b, emb in embedders.items():
        vectors = emb.embed_queries(queries)
        stats = percentiles(query_ms[b])
        out[b] = {
            "query_p50_ms": stats["p50_ms"],
            "query_p99_ms": stats["p99_ms"],
            "passages_per_s": round(len(passages) / passage_s[b], 2),
            "max_abs_diff_vs_torch": float(np.abs(vectors - reference).max()),
            "min_cosine_vs_torch": round(float((vectors * reference).sum(axis=1).min()), 6),
            "identity": emb.identity.to_dict(),
            "same_identity_as_torch": emb.identity == embedders[REFERENCE].identity,
        }
    torch_p50 = out[REFERENCE]["query_p50_ms"]
    for b in BACKENDS[1:]:
        out[f"{b}_query_speedup"] = round(torch_p50 / out[b]["query_p50_ms"], 3)
        out[f"{b}_passage_speedup"] = round(
            out[b]["passages_per_s"] / out[REFERENCE]["passages_per_s"], 3
        )
    out["onnx_max_abs_diff"] = out["onnx"]["max_abs_diff_vs_torch"]
    out["onnx-int8_min_cosine"] = out["onnx-int8"]["min_cosine_vs_torch"]
    return out


def encoder_table(result: dict[str, Any]) -> str:
    rows = [
        [
            b,
            result[b]["query_p50_ms"],
            result[b]["query_p99_ms"],
            result.get(f"{b}_query_speedup", 1.0),
            result[b]["passages_per_s"],
            f"{result[b]['max_abs_diff_vs_torch']:.2e}",
            result[b]["min_cosine_vs_torch"],
            result[b]["same_identity_as_torch"],
        ]
        for b in BACKENDS
    ]
    header = ["backend", "query p50 ms", "p99 ms", "speedup", "passages/s", "max |diff|"]
    return text_table([*header, "min cos", "torch identity"], rows)


ENCODER_GOALS: Goals = {
    "onnx_max_abs_diff": ("<=", FP32_MAX_ABS_DIFF),
    "onnx-int8_min_cosine": (">=", INT8_MIN_COSINE),
    "onnx_query_speedup": (">=", 1.0),
    "onnx-int8_query_speedup": (">=", 1.0),
}


def bench_encoder_command(args: argparse.Namespace) -> int:
    collection = load_cranfield(cranfield_dir())
    queries = [q.text for q in collection.queries.values()][: args.queries]
    passages = [f"{d.title}\n{d.text}" for d in collection.corpus.values()][: args.passages]
    result = run_encoder_bench(queries, passages, rounds=args.rounds)
    print(encoder_table(result))
    if args.json:
        write_json(args.json, result)
    missed = missed_goals(result, ENCODER_GOALS)
    for line in missed:
        print(f"missed goal: {line}")
    return 1 if args.check and missed else 0
