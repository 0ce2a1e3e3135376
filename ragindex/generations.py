"""Index generations: what one is, and the pure decisions about building and promoting one.

A generation is everything a rebuild of the views depends on: the embedder identity (backend,
model, prompt prefixes; backends that compute the same vectors count as one, SAME_VECTORS_AS),
the dense layout (shard count, the index type and its build parameters: HNSW M and
efConstruction, IVF nlist, PQ m and nbits, the refine storage, the training minimum) and the
chunking (chunk ids and text). Changing any of GENERATION_FIELDS starts a new generation (an
index type's build parameters count only while that type is chosen, `USED_BY`), built beside
the serving one by replaying the compacted `docs` log into `chunks.<new>`; every other field
changes in place (HNSW efSearch, IVF nprobe and the refine kFactor among them). The operator
and the app name a generation's topics, RayService and directories with
`index_generation(spec)`.

Promotion is decided here from evidence the caller gathers (`PromotionEvidence`): the new
generation's consumers reached the end of `docs`, every tenant's documents are indexed, and a
self-check (each sampled document's own title retrieves it in the top 10 of the new
generation's dense leg) passes. The generation record (`GenerationRecord`) is the one pointer
that says which generation serves; promotion and rollback are pure functions of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ragindex.config import IVF_TYPES, TRAINED_TYPES, RagIndexSpec
from ragindex.errors import InvalidInput, RagIndexError
from ragindex.hashing import content_hash

# CRD paths of the fields that start a new generation (everything else changes in place).
GENERATION_FIELDS: tuple[str, ...] = (
    "embedder.backend",
    "embedder.model",
    "embedder.queryPrefix",
    "embedder.passagePrefix",
    "dense.shards",
    "dense.index.type",
    "dense.index.trainMin",
    "dense.index.ivf.nlist",
    "dense.index.pq.m",
    "dense.index.pq.nbits",
    "dense.index.refine.storage",
    "dense.hnsw.m",
    "dense.hnsw.efConstruction",
    "chunking.strategy",
    "chunking.maxTokens",
    "chunking.overlap",
    "chunking.contextual",
)

SELF_CHECK_TOP_K = 10

# Backends that compute the same vectors as another one count as it in the generation: ONNX
# Runtime fp32 runs sentence-transformers' weights and pooling, and its vectors differ by at
# most 2e-7 per component (tests/models/test_onnx_embedder.py), the same as torch's own
# batch-size noise, so switching between them changes in place without a re-embed.
SAME_VECTORS_AS = {"onnx": "sentence-transformers"}


# Build parameters of some index types only: each counts while `dense.index.type` is one of
# these, and is left out of the identity otherwise, so that a spec of the default type (and
# every spec written before the index types existed) keeps its generation.
USED_BY: dict[str, tuple[str, ...]] = {
    "dense.index.type": ("hnsw_sq8", *IVF_TYPES),
    "dense.index.trainMin": TRAINED_TYPES,
    "dense.index.ivf.nlist": IVF_TYPES,
    "dense.index.pq.m": ("ivf_pq",),
    "dense.index.pq.nbits": ("ivf_pq",),
    "dense.index.refine.storage": IVF_TYPES,
    "dense.hnsw.m": ("hnsw", "hnsw_sq8"),
    "dense.hnsw.efConstruction": ("hnsw", "hnsw_sq8"),
}


# Fields added to the identity after indexes were running: each is left out at the value that
# indexes as before, so a spec that leaves it there keeps its generation on upgrade.
LEFT_OUT_AT: dict[str, Any] = {"chunking.contextual": False}


def generation_identity(spec: RagIndexSpec) -> dict[str, Any]:
    """The values of GENERATION_FIELDS in `spec`, keyed by their CRD path (a field that the
    index type does not use is left out; `dense.index.trainMin` is the effective minimum)."""
    dumped = spec.model_dump(mode="json", by_alias=True)
    index_type = spec.dense.index.type
    out: dict[str, Any] = {}
    for path in GENERATION_FIELDS:
        if index_type not in USED_BY.get(path, (index_type,)):
            continue
        node: Any = dumped
        for part in path.split("."):
            node = node[part]
        if path in LEFT_OUT_AT and node == LEFT_OUT_AT[path]:
            continue
        out[path] = node
    if "dense.index.trainMin" in out:
        out["dense.index.trainMin"] = spec.dense.index.training_minimum
    backend = out["embedder.backend"]
    out["embedder.backend"] = SAME_VECTORS_AS.get(backend, backend)
    return out


def index_generation(spec: RagIndexSpec) -> str:
    """8 hex characters naming the generation; equal GENERATION_FIELDS, equal generation."""
    return content_hash(json.dumps(generation_identity(spec), sort_keys=True))[:8]


def changed_generation_fields(old: RagIndexSpec, new: RagIndexSpec) -> list[str]:
    """The GENERATION_FIELDS that differ between two specs (empty: same generation)."""
    a, b = generation_identity(old), generation_identity(new)
    return [path for path in GENERATION_FIELDS if a.get(path) != b.get(path)]


def ingest_group(generation: str) -> str:
    """The consumer group of a generation's ingest workers on `docs`: each generation keeps
    its own offsets, so a new one replays `docs` from the start while the old one goes on."""
    return f"ingest.{generation}"


# ---------------------------------------------------------------------------------------------
# Promotion


class PromotionRefused(RagIndexError):
    """A new generation failed a promotion check; the serving generation is unchanged."""

    def __init__(self, generation: str, failures: Sequence[str]) -> None:
        self.generation = generation
        self.failures = list(failures)
        super().__init__(f"generation {generation} was not promoted: " + "; ".join(self.failures))


@dataclass(frozen=True)
class PromotionEvidence:
    """What the caller measured of a candidate generation before promoting it."""

    docs_end: Mapping[int, int]  # `docs` partition -> end offset
    consumed: Mapping[int, int]  # `docs` partition -> the generation's committed offset
    documents: Mapping[str, int]  # tenant -> live documents in `docs`
    indexed: Mapping[str, int]  # tenant -> documents with chunks in the new generation's views
    self_check_missed: Sequence[str]  # sampled document keys whose title did not retrieve them
    self_check_sampled: int


CHECKS: tuple[str, ...] = ("caught-up", "chunk-counts", "self-check")


def promotion_failures(evidence: PromotionEvidence) -> list[str]:
    """Each failed check, named and explained; empty means the generation may be promoted."""
    failures: list[str] = []
    behind = {
        p: end - evidence.consumed.get(p, 0)
        for p, end in evidence.docs_end.items()
        if evidence.consumed.get(p, 0) < end
    }
    if behind:
        failures.append(
            f"caught-up: the backfill is {sum(behind.values())} docs records behind the end"
            f" of docs (partitions {sorted(behind)})"
        )
    tenants = sorted(set(evidence.documents) | set(evidence.indexed))
    wrong = [
        f"{t}: {evidence.indexed.get(t, 0)} of {evidence.documents.get(t, 0)}"
        for t in tenants
        if evidence.indexed.get(t, 0) != evidence.documents.get(t, 0)
    ]
    if wrong:
        failures.append(
            "chunk-counts: documents indexed in the new generation differ from docs ("
            + ", ".join(wrong[:5])
            + (", ..." if len(wrong) > 5 else "")
            + ")"
        )
    if evidence.self_check_missed:
        missed = evidence.self_check_missed
        failures.append(
            f"self-check: {len(missed)} of {evidence.self_check_sampled} sampled documents are"
            f" not in the top {SELF_CHECK_TOP_K} for their own title ("
            + ", ".join(missed[:5])
            + (", ..." if len(missed) > 5 else "")
            + ")"
        )
    return failures


@dataclass(frozen=True)
class BuildReport:
    """What a generation's app says about its own build, for the operator to decide on.

    `consumed`/`end`: `docs` records its ingest group committed, and records in `docs`.
    `checks`: each of CHECKS -> "" when passed or why it failed, without tenant names or
    document keys (anyone who reaches the Serve port may read it); None while the backfill
    has not reached the end of `docs` (the checks have not run yet).
    `waiting_on`: while the checks wait for the views to apply the backfill, which view
    replicas they wait on and where each stands (views, replica ids and offsets only).
    """

    generation: str
    consumed: int
    end: int
    checks: Mapping[str, str] | None = None
    waiting_on: tuple[str, ...] = ()

    @property
    def progress(self) -> int:
        """Backfill percentage, 0-100 (100 only once it reached the end)."""
        if self.end <= 0:
            return 100
        return min(100, self.consumed * 100 // self.end)

    @property
    def failed(self) -> list[str]:
        return [c for c in CHECKS if (self.checks or {}).get(c)]

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "consumed": self.consumed,
            "end": self.end,
            "checks": None if self.checks is None else dict(self.checks),
            "waiting_on": list(self.waiting_on),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BuildReport:
        """Parse a report; InvalidInput names what is malformed (it comes over the network)."""
        try:
            checks = data["checks"]
            report = cls(
                generation=str(data["generation"]),
                consumed=int(data["consumed"]),
                end=int(data["end"]),
                checks=None if checks is None else {str(k): str(v) for k, v in checks.items()},
                waiting_on=tuple(str(w) for w in data.get("waiting_on") or ()),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise InvalidInput(f"malformed generation report {data!r}: {e}") from e
        if report.checks is not None and set(report.checks) != set(CHECKS):
            raise InvalidInput(f"generation report checks {sorted(report.checks)} are not {CHECKS}")
        return report


def backfill_goal(
    goal: Mapping[int, int] | None, consumed: Mapping[int, int], ends: Mapping[int, int]
) -> tuple[bool, dict[int, int]]:
    """Whether a backfill caught up with `docs`, and the goal to hold it to at the next report.

    Under steady writes the workers always trail the end of `docs`, so "caught up" means:
    consumed everything that was in `docs` when the goal was set (at the first report, now).
    The goal stays until it is reached, so a backfill that trails the writes by any bounded lag
    gets there; a goal moved to the end at every report would need the lag to stay under the
    interval between reports, which a loaded node does not give. Once reached, the next goal
    is the end as it is now."""
    target = dict(goal) if goal is not None else dict(ends)
    if any(consumed.get(p, 0) < end for p, end in target.items()):
        return False, target
    return True, dict(ends)


def build_report(generation: str, evidence: PromotionEvidence) -> BuildReport:
    """The report of `evidence` (pure): progress, and the checks once the backfill caught up."""
    consumed = sum(min(evidence.consumed.get(p, 0), e) for p, e in evidence.docs_end.items())
    end = sum(evidence.docs_end.values())
    if consumed < end:
        return BuildReport(generation, consumed, end)
    tenants = set(evidence.documents) | set(evidence.indexed)
    wrong = [t for t in tenants if evidence.indexed.get(t, 0) != evidence.documents.get(t, 0)]
    missed = len(evidence.self_check_missed)
    checks = {
        "caught-up": "",
        "chunk-counts": (
            f"{len(wrong)} of {len(tenants)} tenants have documents missing from (or extra in)"
            " the new generation's views"
            if wrong
            else ""
        ),
        "self-check": (
            f"{missed} of {evidence.self_check_sampled} sampled documents are not in the top"
            f" {SELF_CHECK_TOP_K} of the new generation's dense leg for their own title"
            if missed
            else ""
        ),
    }
    return BuildReport(generation, consumed, end, checks)


def self_check_sample(keys: Sequence[bytes], size: int) -> list[bytes]:
    """A deterministic sample of document keys (the same docs every run, spread by hash)."""
    if size < 0:
        raise InvalidInput(f"self-check sample size must be >= 0, got {size}")
    return sorted(keys, key=lambda k: content_hash(k.decode()))[:size]


# ---------------------------------------------------------------------------------------------
# The generation record: which generation serves, which are built or kept for rollback

State = Literal["building", "serving", "retained", "failed"]


@dataclass(frozen=True)
class GenerationEntry:
    spec: dict[str, Any]  # the generation's spec (JSON, CRD aliases)
    state: State
    since: float  # when it entered this state (seconds since the epoch)
    reason: str = ""


@dataclass(frozen=True)
class GenerationRecord:
    """Every generation of one index and which one serves (the atomic pointer)."""

    active: str | None = None
    generations: Mapping[str, GenerationEntry] = field(default_factory=dict)

    def spec_of(self, generation: str) -> RagIndexSpec:
        return RagIndexSpec.model_validate(self.generations[generation].spec)

    def to_json(self) -> dict[str, Any]:
        return {
            "active": self.active,
            "generations": {
                g: {"spec": e.spec, "state": e.state, "since": e.since, "reason": e.reason}
                for g, e in self.generations.items()
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GenerationRecord:
        return cls(
            active=data.get("active"),
            generations={g: GenerationEntry(**e) for g, e in data.get("generations", {}).items()},
        )


def _with(record: GenerationRecord, generation: str, entry: GenerationEntry) -> GenerationRecord:
    return replace(record, generations={**record.generations, generation: entry})


def first_generation(spec: RagIndexSpec, now: float) -> GenerationRecord:
    """The record of an index whose first generation is `spec`'s."""
    spec_json = spec.model_dump(mode="json", by_alias=True)
    return GenerationRecord(
        active=index_generation(spec),
        generations={index_generation(spec): GenerationEntry(spec_json, "serving", now)},
    )


def start_building(record: GenerationRecord, spec: RagIndexSpec, now: float) -> GenerationRecord:
    """Mark `spec`'s generation as building beside the serving one."""
    generation = index_generation(spec)
    if record.active is None:
        raise InvalidInput("nothing serves yet: ingest documents before a reindex")
    if generation == record.active:
        raise InvalidInput(
            f"the spec names generation {generation}, which is already serving: none of"
            f" {', '.join(GENERATION_FIELDS)} changed, so there is nothing to rebuild (other"
            " fields apply in place)"
        )
    spec_json = spec.model_dump(mode="json", by_alias=True)
    return _with(record, generation, GenerationEntry(spec_json, "building", now))


def fail(record: GenerationRecord, generation: str, reason: str, now: float) -> GenerationRecord:
    entry = record.generations[generation]
    return _with(record, generation, replace(entry, state="failed", since=now, reason=reason))


def promote(record: GenerationRecord, generation: str, now: float) -> GenerationRecord:
    """Serve `generation`; the one serving before is retained for rollback."""
    entry = record.generations.get(generation)
    if entry is None or entry.state not in ("building", "retained"):
        raise InvalidInput(f"generation {generation} is not built; it cannot serve")
    out = record
    if record.active is not None and record.active != generation:
        old = record.generations[record.active]
        out = _with(out, record.active, replace(old, state="retained", since=now, reason=""))
    out = _with(out, generation, replace(entry, state="serving", since=now, reason=""))
    return replace(out, active=generation)


def rollback_target(record: GenerationRecord, now: float, window_s: float) -> str:
    """The most recently retained generation, if it is still inside the rollback window."""
    retained = [(e.since, g) for g, e in record.generations.items() if e.state == "retained"]
    if not retained:
        raise InvalidInput("no generation is retained: there is nothing to roll back to")
    since, generation = max(retained)
    if now - since > window_s:
        raise InvalidInput(
            f"generation {generation} was retired {now - since:.0f} s ago, beyond the rollback"
            f" window of {window_s:.0f} s; reindex with its spec instead"
        )
    return generation


def forget(record: GenerationRecord, generations: Sequence[str]) -> GenerationRecord:
    """The record without `generations` (retired: their data is deleted); never the active."""
    if record.active in generations:
        raise InvalidInput(f"generation {record.active} serves; it cannot be retired")
    kept = {g: e for g, e in record.generations.items() if g not in generations}
    return replace(record, generations=kept)


def expired(record: GenerationRecord, now: float, window_s: float) -> list[str]:
    """Retained or failed generations past the rollback window (their data may be dropped)."""
    return sorted(
        g
        for g, e in record.generations.items()
        if e.state in ("retained", "failed") and now - e.since > window_s
    )


# ---------------------------------------------------------------------------------------------
# The BM25 leg on Elasticsearch: one concrete index per generation behind one read alias


def lexical_alias(spec: RagIndexSpec, namespace: str, name: str) -> str:
    """The Elasticsearch read alias of RagIndex `namespace/name`: the spec's, else one of its
    own (`default_lexical_alias`)."""
    return spec.lexical.elasticsearch_alias or default_lexical_alias(namespace, name)


def default_lexical_alias(namespace: str, name: str) -> str:
    """`ragindex_<namespace>_<name>_<hash>`: two RagIndexes on one Elasticsearch never share
    an alias, nor (being `<alias>-<generation>`) an index. Kubernetes names are mapped onto the
    alias alphabet ('-' and '.' become '_', cut to fit 100 characters), and the hash of the
    exact pair keeps apart the names that mapping makes equal."""
    readable = re.sub(r"[^a-z0-9]", "_", f"{namespace}_{name}".lower())[:80]
    return f"ragindex_{readable}_{content_hash(f'{namespace}/{name}')[:8]}"


def lexical_index_name(alias: str, generation: str) -> str:
    """The concrete Elasticsearch index of one generation (a reshard or re-embed never shares
    one: the chunk ids and their shard placement belong to the generation)."""
    return f"{alias}-{generation}"


def alias_switch(alias: str, current: Sequence[str], new_index: str) -> list[dict[str, Any]]:
    """The actions of the one `_aliases` call that moves the read alias to `new_index`: every
    remove and the add are applied atomically, so no search sees no index or two."""
    actions: list[dict[str, Any]] = [
        {"remove": {"index": i, "alias": alias}} for i in sorted(current) if i != new_index
    ]
    actions.append({"add": {"index": new_index, "alias": alias}})
    return actions
