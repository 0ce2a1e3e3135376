"""The release gate's decision: a run against the committed baseline, as a pure function.

Why: retrieval quality is the ceiling on answer quality, so a change that loses relevance (or
makes the query path slower relative to itself) must be blocked in review, not found later.
Absolute latencies differ between machines and between two runs on a shared box, so the gate
compares only quality metrics and latency RATIOS measured within one run.

A measurement (and a baseline) is `{"quality": {leg: {metric: value}}, "latency_ratios":
{name: value}, "collections": {name: {"quality": {leg: {metric: value}}, "quality_drop": d,
"documents": n, "queries": n}}, ...}`: the main collection's quality and stage ratios, and the
quality of every other gated collection with its own tolerance; other keys are carried along
for the reader and ignored here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ragindex.errors import InvalidInput
from ragindex.measure.stats import text_table

QUALITY_DROP = 0.01
# Stage ratios have sub-millisecond floors on a shared 2-core box: the dense ratio moved +77 %
# between two Cranfield runs at load average 28, while a 3 ms sleep in a sub-millisecond stage
# multiplies its ratio (x4.7 for dense, x13 for fetch); so a ratio may double, not more.
RATIO_GROWTH = 1.0
HNSW_NDCG_GAP = 0.005  # the dense leg in HNSW may lose at most this much nDCG@10 to exact
# A small collection's mean moves a whole query's worth at once: one query losing its top hits
# costs it up to ~0.75 / queries, so its tolerance is at least that (58 queries: 0.013).
ONE_QUERY_LOSS = 0.75
# Measurement settings a baseline is only comparable under (the rest are reported, not gated).
COMPARED_SETTINGS = ("collection", "documents", "queries", "spec")


def quality_drop_for(queries: int) -> float:
    """The quality drop a collection of `queries` judged queries is allowed in the gate."""
    if queries < 1:
        raise InvalidInput(f"a gated collection needs judged queries, got {queries}")
    return round(max(QUALITY_DROP, ONE_QUERY_LOSS / queries), 4)


@dataclass(frozen=True)
class Tolerances:
    quality_drop: float = QUALITY_DROP  # absolute drop allowed in any quality metric
    ratio_growth: float = RATIO_GROWTH  # relative growth allowed in any latency ratio

    def __post_init__(self) -> None:
        if not (self.quality_drop >= 0 and self.ratio_growth >= 0):
            raise InvalidInput(f"tolerances must be >= 0, got {self}")


@dataclass(frozen=True)
class Violation:
    kind: Literal["quality", "latency_ratio", "missing", "hnsw", "settings"]
    name: str  # "hybrid ndcg@10", "nodejs-api hybrid ndcg@10" or a ratio's name
    baseline: float
    current: float | None
    limit: float  # the worst value that would still have passed

    def message(self) -> str:
        if self.kind == "settings":
            return (
                f"{self.name} differs from the baseline's: it was measured on another"
                " configuration (rerun with --update-baseline if the change is meant)"
            )
        if self.kind == "hnsw":
            return (
                f"{self.name}: {self.current:.4f} is more than {HNSW_NDCG_GAP} below exact"
                f" search's {self.baseline:.4f}"
            )
        if self.current is None:
            return f"{self.name}: in the baseline ({self.baseline:.4f}) but not measured"
        if self.kind == "quality":
            return (
                f"{self.name}: {self.current:.4f} < {self.limit:.4f}"
                f" (baseline {self.baseline:.4f}, drop {self.baseline - self.current:.4f})"
            )
        return (
            f"{self.name}: {self.current:.4f} > {self.limit:.4f}"
            f" (baseline {self.baseline:.4f}, +{self.current / self.baseline - 1:.1%})"
        )


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise InvalidInput(f"{where} must be a number, got {value!r}")
    return float(value)


def _check_quality(quality: object, where: str) -> dict[str, dict[str, float]]:
    if not isinstance(quality, Mapping):
        raise InvalidInput(f"{where} must be an object of legs")
    checked: dict[str, dict[str, float]] = {}
    for leg, metrics in quality.items():
        if not isinstance(metrics, Mapping) or not metrics:
            raise InvalidInput(f"{where}.{leg} must be a non-empty object of metrics")
        checked[leg] = {m: _number(v, f"{where}.{leg}.{m}") for m, v in metrics.items()}
    return checked


def check_measurement(data: object, what: str = "measurement") -> dict[str, Any]:
    """The quality, latency_ratios and collections sections of a baseline or a run, validated
    (a measurement from before other collections were gated has none)."""
    if not isinstance(data, Mapping):
        raise InvalidInput(f"{what} must be a JSON object")
    quality = data.get("quality")
    ratios = data.get("latency_ratios")
    if not isinstance(quality, Mapping) or not isinstance(ratios, Mapping):
        raise InvalidInput(f"{what} needs 'quality' and 'latency_ratios' objects")
    checked_q = _check_quality(quality, f"{what} quality")
    checked_r = {}
    for name, value in ratios.items():
        checked_r[name] = _number(value, f"{what} latency_ratios.{name}")
        if checked_r[name] <= 0:
            raise InvalidInput(f"{what} latency_ratios.{name} must be > 0, got {value!r}")
    collections = data.get("collections", {})
    if not isinstance(collections, Mapping):
        raise InvalidInput(f"{what} collections must be an object of collections")
    checked_c: dict[str, dict[str, Any]] = {}
    for name, entry in collections.items():
        where = f"{what} collections.{name}"
        if not isinstance(entry, Mapping):
            raise InvalidInput(f"{where} must be an object")
        drop = _number(entry.get("quality_drop"), f"{where}.quality_drop")
        if drop < 0:
            raise InvalidInput(f"{where}.quality_drop must be >= 0, got {drop}")
        checked_c[name] = {
            "quality": _check_quality(entry.get("quality"), f"{where}.quality"),
            "quality_drop": drop,
        }
    return {"quality": checked_q, "latency_ratios": checked_r, "collections": checked_c}


def compare(
    baseline: Mapping[str, Any],
    current: Mapping[str, Any],
    tolerances: Tolerances | None = None,
) -> list[Violation]:
    """Every way `current` is worse than `baseline` beyond the tolerances. A metric or ratio
    in the baseline that the run did not measure (a disabled leg) is a violation too;
    anything the run measured beyond the baseline is ignored."""
    tol = tolerances or Tolerances()
    base = check_measurement(baseline, "baseline")
    cur = check_measurement(current, "current run")
    out = _settings_differ(baseline.get("settings", {}), current.get("settings", {}))
    exact = cur["quality"].get("dense", {}).get("ndcg@10")
    hnsw = cur["quality"].get("dense_hnsw", {}).get("ndcg@10")
    if exact is not None and hnsw is not None and hnsw < exact - HNSW_NDCG_GAP - 1e-9:
        out.append(Violation("hnsw", "dense_hnsw ndcg@10", exact, hnsw, exact - HNSW_NDCG_GAP))
    out += _quality_drops(base["quality"], cur["quality"], tol.quality_drop)
    for name, entry in base["collections"].items():
        got = cur["collections"].get(name, {}).get("quality", {})
        out += _quality_drops(entry["quality"], got, entry["quality_drop"], f"{name} ")
        out += _settings_differ(
            baseline["collections"][name],
            current.get("collections", {}).get(name, {}),
            f"collections.{name}",
            COLLECTION_SETTINGS,
        )
    for ratio, value in base["latency_ratios"].items():
        limit = round(value * (1 + tol.ratio_growth), 6)
        got = cur["latency_ratios"].get(ratio)
        if got is None:
            out.append(Violation("missing", ratio, value, None, limit))
        elif got > limit + 1e-9:
            out.append(Violation("latency_ratio", ratio, value, got, limit))
    return out


def _quality_drops(
    base: Mapping[str, Mapping[str, float]],
    cur: Mapping[str, Mapping[str, float]],
    drop: float,
    prefix: str = "",
) -> list[Violation]:
    """A violation per baseline metric that the run lost more than `drop` of, or missed."""
    out = []
    for leg, metrics in base.items():
        for metric, value in metrics.items():
            name = f"{prefix}{leg} {metric}"
            limit = round(value - drop, 6)
            got = cur.get(leg, {}).get(metric)
            if got is None:
                out.append(Violation("missing", name, value, None, limit))
            elif got < limit - 1e-9:
                out.append(Violation("quality", name, value, got, limit))
    return out


COLLECTION_SETTINGS = ("documents", "queries")  # what a gated collection's figures depend on


def _settings_differ(
    base: Mapping[str, Any],
    cur: Mapping[str, Any],
    where: str = "settings",
    keys: tuple[str, ...] = COMPARED_SETTINGS,
) -> list[Violation]:
    """A settings violation per compared setting of the baseline that the run does not share
    (spec fields are named by their path, e.g. `spec.dense.hnsw.efSearch`)."""
    names: list[str] = []
    for key in keys:
        if key in base and base[key] != cur.get(key):
            names += _diff_paths(base[key], cur.get(key), f"{where}.{key}")
    return [Violation("settings", name, 0.0, None, 0.0) for name in names]


def _diff_paths(a: object, b: object, path: str) -> list[str]:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return [
            p
            for key in sorted(a.keys() | b.keys())
            for p in _diff_paths(a.get(key), b.get(key), f"{path}.{key}")
        ]
    return [] if a == b else [path]


def gate_table(baseline: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """Baseline and current side by side, one row per gated number."""
    base = check_measurement(baseline, "baseline")
    cur = check_measurement(current, "current run")
    rows = _quality_rows(base["quality"], cur["quality"])
    for name, entry in base["collections"].items():
        got = cur["collections"].get(name, {}).get("quality", {})
        rows += _quality_rows(entry["quality"], got, f"{name} ")
    for ratio, value in base["latency_ratios"].items():
        got = cur["latency_ratios"].get(ratio)
        delta = "" if got is None else f"{got / value - 1:+.1%}"
        rows.append([ratio, f"{value:.4f}", _fmt(got), delta])
    return text_table(["number", "baseline", "current", "delta"], rows)


def _quality_rows(
    base: Mapping[str, Mapping[str, float]],
    cur: Mapping[str, Mapping[str, float]],
    prefix: str = "",
) -> list[list[str]]:
    rows = []
    for leg, metrics in base.items():
        for metric, value in metrics.items():
            got = cur.get(leg, {}).get(metric)
            delta = "" if got is None else f"{got - value:+.4f}"
            rows.append([f"{prefix}{leg} {metric}", f"{value:.4f}", _fmt(got), delta])
    return rows


def _fmt(value: float | None) -> str:
    return "missing" if value is None else f"{value:.4f}"
