#!/usr/bin/env bash
# Static checks: ruff, mypy and the import-linter layer contracts.
# Our parts live in top-level folders mapped into `ragindex.*` by package-dir, which neither mypy
# nor import-linter can follow from the source tree (mypy would type every import across parts
# as Any); so both check a built copy of the package, and mypy's paths are mapped back to the
# source folders (ragindex/shards/x.py -> shards/x.py).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
VENV=${VENV:-.venv}
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
rm -rf build  # setuptools keeps old files in build/lib: a removed module would be checked again
built=$(mktemp -d)
trap 'rm -rf "$built"' EXIT
uv pip install --quiet --python "$VENV/bin/python" --no-deps --no-build-isolation --target "$built" . >/dev/null
(cd "$built" && "$repo/$VENV/bin/mypy" --config-file "$repo/pyproject.toml" \
    --cache-dir "$repo/.mypy_cache" --show-traceback -p ragindex) | sed -E 's#^ragindex/([a-z_]+)/#\1/#'
(cd "$built" && PYTHONPATH="$built" "$repo/$VENV/bin/lint-imports" --config "$repo/pyproject.toml" --no-cache)
