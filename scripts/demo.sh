#!/usr/bin/env bash
# Set up .venv (if needed) and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m llmgym.play llmgym/FrozenLake-v0 --agent optimal --episodes 2
