"""The Dockerfiles copy every folder the distribution maps into ragindex.* (no docker needed)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("dockerfile", ["operator.Dockerfile", "ray.Dockerfile"])
def test_every_package_folder_is_copied(dockerfile: str) -> None:
    # Found building the images after `log/` joined the distribution: setuptools refused to
    # build ragindex ("package directory 'log' does not exist") inside the image.
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    folders = set(pyproject["tool"]["setuptools"]["package-dir"].values())
    text = (REPO / "docker" / dockerfile).read_text()
    copied = set(re.findall(r"^COPY (?:--chown=\S+ )?(\S+)/ \1/$", text, flags=re.MULTILINE))
    assert folders <= copied, f"{dockerfile} misses {sorted(folders - copied)}"
