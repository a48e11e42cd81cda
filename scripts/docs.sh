#!/usr/bin/env bash
# Build the documentation site into site/ (or the folder given as the first argument) with
# `mkdocs build --strict`: a broken link, a missing page or any warning fails the build, and
# docs/hooks.py fails it on a broken internal link or picture in the built HTML.
# The pages' figures are generated from benchmarks/results/*.json as the build starts
# (docs/gen_pages.py). Installs the docs extra into .venv when missing (quick when present).
set -euo pipefail
cd "$(dirname "$0")/.."
site=${1:-site}
if [ ! -x .venv/bin/python ]; then
  bash scripts/setup.sh
fi
if ! .venv/bin/python -c "import mkdocs, material, mkdocstrings_handlers.python" 2>/dev/null; then
  echo "==> installing the docs extra into .venv"
  .venv/bin/pip install --quiet -e ".[docs]"
fi
exec .venv/bin/python -m mkdocs build --strict --site-dir "$site"
