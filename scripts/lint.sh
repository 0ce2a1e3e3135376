#!/usr/bin/env bash
# Static checks: ruff, mypy, the import-linter layer contracts, and the docs site (its generated
# reference pages current, `mkdocs build --strict`).
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
# The docs site: generated reference pages equal what the code gives today, and a strict build.
"$VENV/bin/python" scripts/gen_docs.py --check
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --quiet --site-dir "$built/site"
