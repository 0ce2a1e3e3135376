"""The suite's PNG plots and its summary lines, from a `ragindex bench suite` JSON."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def render_plots(suite: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """PNG plots of a suite result (matplotlib, Agg): one per benchmark that has numbers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def save(fig: Any, name: str) -> None:
        path = out_dir / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    curves = []
    dense = suite.get("dense_curve", {})
    if "points" in dense:
        curves.append((f"ragindex HNSW, {dense['vectors']:,} vectors", dense, "ef_search"))
    peers = suite.get("peers", {})
    for key, label, knob in (
        ("ragindex_knn", "ragindex HNSW", "ef_search"),
        ("es_knn", "Elasticsearch kNN", "num_candidates"),
    ):
        if "points" in peers.get(key, {}):
            curves.append((f"{label}, {peers[key]['vectors']:,} vectors", peers[key], knob))
    if curves:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label, data, knob in curves:
            xs = [p["p50_ms"] for p in data["points"]]
            ys = [p["recall@10"] for p in data["points"]]
            ax.plot(xs, ys, marker="o", label=label)
            for p, x, y in zip(data["points"], xs, ys, strict=True):
                ax.annotate(
                    str(p[knob]), (x, y), fontsize=7, xytext=(3, -9), textcoords="offset points"
                )
        if "exact" in dense:
            ax.scatter(
                [dense["exact"]["p50_ms"]], [1.0], marker="x", color="k", label="exact (flat)"
            )
        ax.set_xscale("log")
        ax.set_xlabel("p50 latency per query, ms (log)")
        ax.set_ylabel("recall@10 vs exact search")
        ax.set_title("Dense recall vs latency (labels: efSearch / num_candidates)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "dense_recall_latency.png")

    filtered = {
        k: v
        for k, v in suite.get("filtered", {}).items()
        if isinstance(v, dict) and "recall@10" in v
    }
    if filtered:
        fig, ax = plt.subplots(figsize=(7, 4))
        shares = list(filtered)
        ax.bar(range(len(shares)), [filtered[s]["recall@10"] for s in shares], color="tab:blue")
        ax.set_xticks(
            range(len(shares)), [f"{float(s):.1%}\n{filtered[s]['search']}" for s in shares]
        )
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("recall@10 vs exact (bars)")
        ax.set_xlabel("tenant share of the collection (search kind)")
        ax2 = ax.twinx()
        ax2.plot(range(len(shares)), [filtered[s]["p50_ms"] for s in shares], "o-", color="tab:red")
        ax2.set_ylabel("p50 ms (line)", color="tab:red")
        ax.set_title("Tenant-filtered dense search by tenant share")
        save(fig, "filtered_recall.png")

    stages = suite.get("query_path", {}).get("stages", {})
    timed = {k: v["p50_ms"] for k, v in stages.items() if isinstance(v, dict) and "p50_ms" in v}
    if timed:
        fig, ax = plt.subplots(figsize=(7, 4))
        names = list(timed)
        ax.barh(names, [timed[k] for k in names], color="tab:green")
        ax.invert_yaxis()
        ax.set_xlabel("p50 ms")
        ax.set_title(
            f"Query path stages, hybrid k=10, Cranfield ({stages.get('chunks', '?')} chunks)"
        )
        save(fig, "query_stages.png")

    bars = peer_bars(suite)
    if bars:
        fig, ax = plt.subplots(figsize=(7, 4))
        names = list(bars)
        ax.barh(names, [bars[k] for k in names], color="tab:purple")
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("p50 ms (log)")
        ax.set_title("Peers side by side (p50 per query)")
        save(fig, "peers.png")
    return written


def peer_bars(suite: Mapping[str, Any]) -> dict[str, float]:
    """p50 latencies of each peer, by a readable label."""
    out: dict[str, float] = {}
    bm25 = suite.get("peers", {}).get("bm25", {})
    if "bm25" in bm25:
        for leg in ("bm25", "hybrid"):
            for backend, label in (("tantivy", "in-process"), ("elasticsearch", "Elasticsearch")):
                name = (
                    f"{leg} top-{bm25['top_k']}"
                    if leg == "bm25"
                    else f"hybrid k={bm25['hybrid_k']}"
                )
                out[f"{name}, {label}"] = bm25[leg][backend]["p50_ms"]
    serve = suite.get("serve", {})
    if "http_p50_ms" in serve:
        out[f"hybrid, in-process ({serve['chunks']:,} chunks)"] = serve["inproc_p50_ms"]
        out[f"hybrid, ragindex HTTP ({serve['chunks']:,} chunks)"] = serve["http_p50_ms"]
    return out


def suite_summary(suite: Mapping[str, Any]) -> str:
    """The headline numbers of a suite result as plain text lines."""
    lines = []
    dense = suite.get("dense_curve", {})
    if "points" in dense:
        pts = ", ".join(
            f"ef {p['ef_search']}: {p['recall@10']:.3f} @ {p['p50_ms']:.3f} ms"
            for p in dense["points"]
        )
        lines.append(
            f"dense curve ({dense['vectors']:,} vectors): {pts};"
            f" exact {dense['exact']['p50_ms']:.3f} ms"
        )
    for name, value in suite.get("ratios", {}).items():
        lines.append(f"ratio {name}: {value}")
    errors = [k for k, v in suite.items() if isinstance(v, dict) and "error" in v]
    if errors:
        lines.append(f"failed sections: {errors}")
    return "\n".join(lines)
