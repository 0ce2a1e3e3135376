"""Small pure helpers every benchmark and report shares: percentiles, the warm-up split, tables.

One definition each, so two reports of the same samples agree (a p99 is numpy's linearly
interpolated percentile everywhere) and every printed table looks the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

import numpy as np

from ragindex.errors import InvalidInput

T = TypeVar("T")
WARMUP_QUERIES = 10


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100, linear interpolation) of a non-empty sample."""
    if not len(samples):
        raise InvalidInput("no samples to take a percentile of")
    if not 0 <= q <= 100:
        raise InvalidInput(f"percentile q must be in 0..100, got {q}")
    return float(np.percentile(samples, q))


def percentiles(samples_ms: Sequence[float], digits: int = 4) -> dict[str, float]:
    """p50/p99 in milliseconds of a non-empty sample, and its size."""
    return {
        "p50_ms": round(percentile(samples_ms, 50), digits),
        "p99_ms": round(percentile(samples_ms, 99), digits),
        "samples": len(samples_ms),
    }


@overload
def split_warmup(
    queries: np.ndarray, warmup: int = WARMUP_QUERIES
) -> tuple[np.ndarray, np.ndarray]: ...
@overload
def split_warmup(
    queries: Sequence[T], warmup: int = WARMUP_QUERIES
) -> tuple[Sequence[T], Sequence[T]]: ...
def split_warmup(queries: Any, warmup: int = WARMUP_QUERIES) -> tuple[Any, Any]:
    """The first `warmup` queries, run untimed to warm caches, and the rest, the timed set: no
    benchmark times a query it warmed up on."""
    if warmup < 0:
        raise InvalidInput(f"warm-up must be >= 0 queries, got {warmup}")
    if len(queries) <= warmup:
        raise InvalidInput(f"need more than {warmup} queries (the warm-up), got {len(queries)}")
    return queries[:warmup], queries[warmup:]


def text_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A fixed-width plain-text table, columns left-aligned, two spaces apart."""
    cells = [[str(c) for c in header], *([str(c) for c in row] for row in rows)]
    if any(len(row) != len(header) for row in cells):
        raise InvalidInput("every row of a table needs one cell per header column")
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A Markdown table's lines."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


Goals = Mapping[str, tuple[Literal["<=", ">=", "<"], float]]


def missed_goals(report: Mapping[str, object], goals: Goals) -> list[str]:
    """Each goal the report misses (or does not report), said in words; empty when all are met."""
    missed = []
    for name, (op, bound) in goals.items():
        value = report.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            missed.append(f"{name}: not measured (goal {op} {bound})")
        elif {"<=": value > bound, ">=": value < bound, "<": value >= bound}[op]:
            missed.append(f"{name}: {value} misses the goal {op} {bound}")
    return missed
