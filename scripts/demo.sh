#!/usr/bin/env bash
# Set up .venv (if needed) and run the main job: train the embedded SmolLM2-135M-Instruct
# with GRPO on 3x3 lakes of llmgym/FrozenLake-v1 for 60 steps (12.6 minutes on a 2-core CPU in
# the latest recorded run, 16.3 before its update's micro-batches grew to 8,192 tokens:
# benchmarks/results/demo.json), then print the eval success before and after and the path of
# the learning-curve plot.
# Extra arguments go to scripts/demo_train.py, e.g. `bash scripts/demo.sh --steps 20`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
exec .venv/bin/python scripts/demo_train.py "$@"
