"""`ragindex plan`: shards, replicas and nodes for a corpus and a query load, from measurements.

`make_plan` is pure: inputs and the constants (`capacity.json`, written by `ragindex bench
scale --constants`, with the machine and date they were measured on) in, a `Plan` out. What
it assumes beyond the measurements is in the constants' `assumptions`, each with its source.

The model, per dense shard replica (one search thread, FIELD-NOTES):
- memory: index bytes per vector (measured at the constants' dimension; the vector codes scale
  with the dimension, the graph or list overhead does not), the replica's per-chunk overhead
  (RSS growth beyond the index and any mapped refine vectors, measured) and the chunk's text
  (assumed); refine vectors kept on disk (`refine.storage: disk`) are local disk, not memory;
- per-shard search p50/p99 at the shard's size: interpolated between measured sizes in log-log,
  beyond them extrapolated with the slope of the two largest (one size: the type's `growth`);
- memory at its peak: a replica captures its snapshot in memory (a copy of its index and any
  refine vectors, its texts) and writes it while it serves, so its limit is the resting memory
  plus the snapshot (measured at 1 M chunks: the Router went from 4.9 to 6.1 GB);
- shards: the fewest whose replica's peak fits `replica_memory_gib` and whose p99 fits the dense
  leg's budget (the p99 target less the rest of the query path, measured by bench serve);
- replicas: enough single-thread replicas per shard for the queries at `UTILIZATION`, and at
  least MIN_REPLICAS, so a restarting replica never takes its shard away;
- the dense settings to write in the spec: for the IVF types, nlist grows with the shard and
  nprobe shrinks with it (`ivf_settings_for`; the spec's training minimum follows nlist), and
  for ivf_pq the refine step's k-factor grows too (`refine_k_factor_for`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ragindex.config import IVF_TYPES, REFINE_BYTES_PER_DIM, IndexType, RefineSpec
from ragindex.errors import InvalidInput
from ragindex.shards.log_replica import READ_BATCH

CONSTANTS = Path(__file__).resolve().parent / "capacity.json"
INDEX_TYPES: tuple[IndexType, ...] = ("hnsw", "hnsw_sq8", "ivf_pq", "ivf_sq8")
MIN_REPLICAS = 2
UTILIZATION = 0.6  # a replica's search thread busy at most this share, so queues stay short
NODE_HEADROOM = 0.8  # share of a node's cores and memory given to replicas
MAX_SHARDS = 256  # the spec's limit (dense.shards)
GIB = 1 << 30
# What the scale benchmark cannot measure; each says where its figure comes from.
ASSUMPTIONS: dict[str, Any] = {
    "text_bytes_per_chunk": {
        "value": 2000,
        "source": "assumed: a 256-token chunk's text (~1 KB) with its metadata as Python"
        " objects in the replica; the scale benchmark's chunks carry no text",
    },
    "query_path_p99_ms": {
        "value": 28.0,
        "source": "measured: bench serve --chunks 100000, idle 2-core box, 2026-12-01, HTTP"
        " hybrid p99 27.9 ms (embed, BM25, fusion, HTTP) with dense search ~1 ms (FIELD-NOTES)",
    },
    "embed_query_ms_per_core": {
        "value": {"384": 9.6, "768": 67.0},
        "source": "measured: MiniLM 10-word query 9.6 ms on one CPU thread (FIELD-NOTES);"
        " 768-d: all-mpnet-base-v2, ~7x slower (FIELD-NOTES), not measured here",
    },
    "embed_chunks_per_s": {
        "value": {"384": {"cpu_core": 18.0, "gpu": 2840.0}, "768": {"cpu_core": 2.6, "gpu": 560.0}},
        "source": "CPU measured: MiniLM ~18 150-word chunks/s per thread (FIELD-NOTES), mpnet"
        " ~7x slower. GPU assumed (no GPU here): sbert.net's pretrained-models table, V100,"
        " 14,200 (MiniLM-L6) and 2,800 (mpnet-base) sentences/s, divided by 5 for 256-token"
        " chunks",
    },
}


@dataclass(frozen=True)
class PlanInput:
    """What the user asks for."""

    chunks: int
    dim: int
    index_type: str
    qps: float
    p99_ms: float
    freshness_s: float
    replica_memory_gib: float = 16.0
    node_cores: int = 16
    node_memory_gib: float = 64.0

    def check(self) -> None:
        """Raise InvalidInput naming the first bad field."""
        if self.chunks < 1:
            raise InvalidInput(f"--chunks must be >= 1, got {self.chunks}")
        if not 1 <= self.dim <= 8192:
            raise InvalidInput(f"--dim must be in 1..8192, got {self.dim}")
        if self.index_type not in INDEX_TYPES:
            raise InvalidInput(
                f"--index-type {self.index_type!r} is unknown: one of {', '.join(INDEX_TYPES)}"
            )
        for name in ("qps", "p99_ms", "freshness_s", "replica_memory_gib", "node_memory_gib"):
            if not getattr(self, name) > 0:
                raise InvalidInput(
                    f"--{name.replace('_', '-')} must be > 0, got {getattr(self, name)}"
                )
        if self.node_cores < 1:
            raise InvalidInput(f"--node-cores must be >= 1, got {self.node_cores}")


@dataclass(frozen=True)
class Plan:
    """The answer, with what each figure rests on."""

    shards: int
    replicas: int
    vectors_per_shard: int
    memory_gib_per_replica: float  # at rest
    memory_peak_gib_per_replica: float  # while it writes a snapshot: its memory limit
    cpu_per_replica: float
    search_p50_ms: float
    search_p99_ms: float
    dense_budget_ms: float
    embedder_cores: float
    nodes: int
    snapshot_gib_per_shard: float
    refine_disk_gib_per_replica: float  # float32 refine vectors on local disk (storage "disk")
    local_disk_gib_per_replica: float  # the spec's storageSize: snapshots and refine vectors
    bootstrap_s: float
    apply_batch_s: float
    ingest_cpu_core_hours: float
    ingest_gpu_hours: float
    measured_sizes: list[int]
    extrapolated: bool
    notes: list[str]
    dense_spec: dict[str, Any]


# A replica's scratch holds its own snapshot, and while a fresh replica bootstraps, the parts
# it read from the log (up to two snapshots: one may be being published) and the files it
# assembles from them (`snapshot_log.SnapshotSpool`).
SNAPSHOTS_ON_LOCAL_DISK = 3
# FAISS's guideline for nlist is sqrt(N) to 16 sqrt(N) centroids for N vectors; the scale
# benchmark's recall at nlist 1,024 fell from 100 k to 300 k vectors per shard, so nlist
# follows the shard's size instead of staying at the default.
NLIST_PER_SQRT_VECTORS = 4
MAX_NLIST = 65_536  # the spec's limit (dense.index.ivf.nlist)
# ivf_pq's recall@10 rests on how many candidates its refine step re-scores (bench scale,
# docs/capacity.md): k-factor 8 gave 0.973 at 300 k vectors per shard but 0.940 at 1 M, where
# 16 gave 0.965. So past the largest size where 8 was measured to hold 0.95, the plan writes 16.
REFINE_K_FACTOR = RefineSpec().k_factor  # the spec's default
LARGE_SHARD_REFINE_K_FACTOR = 16
REFINE_K_FACTOR_MEASURED_UP_TO = 300_000


# A search's cost is the codes in the lists it scans, and lists grow with the square root of
# the shard (nlist above): at a fixed nprobe 64, ivf_pq's p50 per shard search went from 0.5 ms
# at 100 k to 1.0-1.2 ms at 1 M. But the true neighbours of a query also sit in fewer of the
# smaller lists: on the generated vectors at 1 M (kFactor 16, 200 queries), recall@10 0.973 /
# 0.982 / 0.984 / 0.986 / 0.988 at nprobe 16 / 24 / 32 / 40 / 64, where 100 k needs 64 for
# 0.973. So nprobe falls with the fourth root of the shard: the codes scanned grow with the
# other fourth root (1.8x for ten times the vectors), down to NPROBE_FLOOR.
NPROBE_AT_REFERENCE = 64
NPROBE_REFERENCE_VECTORS = 100_000
NPROBE_FLOOR = 16  # the fewest lists measured at 1 M: recall 0.973
NPROBE_EXPONENT = 0.25  # nprobe ~ vectors^-0.25

# How the codes an IVF search scans grow with the shard, beyond the largest measured size: the
# lists hold n / nlist ~ sqrt(n) codes each, times a fixed nprobe or the plan's.
IVF_GROWTH = {"sqrt": 0.5, "root4": 0.5 - NPROBE_EXPONENT}


def ivf_nlist_for(vectors: int) -> int:
    """The power of two nearest NLIST_PER_SQRT_VECTORS x sqrt(vectors), within the spec's
    bounds (100 k vectors: 1,024, the spec's default)."""
    target = NLIST_PER_SQRT_VECTORS * math.sqrt(max(vectors, 1))
    return min(MAX_NLIST, 2 ** max(0, round(math.log2(target))))


def ivf_nprobe_for(vectors: int) -> int:
    """NPROBE_AT_REFERENCE at NPROBE_REFERENCE_VECTORS, scaled by the inverse fourth root of
    the shard's vectors, at least NPROBE_FLOOR and at most the shard's nlist (100 k: 64,
    300 k: 49, 1 M: 36, 10 M: 20, beyond 26 M: 16)."""
    ratio = NPROBE_REFERENCE_VECTORS / max(vectors, 1)
    scaled = round(NPROBE_AT_REFERENCE * ratio**NPROBE_EXPONENT)
    return min(ivf_nlist_for(vectors), max(NPROBE_FLOOR, scaled))


def ivf_settings_for(vectors: int) -> dict[str, int]:
    """The IVF types' `dense.index.ivf` for a shard of `vectors`: nlist and nprobe."""
    return {"nlist": ivf_nlist_for(vectors), "nprobe": ivf_nprobe_for(vectors)}


def refine_k_factor_for(index_type: str, vectors: int) -> int:
    """ivf_pq's refine k-factor for a shard of `vectors` (REFINE_K_FACTOR_MEASURED_UP_TO); the
    other types' recall does not rest on it (ivf_sq8's SQ8 refine codes cap it)."""
    if index_type == "ivf_pq" and vectors > REFINE_K_FACTOR_MEASURED_UP_TO:
        return LARGE_SHARD_REFINE_K_FACTOR
    return REFINE_K_FACTOR


def dense_spec_for(
    index_type: str,
    shards: int,
    vectors_per_shard: int,
    measured_with: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The spec's `dense` settings for the plan (the IVF types' nlist and nprobe, ivf_pq's
    refine k-factor where the spec's default is not enough), and the `dense.index` settings
    the type's constants were measured with (`index_settings`: its refine storage)."""
    dense: dict[str, Any] = {"shards": shards, "index": {"type": index_type}}
    if index_type in IVF_TYPES:
        dense["index"]["ivf"] = ivf_settings_for(vectors_per_shard)
    k_factor = refine_k_factor_for(index_type, vectors_per_shard)
    if k_factor != REFINE_K_FACTOR:
        dense["index"]["refine"] = {"kFactor": k_factor}
    for section, fields in (measured_with or {}).items():
        dense["index"][section] = {**dense["index"].get(section, {}), **fields}
    return dense


def load_constants(path: Path = CONSTANTS) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise InvalidInput(
            f"capacity constants {path} not found (ragindex bench scale --constants writes them)"
        ) from None
    return data


def latency_at(points: list[tuple[int, float]], size: int, growth: str) -> float:
    """Latency at `size` from measured (size, ms) points: log-log interpolation between them;
    beyond the largest, the larger of the two largest points' slope and the type's `growth`
    ("log": with ln n, as a graph search; "sqrt": as the codes in a fixed number of IVF lists,
    nlist following sqrt(n); "root4": as those of the plan's nprobe, `ivf_nprobe_for`), so
    noise in the measurements never extrapolates to a faster search."""
    points = sorted(points)
    top_n, top_ms = points[-1]
    if growth in IVF_GROWTH:
        model = top_ms * (size / top_n) ** IVF_GROWTH[growth]
    else:
        model = top_ms * math.log(max(size, 2)) / math.log(max(top_n, 2))
    if len(points) == 1:
        return model
    i = 0
    while i < len(points) - 2 and size > points[i + 1][0]:
        i += 1
    (n0, ms0), (n1, ms1) = points[i], points[i + 1]
    fitted = ms0 * (size / n0) ** (math.log(ms1 / ms0) / math.log(n1 / n0))
    return max(fitted, model) if size > top_n else fitted


def make_plan(request: PlanInput, constants: dict[str, Any]) -> Plan:
    """The plan for `request` from `constants` (see the module doc)."""
    request.check()
    types = constants["types"]
    if request.index_type not in types:
        raise InvalidInput(f"the constants hold no measurements of {request.index_type}")
    measured = types[request.index_type]
    assume = constants["assumptions"]
    ref_dim = constants["dim"]
    per_dim = measured["code_bytes_per_dim"]
    index_bpv = per_dim * request.dim + measured["index_overhead_bytes_per_vector"]
    refine_disk_bpv = measured.get("refine_disk_bytes_per_dim", 0.0) * request.dim
    chunk_bpv = (
        index_bpv
        + measured["replica_overhead_bytes_per_vector"]
        + assume["text_bytes_per_chunk"]["value"]
    )
    # a snapshot is captured whole in memory, disk refine vectors included (`to_files`)
    snapshot_bpv = index_bpv + refine_disk_bpv + measured["snapshot_extra_bytes_per_vector"]
    growth = "log"
    if request.index_type in IVF_TYPES:  # a pinned nprobe scans lists that grow with sqrt(n)
        growth = "sqrt" if "ivf" in measured.get("index_settings", {}) else "root4"
    dim_factor = request.dim / ref_dim  # distance computations scale with the dimension
    points = {
        q: [(int(n), ms * dim_factor) for n, ms in measured[q].items()]
        for q in ("p50_ms", "p99_ms")
    }
    budget = request.p99_ms - assume["query_path_p99_ms"]["value"]
    if budget <= 0:
        raise InvalidInput(
            f"--p99-ms {request.p99_ms} leaves nothing for dense search: the rest of the query"
            f" path takes {assume['query_path_p99_ms']['value']} ms at p99"
        )
    for shards in range(1, MAX_SHARDS + 1):
        per_shard = math.ceil(request.chunks / shards)
        memory = per_shard * chunk_bpv
        snapshot = per_shard * snapshot_bpv
        peak = memory + snapshot
        p99 = latency_at(points["p99_ms"], per_shard, growth)
        if peak <= request.replica_memory_gib * GIB and p99 <= budget:
            break
    else:
        raise InvalidInput(
            f"no plan with at most {MAX_SHARDS} shards fits {request.replica_memory_gib} GiB"
            f" per replica and a dense p99 of {budget:.1f} ms: raise them or pick a smaller type"
        )
    p50 = latency_at(points["p50_ms"], per_shard, growth)
    busy = request.qps * p50 / 1000  # search-thread seconds per second, per shard
    replicas = max(MIN_REPLICAS, math.ceil(busy / UTILIZATION))
    cpu = math.ceil(2 * busy / replicas / UTILIZATION) / 2 or 0.5
    key = str(request.dim)
    query_ms = assume["embed_query_ms_per_core"]["value"].get(key)
    embedder_cores = request.qps * (query_ms or 0) / 1000 / UTILIZATION
    total_cores = shards * replicas * cpu + embedder_cores
    total_memory = shards * replicas * peak
    nodes = max(
        replicas,  # a shard's replicas on different nodes
        math.ceil(total_cores / (request.node_cores * NODE_HEADROOM)),
        math.ceil(total_memory / (request.node_memory_gib * GIB * NODE_HEADROOM)),
    )
    apply_batch_s = constants["apply_batch_records"] / measured["build_vectors_per_s"]
    rates = assume["embed_chunks_per_s"]["value"]
    rate = rates.get(key, rates[str(ref_dim)])
    notes = []
    if query_ms is None:
        notes.append(f"no query-embedding cost known for {request.dim}-d: embedder cores omitted")
    if key not in rates:
        notes.append(f"ingest hours use the {ref_dim}-d embedder's rate; none known for {key}-d")
    if apply_batch_s > request.freshness_s:
        notes.append(
            f"freshness {request.freshness_s} s missed: a replica applies a batch of"
            f" {constants['apply_batch_records']} chunks in {apply_batch_s:.1f} s"
        )
    sizes = sorted({n for n, _ in points["p50_ms"]})
    return Plan(
        shards=shards,
        replicas=replicas,
        vectors_per_shard=per_shard,
        memory_gib_per_replica=round(memory / GIB, 2),
        memory_peak_gib_per_replica=round(peak / GIB, 2),
        cpu_per_replica=cpu,
        search_p50_ms=round(p50, 3),
        search_p99_ms=round(p99, 3),
        dense_budget_ms=round(budget, 1),
        embedder_cores=round(embedder_cores, 1),
        nodes=nodes,
        snapshot_gib_per_shard=round(snapshot / GIB, 2),
        refine_disk_gib_per_replica=round(per_shard * refine_disk_bpv / GIB, 2),
        local_disk_gib_per_replica=round(
            (per_shard * refine_disk_bpv + SNAPSHOTS_ON_LOCAL_DISK * snapshot) / GIB, 2
        ),
        bootstrap_s=round(snapshot / measured["bootstrap_bytes_per_s"], 1),
        apply_batch_s=round(apply_batch_s, 2),
        ingest_cpu_core_hours=round(request.chunks / rate["cpu_core"] / 3600, 1),
        ingest_gpu_hours=round(request.chunks / rate["gpu"] / 3600, 2),
        measured_sizes=sizes,
        extrapolated=per_shard > sizes[-1] or request.dim != ref_dim,
        notes=notes,
        dense_spec=dense_spec_for(
            request.index_type, shards, per_shard, measured.get("index_settings")
        ),
    )


def plan_lines(request: PlanInput, plan: Plan, constants: dict[str, Any]) -> list[str]:
    """The plan as printable lines, saying what is measured and what extrapolated."""
    source = constants["measured"]
    lines = [
        f"{request.chunks:,} chunks x {request.dim}-d, {request.index_type}, {request.qps:g}"
        f" queries/s, p99 <= {request.p99_ms:g} ms, freshness {request.freshness_s:g} s",
        f"shards                {plan.shards} ({plan.vectors_per_shard:,} vectors each)",
        f"replicas per shard    {plan.replicas}",
        f"memory per replica    {plan.memory_gib_per_replica} GiB at rest,"
        f" {plan.memory_peak_gib_per_replica} GiB while it writes a snapshot (its limit)",
        f"CPU per replica       {plan.cpu_per_replica} cores (search), query embedder"
        f" {plan.embedder_cores} cores in all",
        f"dense search/shard    p50 {plan.search_p50_ms} ms, p99 {plan.search_p99_ms} ms"
        f" (budget {plan.dense_budget_ms} ms)",
        f"nodes                 {plan.nodes} ({request.node_cores} cores,"
        f" {request.node_memory_gib:g} GiB each)",
        f"local disk/replica    {plan.local_disk_gib_per_replica} GiB (storageSize):"
        f" {SNAPSHOTS_ON_LOCAL_DISK} x the snapshot while a fresh replica fetches one"
        + (
            f", and {plan.refine_disk_gib_per_replica} GiB of refine vectors (mapped: the page"
            " cache holds what searches touch)"
            if plan.refine_disk_gib_per_replica
            else ""
        ),
        f"snapshot per shard    {plan.snapshot_gib_per_shard} GiB;"
        f" bootstrap of a replica ~{plan.bootstrap_s} s",
        f"ingest (embedding)    {plan.ingest_cpu_core_hours:,} core-hours on CPU"
        f" ({plan.ingest_cpu_core_hours / request.node_cores:,.1f} h on one node),"
        f" {plan.ingest_gpu_hours} h on one GPU (assumed rate)",
        f"spec                  dense: {json.dumps(plan.dense_spec)}",
        f"measured at {', '.join(f'{n:,}' for n in plan.measured_sizes)} vectors x"
        f" {constants['dim']}-d on {source['machine']} ({source['date']}, {source['note']});"
        f" {'extrapolated beyond' if plan.extrapolated else 'within the measurements'}",
    ]
    return lines + [f"note: {n}" for n in plan.notes]


def plan_command(args: Any) -> int:
    """`ragindex plan`: print (and with --json write) the plan."""
    from ragindex.measure.output import write_json

    request = PlanInput(
        chunks=args.chunks,
        dim=args.dim,
        index_type=args.index_type,
        qps=args.qps,
        p99_ms=args.p99_ms,
        freshness_s=args.freshness_s,
        replica_memory_gib=args.replica_memory_gib,
        node_cores=args.node_cores,
        node_memory_gib=args.node_memory_gib,
    )
    constants = load_constants(args.constants or CONSTANTS)
    plan = make_plan(request, constants)
    print("\n".join(plan_lines(request, plan, constants)))
    if args.json:
        write_json(args.json, {"input": asdict(request), "plan": asdict(plan)})
    return 0


def constants_from_scale(report: dict[str, Any], note: str) -> dict[str, Any]:
    """The plan's constants from a `ragindex bench scale` report (per type its largest size
    for rates and bytes, every size for latencies), with the assumptions it cannot measure."""
    run = report["run"]
    dim, index = run["dim"], run["dense"]["index"]
    storage = index["refine"]["storage"]
    refine = REFINE_BYTES_PER_DIM[storage]
    code_bytes = {
        "hnsw": 4.0,
        "hnsw_sq8": 1.0,
        "ivf_sq8": 1.0 + refine,
        "ivf_pq": index["pq"]["m"] * index["pq"]["nbits"] / 8 / dim + refine,
    }
    sizes = sorted(report["sizes"], key=int)
    types: dict[str, Any] = {}
    for kind in sorted({k for size in sizes for k in report["sizes"][size]}):
        row = report["sizes"][max((s for s in sizes if kind in report["sizes"][s]), key=int)][kind]
        index_bpv = row["index_bytes_per_million"] / 1e6
        disk_bpv = row.get("refine_disk_bytes", 0) / row["vectors"]  # mapped: in the RSS
        types[kind] = {
            "code_bytes_per_dim": code_bytes[kind],
            "index_overhead_bytes_per_vector": round(index_bpv - code_bytes[kind] * dim, 1),
            "replica_overhead_bytes_per_vector": round(
                max(0.0, row["rss_bytes_per_million"] / 1e6 - index_bpv - disk_bpv), 1
            ),
            "snapshot_extra_bytes_per_vector": round(
                max(0.0, row["snapshot_bytes"] / row["vectors"] - index_bpv - disk_bpv), 1
            ),
            "build_vectors_per_s": round(row["vectors"] / row["build_s"], 1),
            "bootstrap_bytes_per_s": round(row["snapshot_bytes"] / row["bootstrap_s"]),
            **{
                q: {s: report["sizes"][s][kind][q] for s in sizes if kind in report["sizes"][s]}
                for q in ("p50_ms", "p99_ms", "recall@10")
            },
        }
        if kind in IVF_TYPES:
            # what the plan must write for these latencies to hold: a fixed nprobe as measured
            # (a run with --ivf-by-size measured the plan's own), the refine vectors on disk
            settings: dict[str, Any] = {}
            if not run.get("ivf_by_size"):
                settings["ivf"] = {"nprobe": index["ivf"]["nprobe"]}
            if storage == "disk":
                types[kind]["refine_disk_bytes_per_dim"] = round(disk_bpv / dim, 3)
                settings["refine"] = {"storage": storage, "kFactor": index["refine"]["k_factor"]}
            if settings:
                types[kind]["index_settings"] = settings
    return {
        "measured": {
            "machine": f"{run['cores']} cores, {run['memory_bytes'] / GIB:.0f} GiB,"
            f" {run['faiss_threads']} FAISS thread(s)",
            "date": run["date"],
            "note": note,
            "command": f"ragindex bench scale --sizes {','.join(sizes)} --types {','.join(types)}",
        },
        "dim": dim,
        "apply_batch_records": READ_BATCH,
        "types": types,
        "assumptions": ASSUMPTIONS,
    }
