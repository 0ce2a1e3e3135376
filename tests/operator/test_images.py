"""What the images and the pods e2e are built from agrees with itself (no docker needed)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from .conftest import kuberay_version

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


def test_kuberay_manifest_runs_the_pinned_release() -> None:
    # The pods e2e once ran an image tag that no script built any more (v1.7.0 after the pin
    # moved to v1.6.2): the node could only fail with ErrImageNeverPull, 20 minutes in.
    pinned = kuberay_version()
    manifest = (REPO / "tests" / "operator" / "manifests" / "kuberay.yaml").read_text()
    assert re.findall(r"image: ragindex/kuberay:(\S+)", manifest) == [pinned]


def test_ray_image_installs_no_torch() -> None:
    # The lean Ray image: the ONNX encoders need none of torch, transformers or
    # sentence-transformers (the image's build also proves it by answering a query).
    lines = (REPO / "docker" / "ray-requirements.txt").read_text().splitlines()
    names = {line.split("[")[0].strip().lower() for line in lines if line and line[0] != "#"}
    assert "onnxruntime" in names
    assert not {"torch", "transformers", "sentence-transformers", "flagembedding"} & names
