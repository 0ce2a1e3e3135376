"""The embedded runtime's generation record: `generations.json` in the data directory.

It is the one pointer every command reads to know which generation serves (its spec names the
topics and the replica directories); a promotion or rollback replaces it in one atomic rename.
The decisions (which generation, may it be promoted) are pure, in `ragindex.generations`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ragindex.app.index_opening import load_spec
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.generations import (
    GenerationRecord,
    changed_generation_fields,
    first_generation,
    index_generation,
)
from ragindex.shards import fsync_dir, write_durable

RECORD = "generations.json"


def read_record(data_dir: Path) -> GenerationRecord | None:
    path = data_dir / RECORD
    if not path.exists():
        return None
    return GenerationRecord.from_json(json.loads(path.read_text()))


def write_record(data_dir: Path, record: GenerationRecord) -> None:
    """Replace the record atomically: readers see the old pointer or the new one."""
    data_dir.mkdir(parents=True, exist_ok=True)
    write_durable(data_dir / RECORD, json.dumps(record.to_json(), indent=1).encode())
    fsync_dir(data_dir)


def ensure_record(data_dir: Path, spec: RagIndexSpec) -> GenerationRecord:
    """The record, written with `spec`'s generation serving if the index has none yet."""
    record = read_record(data_dir)
    if record is None:
        record = first_generation(spec, time.time())
        write_record(data_dir, record)
    return record


def serving_spec(data_dir: Path, spec_path: Path | None) -> RagIndexSpec:
    """The spec a command runs with: the serving generation's, with in-place changes from
    `spec_path`; a spec naming another generation is refused (that takes a reindex)."""
    record = read_record(data_dir)
    if record is None or record.active is None:
        return load_spec(spec_path)
    active = record.spec_of(record.active)
    if spec_path is None:
        return active
    requested = load_spec(spec_path)
    if index_generation(requested) != record.active:
        changed = ", ".join(changed_generation_fields(active, requested))
        raise InvalidInput(
            f"{spec_path} changes {changed}, which needs a new index generation; {data_dir}"
            f" serves generation {record.active}. Run `ragindex reindex --spec {spec_path}`"
            " to build it from the log and switch when it is complete."
        )
    return requested
