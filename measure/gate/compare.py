"""The release gate's decision: a run against the committed baseline, as a pure function.

Why: retrieval quality is the ceiling on answer quality, so a change that loses relevance (or
makes the query path slower relative to itself) must be blocked in review, not found later.
Absolute latencies differ between machines and between two runs on a shared box, so the gate
compares only quality metrics and latency RATIOS measured within one run.

A measurement (and a baseline) is `{"quality": {leg: {metric: value}}, "latency_ratios":
{name: value}, ...}`; other keys are carried along for the reader and ignored here.
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
# Measurement settings a baseline is only comparable under (the rest are reported, not gated).
COMPARED_SETTINGS = ("collection", "documents", "queries", "spec")


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
    name: str  # "hybrid ndcg@10" or a ratio's name
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


def check_measurement(data: object, what: str = "measurement") -> dict[str, Any]:
    """The quality and latency_ratios sections of a baseline or a run, validated."""
    if not isinstance(data, Mapping):
        raise InvalidInput(f"{what} must be a JSON object")
    quality = data.get("quality")
    ratios = data.get("latency_ratios")
    if not isinstance(quality, Mapping) or not isinstance(ratios, Mapping):
        raise InvalidInput(f"{what} needs 'quality' and 'latency_ratios' objects")
    checked_q: dict[str, dict[str, float]] = {}
    for leg, metrics in quality.items():
        if not isinstance(metrics, Mapping) or not metrics:
            raise InvalidInput(f"{what} quality.{leg} must be a non-empty object of metrics")
        checked_q[leg] = {m: _number(v, f"{what} quality.{leg}.{m}") for m, v in metrics.items()}
    checked_r = {}
    for name, value in ratios.items():
        checked_r[name] = _number(value, f"{what} latency_ratios.{name}")
        if checked_r[name] <= 0:
            raise InvalidInput(f"{what} latency_ratios.{name} must be > 0, got {value!r}")
    return {"quality": checked_q, "latency_ratios": checked_r}


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
    for leg, metrics in base["quality"].items():
        for metric, value in metrics.items():
            name = f"{leg} {metric}"
            limit = round(value - tol.quality_drop, 6)
            got = cur["quality"].get(leg, {}).get(metric)
            if got is None:
                out.append(Violation("missing", name, value, None, limit))
            elif got < limit - 1e-9:
                out.append(Violation("quality", name, value, got, limit))
    for ratio, value in base["latency_ratios"].items():
        limit = round(value * (1 + tol.ratio_growth), 6)
        got = cur["latency_ratios"].get(ratio)
        if got is None:
            out.append(Violation("missing", ratio, value, None, limit))
        elif got > limit + 1e-9:
            out.append(Violation("latency_ratio", ratio, value, got, limit))
    return out


def _settings_differ(base: Mapping[str, Any], cur: Mapping[str, Any]) -> list[Violation]:
    """A settings violation per compared setting of the baseline that the run does not share
    (spec fields are named by their path, e.g. `spec.dense.hnsw.efSearch`)."""
    names: list[str] = []
    for key in COMPARED_SETTINGS:
        if key in base and base[key] != cur.get(key):
            names += _diff_paths(base[key], cur.get(key), f"settings.{key}")
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
    rows = []
    for leg, metrics in base["quality"].items():
        for metric, value in metrics.items():
            got = cur["quality"].get(leg, {}).get(metric)
            delta = "" if got is None else f"{got - value:+.4f}"
            rows.append([f"{leg} {metric}", f"{value:.4f}", _fmt(got), delta])
    for ratio, value in base["latency_ratios"].items():
        got = cur["latency_ratios"].get(ratio)
        delta = "" if got is None else f"{got / value - 1:+.1%}"
        rows.append([ratio, f"{value:.4f}", _fmt(got), delta])
    return text_table(["number", "baseline", "current", "delta"], rows)


def _fmt(value: float | None) -> str:
    return "missing" if value is None else f"{value:.4f}"
