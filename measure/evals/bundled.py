"""The judged collections that ship with ragindex, and how `--collection NAME` finds them.

Each is a BEIR folder under data/ with a README.md (source, licence, how its queries were
written and judged), a LICENSE, the judgment pool (pool.tsv) and every judgment made
(judgments.tsv); see ragindex.measure.evals.pool.
"""

from __future__ import annotations

from pathlib import Path

BUNDLED_DIR = Path(__file__).resolve().parent / "data"


def bundled_collections() -> list[str]:
    """Names of the bundled collections: the folders of BUNDLED_DIR holding a corpus.jsonl."""
    if not BUNDLED_DIR.is_dir():
        return []
    return sorted(p.parent.name for p in BUNDLED_DIR.glob("*/corpus.jsonl"))


def bundled_dir(name: str) -> Path | None:
    """The folder of a bundled collection, or None if no bundled collection has that name."""
    return BUNDLED_DIR / name if name in bundled_collections() else None
