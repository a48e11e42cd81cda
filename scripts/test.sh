#!/usr/bin/env bash
# Set up .venv (if needed) and run the whole test suite, real vLLM included.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k frozen_lake`.
# The run ends with its 15 slowest tests, to keep the whole suite within CI's 30 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
exec .venv/bin/python -m pytest -q --timeout=900 -p no:cacheprovider --durations=15 "$@"
